"""What pytest reported, recorded from the gate's hooks: the one place that
reads pytest's objects (items, collection and test reports, the session, the
command line's options) and pytest's JUnit writer (junitxml's `xml_key`, its
LogXML). The gate (gate.py) hands each hook's objects here; `freeze` makes
the record the rules judge (run_records.Session).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from _pytest.junitxml import LogXML, xml_key

from pty_acceptance.gate import failures, invocation
from pty_acceptance.decision.run_records import Session, frozen
from pty_acceptance.decision.rules import NARROWING_OPTIONS, worse
from pty_acceptance.report import reports


class Recorder:
    """Filled while the session runs; `freeze` when it ends."""

    def __init__(self, root: Path, acceptance: Path):
        self.root = root
        self.acceptance = acceptance
        self.items: dict[str, tuple[str, ...]] = {}  # nodeid -> IDs
        self.modules: dict[str, str] = {}  # nodeid -> module relpath
        self.outcomes: dict[str, dict[str, str]] = {}  # nodeid -> phase -> worst outcome
        self.reports: dict[tuple[str, str], int] = {}  # (nodeid, phase) -> reports seen
        self.collected: dict[str, int] = {}  # nodeid -> times collected
        self.not_run: dict[str, str] = {}  # nodeid -> why it did not run (failures.not_run)
        self.concerns: dict[str, list[str]] = {}  # nodeid -> "<ID>: text"
        self.collect_errors: list[str] = []
        self.outside: list[str] = []
        self.deselected = 0
        self.interrupted = False

    def item(self, item: pytest.Item) -> None:
        """A collected test: its requirement IDs and its module, or outside acceptance/."""
        path = Path(item.path).resolve()
        if self.acceptance not in path.parents:
            self.outside.append(item.nodeid)
            return
        self.collected[item.nodeid] = self.collected.get(item.nodeid, 0) + 1
        self.items[item.nodeid] = tuple(failures.requirement_ids(item))
        self.modules[item.nodeid] = str(path.relative_to(self.root.resolve()))

    def withheld(self, item: pytest.Item, cause: str) -> None:
        """A test not run: the preflight's `cause` withholds it."""
        self.item(item)
        self.not_run[item.nodeid] = cause

    def collect_report(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(report.nodeid or "(session)")

    def test_report(self, report: pytest.TestReport) -> None:
        """One phase's report: its worst outcome so far, how often it came,
        a shared cause of not running (failures.not_run), concerns recorded."""
        if report.failed and (why := failures.not_run_cause(report.longreprtext)):
            self.not_run.setdefault(report.nodeid, why)
        outcome: str = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        key = (report.nodeid, report.when)
        self.reports[key] = self.reports.get(key, 0) + 1
        phases = self.outcomes.setdefault(report.nodeid, {})
        phases[report.when] = worse(phases.get(report.when, "passed"), outcome)
        said = self.concerns.setdefault(report.nodeid, [])
        said += [str(v) for k, v in report.user_properties if k == "concern" and str(v) not in said]

    def freeze(self, config: pytest.Config, session: pytest.Session, exitstatus: int,
               stops: tuple[str, ...] = (), unwatched: str | None = None, bound: str | None = None) -> Session:
        """The record of the session, as it ends; `stops`, `unwatched`, `bound`:
        what the run's own watches saw (gate.py)."""
        narrowing = tuple((flag, repr(value)) for attr, flag in NARROWING_OPTIONS
                          if (value := getattr(config.option, attr, None)))
        return Session(
            items=frozen(self.items), modules=frozen(self.modules),
            outcomes=frozen({n: frozen(p) for n, p in self.outcomes.items()}),
            reports=frozen(self.reports), collected=frozen(self.collected),
            not_run=frozen(self.not_run), concerns=frozen({n: tuple(c) for n, c in self.concerns.items()}),
            collect_errors=tuple(self.collect_errors), outside=tuple(self.outside),
            deselected=self.deselected,
            interrupted=self.interrupted or bool(session.shouldstop or session.shouldfail),
            narrowing=narrowing, args=tuple(config.args), shape_problems=tuple(invocation.problems(config, self.root)),
            junit=junit_writer(config) is not None, exitstatus=int(exitstatus),
            stops=stops, unwatched=unwatched, bound=bound)


NOT_RUN_KEY = "pty_acceptance_not_run"  # a keyword of the report_not_run reports (gate.pytest_report_teststatus)


def report_not_run(item: pytest.Item, why: str) -> None:
    """Report a test that is not run (JUnit, terminal) with its requirement
    IDs: failed at setup, `why` its text (a JUnit `error`: not passed, for
    every reader), then a passing teardown."""
    keywords = {k: 1 for k in item.keywords} | {NOT_RUN_KEY: 1}
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for when, outcome, longrepr in (("setup", "failed", why), ("teardown", "passed", None)):
        item.ihook.pytest_runtest_logreport(report=pytest.TestReport(
            item.nodeid, item.location, keywords, outcome, longrepr, when,  # type: ignore[arg-type]  # pytest's words, from the tuple above
            user_properties=list(item.user_properties)))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


# -- pytest's JUnit writer
def junit_writer(config: pytest.Config) -> LogXML | None:
    return config.stash.get(xml_key, None)


def junit_file(config: pytest.Config) -> str | None:
    """Where pytest's JUnit writer wrote its report (None: it is not on)."""
    xml = junit_writer(config)
    return xml.logfile if xml is not None else None


def show_published(config: pytest.Config, path: str) -> None:
    """What pytest's "generated xml file" line shows: the published report."""
    cast(LogXML, junit_writer(config)).logfile = path  # it published: the writer is on


class SuiteProperties:
    """The JUnit report's suite-level properties, added through the JUnit
    writer pytest already runs; a repeated name is numbered
    (reports.property_name: `pin`, `pin.2`, ...)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.names: dict[str, int] = {}  # property names used so far

    def add(self, name: str, value: str) -> None:
        xml = junit_writer(self.config)
        if xml is not None:
            xml.add_global_property(reports.property_name(name, self.names), value)
