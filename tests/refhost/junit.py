"""Reading a reference run's JUnit report: outcomes, requirement IDs, gate.
The gate's own verdict case (classname `pty-acceptance`, name `verdict`) is
not one of the checklist's tests: `verdict` holds its outcome, `cases` the rest."""
from __future__ import annotations

import pathlib
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

MESSAGE_MAX = 400


@dataclass(frozen=True)
class Case:
    name: str
    outcome: str  # passed | failure | error | skipped
    requirements: tuple[str, ...]
    message: str = ""  # the first line of a failure's or error's message, bounded


VERDICT_CASE = ("pty-acceptance", "verdict")  # pty_acceptance.report.reports.VERDICT_CASE


@dataclass(frozen=True)
class Report:
    cases: list[Case]
    properties: list[tuple[str, str]]
    verdict: str = "missing"  # the gate's verdict case: passed | failure | missing

    @classmethod
    def find(cls, run_dir: pathlib.Path) -> "Report | None":
        found = sorted((run_dir / "reports").glob("acceptance-*.xml"))
        return cls.parse(found[-1]) if found else None

    @classmethod
    def parse(cls, path: pathlib.Path) -> "Report":
        root = ET.parse(path).getroot()
        cases, verdict = [], "missing"
        for c in root.iter("testcase"):
            bad = [ch for ch in c if ch.tag in ("failure", "error", "skipped")]
            if (c.get("classname"), c.get("name")) == VERDICT_CASE:
                verdict = bad[0].tag if bad else "passed"
                continue
            reqs = tuple(p.get("value") for p in c.iter("property") if p.get("name") == "requirement")
            message = (bad[0].get("message") or "").strip().split("\n", 1)[0][:MESSAGE_MAX] if bad else ""
            cases.append(Case(f"{c.get('classname')}::{c.get('name')}", bad[0].tag if bad else "passed",
                              reqs, message))
        props = root.find("./testsuite/properties")
        # suite-level names are unique in the report (blocker, blocker.2, ...): the base name
        glob = [(re.sub(r"\.[0-9]+$", "", p.get("name")), p.get("value"))
                for p in props] if props is not None else []
        return cls(cases, glob, verdict)

    def failed(self) -> list[Case]:
        return [c for c in self.cases if c.outcome != "passed"]

    def failed_ids(self) -> set[str]:
        return {i for c in self.failed() for i in c.requirements}

    def prop(self, name: str) -> list[str]:
        return [v for n, v in self.properties if n == name]

    def blocker_ids(self) -> set[str]:
        return {i for v in self.prop("blocker") for i in v.split(": ", 1)[0].split()}
