"""A re-render checks a report's cases against the node-id list of the suite
it runs from (SUITE-2, report/verdict.py `against`): READY only for a report
that names that suite's `suite-tree` and whose cases are its listed tests,
each passed. The verdict fixtures (tests/fixtures/verdict/*.xml) were written
by a suite of another tree; the tests that re-render them READY rewrite them
at test time as reports of this checkout's suite (`as_suite`), so that no
digest is checked in. A fixture project's report is re-rendered with that
project as the checkout (`report_as`), as a reviewer re-renders with the
checkout of the suite that wrote it."""

from __future__ import annotations

import functools
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from pty_acceptance.decision import nodeids
from pty_acceptance.provenance import suite_identity
from pty_acceptance.report import reports, verdict

from conftest import REPO


@functools.lru_cache(maxsize=4)
def suite_of(root: Path = REPO) -> verdict.Suite:
    """What `pty-acceptance report` run from the checkout `root` checks against (cli.this_suite)."""
    return verdict.Suite(suite_identity.tree_of(root), tuple(nodeids.load(root)), f"the checkout {root}")


def _case(nodeid: str, ids: tuple[str, ...]) -> ET.Element:
    """A passed test case as pytest's xunit1 writes one (verdict._nodeid reads it back)."""
    module, *rest = nodeid.split("::")
    classname = ".".join([module.removesuffix(".py").replace("/", "."), *rest[:-1]])
    case = ET.Element("testcase", classname=classname, name=rest[-1], file=module, line="1", time="0.1")
    props = ET.SubElement(case, "properties")
    for i in ids:
        ET.SubElement(props, "property", name="requirement", value=i)
    return case


def as_suite(data: bytes, root: Path = REPO) -> bytes:
    """A fixture report rewritten as a report of the suite at `root`: its
    `suite-tree` that suite's, and its test cases exactly that suite's
    node-id list (a listed test the fixture holds kept as it was recorded,
    outcome included; one it lacks added, passed, with its listed IDs; any
    other dropped), the verdict case last, the totals counted again."""
    tree = ET.ElementTree(ET.fromstring(data))
    suite = tree.getroot().find("./testsuite")
    props = suite.find("./properties")
    for p in list(props):
        if reports.base_name(p.get("name", "")) == "suite-tree":
            props.remove(p)
    ET.SubElement(props, "property", name="suite-tree", value=suite_of(root).tree)
    listed = nodeids.load(root)
    held, verdict_cases = {}, []
    for c in suite.findall("./testcase"):
        suite.remove(c)
        if reports.is_verdict_case(c):
            verdict_cases.append(c)
        else:
            held.setdefault(verdict._nodeid(c)[0], c)
    cases = [held.get(n) or _case(n, ids) for n, ids in listed.items()] + verdict_cases
    suite.extend(cases)
    suite.set("tests", str(len(cases)))
    for attr, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        suite.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))
    return ET.tostring(tree.getroot(), encoding="utf-8", xml_declaration=True)


def fixture_as_suite(name: str, out_dir: Path, root: Path = REPO) -> Path:
    """tests/fixtures/verdict/<name>.xml as a report of the suite at `root`, written to out_dir/<name>.xml."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.xml"
    path.write_bytes(as_suite((REPO / f"tests/fixtures/verdict/{name}.xml").read_bytes(), root))
    return path


# `pty-acceptance ARGS` run from another checkout (its PROJECT): a fixture project's
_CLI_AS = ("import sys; from pathlib import Path; from pty_acceptance import cli; "
           "cli.PROJECT = Path(sys.argv[1]); sys.exit(cli.main(sys.argv[2:]))")


def report_as(root: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """`pty-acceptance report ARGS` as the checkout `root` runs it: its cases
    checked against root's suite-tree and node-id list."""
    return subprocess.run([sys.executable, "-c", _CLI_AS, str(root), "report", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
