"""The preflight (issue 22): read-only, before any module; on a machine that
is not a target host (this one: PID 1 is not systemd) it names that cause
once, first and last, and no test runs; a check only some tests need
withholds only those."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from pty_acceptance.decision import preflight

from conftest import REPO
from gateproject import PASSING, junit, last_line, relist, run

BUN = preflight.PreflightCheck("program plugin.bun (PLUGIN-1)", False, "/x/bun is not an executable file",
                        ("PLUGIN-1",))


def test_this_machine_is_not_a_target_host():
    found = preflight.check(str(REPO / "inventories/reference.yml"))
    assert found.cause and found.cause.startswith("systemd: PID 1 is ") and "not a target host" in found.cause
    assert found.findings[0].what == "systemd"
    assert found.withheld(("OWN-1",)) == found.cause  # every test needs systemd


def test_an_inventory_that_does_not_load_is_a_finding_not_an_exception(tmp_path):
    bad = tmp_path / "inv.yml"
    bad.write_text("all: {hosts: {}}\n")
    found = preflight.check(str(bad))
    inv = next(f for f in found.findings if f.what == "inventory")
    assert not inv.ok and "expected exactly one host" in inv.detail and found.inventory is None


def test_a_check_some_tests_need_withholds_only_those():
    found = preflight.Result([preflight.PreflightCheck("systemd", True, "PID 1 is systemd"), BUN])
    assert found.cause is None  # nothing keeps every test from running
    assert found.withheld(("PLUGIN-1",)) == BUN.cause
    assert found.withheld(("OWN-1", "OWN-2")) is None


def test_a_program_that_is_missing_or_not_executable_fails(tmp_path):
    (tmp_path / "plain").write_text("#!/bin/sh\n")
    assert not preflight._program(str(tmp_path / "plain"), "x").ok
    assert not preflight._program(str(tmp_path / "absent"), "x").ok
    assert preflight._program("/bin/sh", "sh").ok


def test_the_command_prints_each_check_and_the_first_cause():
    done = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "preflight", "--inventory",
                           str(REPO / "inventories/target.yml")], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert any(l.startswith("FAILED  inventory: ") and "FILL-IN" in l and "RUNTIME-1" in l for l in lines)
    assert lines[-1].startswith("PREFLIGHT FAILED: ") and "first systemd: " in lines[-1]


def test_a_failed_check_withholds_its_tests_and_says_so_once_per_module(project, target):
    (project.path / "acceptance/conftest.py").write_text(  # the fake host, with bun missing
        "from pty_acceptance.decision import preflight\n"
        f"preflight.host_findings = lambda inv: [preflight.PreflightCheck(*{tuple(BUN.__dict__.values())!r})]\n")
    (project.path / "acceptance/test_all.py").write_text(
        PASSING + "\n@pytest.mark.requirement('PLUGIN-1')\ndef test_plugin():\n    pass\n")
    relist(project)
    res = run(project, target, "-ra")  # the project's own addopts has -ra
    text = "\n".join(res.outlines)
    assert last_line(res).startswith("NOT READY: ") and "PLUGIN-1" in last_line(res).split()
    # test_everything names PLUGIN-1 among its IDs: withheld with test_plugin; test_other runs
    assert "BLOCKER [SUITE-3] preflight: program plugin.bun (PLUGIN-1): /x/bun is not an executable file" \
        in text, text[-3000:]
    assert "acceptance/test_all.py: 2 tests not run: preflight: program plugin.bun (PLUGIN-1) (above)" in text
    assert "1 passed, 2 not run" in text  # the test that does not need bun ran
    assert "ERROR" not in text  # pytest's summary counts them apart: the cause is said once, above
    assert not os.path.lexists(target.marker)
    # in the JUnit each is an error at setup (not passed, for every reader), naming the cause
    cases = {c.get("name"): c for c in ET.parse(junit(project)).getroot().iter("testcase")}
    for name in ("test_everything", "test_plugin"):
        (err,) = cases[name].findall("error")
        assert "not run: preflight: program plugin.bun (PLUGIN-1)" in err.get("message"), err.attrib
        assert cases[name].find("skipped") is None
    assert [e.tag for e in cases["test_other"]] == ["properties"]


def test_the_not_ready_html_leads_with_the_cause_once(project, target):
    """Issue 22: the HTML's headline is the verdict and the count, then the
    first causes grouped with their counts and tests; no ID list twice."""
    import re

    target.inventory.write_text(target.inventory.read_text().replace("    revision:", "    revisionx:"))
    res = run(project, target)
    assert last_line(res).startswith("NOT READY: ")
    (html,) = (project.path / "reports").glob("acceptance-*.html")
    page = html.read_text()
    head = page[page.index('id="verdict"'):page.index('id="matrix"')]
    assert re.search(r'id="verdict">NOT READY: \d+ blockers</p>', head), head[:300]
    causes = re.findall(r'<li class="MUST-FIX">(.*?) <b>x(\d+)</b>', head)
    assert causes and causes[0][0].startswith("not run: preflight: inventory: ") and causes[0][1] == "2", causes
    assert "revisionx: unknown key" in causes[0][0]
    assert head.count("OWN-1") <= 2  # the blocker list names it once (the module's line); no headline list
