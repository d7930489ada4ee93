"""Every JUnit report the suite writes is read by third-party tools
(junitparser, xunitparser: issue 22): READY, NOT READY, a run whose preflight
failed, and the verdict fixtures the suite's own tests read back. Read as a
CI system reads it (issue 29 item 9), a NOT READY report is unsuccessful:
the gate's verdict is a test case of its own that fails naming the
blockers, a test the preflight withheld is an error, not a skip, and the
suite is named after the host (a fleet's reports are told apart)."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, assert_junit_readers_accept
from gateproject import add_tests, last_line, run
from reportsuite import report_as


def _report(project):
    (found,) = (project.path / "reports").glob("acceptance-*.xml")
    return found


@pytest.mark.parametrize("fixture", sorted((REPO / "tests/fixtures/verdict").glob("*.xml")), ids=lambda p: p.name)
def test_the_verdict_fixtures(fixture):
    assert_junit_readers_accept(fixture)


def test_a_ready_run(project, target):
    res = run(project, target)
    assert last_line(res).startswith("READY: ")
    assert_junit_readers_accept(_report(project))


def test_a_not_ready_run_with_its_blockers(project, target):
    add_tests(project, "@pytest.mark.requirement('OWN-2')\ndef test_fails():\n    assert False\n")
    res = run(project, target, "--no-marker")
    assert last_line(res).startswith("NOT READY: ")
    assert_junit_readers_accept(_report(project))


def test_a_run_whose_preflight_failed(project, target):
    target.inventory.write_text(target.inventory.read_text().replace("    revision:", "    revisionx:"))
    res = run(project, target)
    assert last_line(res).startswith("NOT READY: ")
    assert_junit_readers_accept(_report(project))


# -- the strict form (Jenkins xUnit's junit-10.xsd), written on request by `report --strict-junit`.
# The XSD's rules for the elements pytest writes, spelled out (the schema file is not shipped):
STRICT_ATTRS = {
    "testsuites": {"name", "time", "tests", "failures", "errors"},
    "testsuite": {"name", "tests", "failures", "errors", "group", "time", "skipped", "timestamp",
                  "hostname", "id", "package", "file", "log", "url"},
    "testcase": {"name", "time", "classname", "group"},
    "property": {"name", "value"}, "properties": set(),
    "failure": {"type", "message"}, "error": {"type", "message"}, "skipped": {"type", "message"},
    "system-out": set(), "system-err": set(),
}
STRICT_CHILDREN = {
    "testsuites": {"testsuite"}, "testsuite": {"testsuite", "properties", "testcase", "system-out", "system-err"},
    "testcase": {"skipped", "error", "failure", "system-out", "system-err"}, "properties": {"property"},
}


def strict_problems(data: bytes) -> list[str]:
    import xml.etree.ElementTree as ET

    out = []
    for el in ET.fromstring(data).iter():
        extra = set(el.attrib) - STRICT_ATTRS.get(el.tag, set())
        if el.tag not in STRICT_ATTRS or extra:
            out.append(f"<{el.tag}> {sorted(extra) or 'not in the schema'}")
        out += [f"<{child.tag}> inside <{el.tag}>" for child in el
                if child.tag not in STRICT_CHILDREN.get(el.tag, set())]
    return out


def strict_form(project, report: Path, out_dir: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """`pty-acceptance report --strict-junit` with the project's checkout (the
    suite that wrote the report: reportsuite.report_as): its run, and the
    strict form it wrote."""
    done = report_as(project.path, report, "--checklist", project.path / "ROOT-ACCEPTANCE.md",
                     "--out-dir", out_dir, "--strict-junit")
    strict = out_dir / report.name.replace(".xml", ".strict.xml")
    assert strict_problems(strict.read_bytes()) == [], done.stdout + done.stderr
    return done, strict


def test_the_report_is_not_strict_junit_but_its_strict_form_is(project, target, tmp_path):
    run(project, target)
    report = _report(project)
    assert strict_problems(report.read_bytes())  # testcase file/line and properties: SUITE-2's form
    done, strict = strict_form(project, report, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    text = strict.read_text()
    assert "requirement: OWN-1" in text and "evidence: checked: all of it" in text
    assert_junit_readers_accept(strict)


# -- NOT READY is red to every reader (issue 29 item 9)
def read_by_every_reader(path: Path) -> dict:
    """What junitparser, xunitparser and the strict form's reader make of a
    report: whether it is successful, and the failing verdict case's text."""
    import junitparser
    import xunitparser

    xml = junitparser.JUnitXml.fromfile(str(path))
    (suite,) = list(xml)
    bad = [c for c in suite if any(isinstance(r, (junitparser.Failure, junitparser.Error)) for r in c.result)]
    verdicts = [c for c in suite if (c.classname, c.name) == ("pty-acceptance", "verdict")]
    with open(path, "rb") as f:
        xsuite, result = xunitparser.parse(f)
    xfail = {f"{tc.classname}::{tc.methodname}": tc for tc, _ in result.failures}
    return {
        "suite name": suite.name,
        "junitparser not passed": len(bad),
        "junitparser verdict": [(r.message, r.text) for c in verdicts for r in c.result],
        "xunitparser successful": result.wasSuccessful(),
        "xunitparser errors": len(result.errors),
        "xunitparser skipped": len(result.skipped),
        "xunitparser verdict": xfail.get("pty-acceptance::verdict"),
    }


def assert_red(path: Path, host: str, *blockers: str) -> dict:
    seen = read_by_every_reader(path)
    assert seen["suite name"] == host, seen
    assert not seen["xunitparser successful"] and seen["junitparser not passed"], seen
    ((message, text),) = seen["junitparser verdict"]
    assert message.startswith("NOT READY: "), message
    tc = seen["xunitparser verdict"]
    assert tc is not None and tc.message == message and tc.trace == text
    for b in blockers:
        assert b in text, text
    return seen


def test_a_not_ready_run_whose_preflight_failed_is_red_to_every_reader(project, target, tmp_path):
    target.inventory.write_text(target.inventory.read_text().replace("    revision:", "    revisionx:"))
    res = run(project, target)
    assert last_line(res).startswith("NOT READY: ")
    report = _report(project)
    # the inventory did not load: the suite is named after the machine, as the report's file is
    seen = assert_red(report, os.uname().nodename, "SUITE-3: preflight: ", "tests not run: preflight: inventory")
    # every test withheld is an error, none a skip: 2 tests and the verdict
    assert (seen["xunitparser errors"], seen["xunitparser skipped"], seen["junitparser not passed"]) == (2, 0, 3)
    done, strict = strict_form(project, report, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert_red(strict, os.uname().nodename, "SUITE-3: preflight: ")


def test_a_run_whose_tests_all_passed_but_the_gate_blocked_is_red_to_every_reader(project, target, tmp_path):
    """The gate's own blockers (here: a binary that is not the inventory's
    build, read at marker time) used to live only in the suite property
    `gate`, which GitLab does not read: the verdict case fails with them."""
    Path(target.binaries[2]).write_bytes(b"not the claimed build\n")
    res = run(project, target)
    assert last_line(res).startswith("NOT READY: ")
    report = _report(project)
    seen = assert_red(report, "fake", f"SCOPE-2 MARK-3: {target.binaries[2]} hashes to ")
    assert seen["junitparser not passed"] == 1  # the tests passed; the verdict did not
    done, strict = strict_form(project, report, tmp_path)
    assert done.returncode == 1
    assert_red(strict, "fake", f"SCOPE-2 MARK-3: {target.binaries[2]} hashes to ")


def test_a_ready_run_is_green_to_every_reader(project, target, tmp_path):
    res = run(project, target)
    assert last_line(res).startswith("READY: ")
    for path in (_report(project), strict_form(project, _report(project), tmp_path)[1]):
        seen = read_by_every_reader(path)
        assert seen["xunitparser successful"] and not seen["junitparser not passed"], seen
        assert seen["suite name"] == "fake" and seen["junitparser verdict"] == []
