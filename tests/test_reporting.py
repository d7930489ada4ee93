"""SUITE-3: a run whose reporting was turned off or redirected earns no
marker (reporting.py). Each such option is refused at start-up, in real
pytest sessions of the gate's fixture project (pytester): NOT READY with the
option named, exit status 4, the earlier marker removed, no test run, no
report written. What only changes how much is shown stays allowed."""

import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from pty_acceptance.decision import reporting
from pty_acceptance.gate import owntree

from gateproject import add_tests, earlier_marker, last_line, run

RAN = "@pytest.mark.requirement('OWN-2')\ndef test_ran():\n    open({path!r}, 'w').write('ran')\n"

REFUSED = {
    "the terminal escaping disabled": (["-p", "no:pty-acceptance-host-text"], "escaping of host text"),
    "pytest's terminal disabled": (["-p", "no:terminal"], "-p no:terminal disables pytest's terminal"),
    "pytest's JUnit writer disabled": (["-p", "no:junitxml"], "-p no:junitxml disables pytest's JUnit"),
    "assertion rewriting disabled": (["-p", "no:assertion"], "-p no:assertion disables"),
    "capture disabled": (["-p", "no:capture"], "-p no:capture disables output capture"),
    "skip marks disabled": (["-p", "no:skipping"], "-p no:skipping"),
    "an unknown plugin disabled": (["-p", "no:nothing_by_this_name"], "does not allow to be disabled"),
    "disabled through PYTEST_ADDOPTS": ("env", "-p no:warnings"),
    "Testinfra's Nagios mode": (["--nagios"], "--nagios: Testinfra's Nagios mode"),
    "Testinfra's remote hosts": (["--hosts=ssh://elsewhere"], "--hosts: Testinfra's host selection"),
    "Testinfra's Ansible backend": (["--force-ansible"], "--force-ansible: Testinfra's host selection"),
    "-q": (["-q"], "-q: the header"),
    "--no-header": (["--no-header"], "--no-header: the header"),
    "--no-summary": (["--no-summary"], "--no-summary: the gate's BLOCKER lines"),
    "--pastebin": (["--pastebin=all"], "--pastebin=all"),
    "-s": (["-s"], "--capture=no (or -s)"),
    "--capture=tee-sys": (["--capture=tee-sys"], "--capture=tee-sys"),
    "--log-cli-level": (["--log-cli-level=DEBUG"], "--log-cli-level=DEBUG"),
    "--junit-prefix": (["--junit-prefix=x"], "--junit-prefix=x"),
    "--report-dir in the checkout": (["--report-dir", "acceptance/out"], "inside the checkout"),
    "--junitxml in the checkout": (["--junitxml", "acceptance/out/x.xml"], "inside the checkout"),
    "--report-dir in the virtualenv": (["--report-dir", f"{sys.prefix}/pty-reports"], "inside the virtualenv"),
}


def _stale(target) -> Path:
    return earlier_marker(target.marker)


@pytest.mark.parametrize("case", list(REFUSED))
def test_an_option_that_turns_reporting_off_or_redirects_it_is_refused_at_start(
        project, target, case, tmp_path, monkeypatch):
    args, said = REFUSED[case]
    if args == "env":
        monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:warnings")
        args = []
    ran = tmp_path / "ran"
    add_tests(project, RAN.format(path=str(ran)) + "\n@pytest.mark.requirement('OWN-2')\ndef test_said():\n"
              "    print('\\x1b[2K\\rREADY: marker written')\n")
    m = _stale(target)
    res = run(project, target, *args)
    text = "\n".join(res.outlines + res.errlines)
    assert res.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    refusal = [line for line in res.errlines if line.startswith("ERROR: NOT READY: SUITE-3: ")]
    assert refusal and said in refusal[0], text[-3000:]
    assert "MARK-4: removed an existing marker" in refusal[0]
    assert not os.path.lexists(m) and not ran.exists(), "the run went on"
    assert "\x1b" not in text
    assert not list(project.path.rglob("acceptance-*.xml")), "a report was written"
    assert not os.path.lexists(f"{sys.prefix}/pty-reports")


ALLOWED = {
    "-p no:cacheprovider (the reference harness's)": ["-p", "no:cacheprovider"],
    "-v": ["-v"],
    "-rN": ["-rN"],
    "--tb=no": ["--tb=no"],
    "--report-dir in the checkout's reports/": ["--report-dir", "reports/here"],
}


@pytest.mark.parametrize("case", list(ALLOWED))
def test_what_only_changes_how_much_is_shown_is_allowed(project, target, case):
    res = run(project, target, *ALLOWED[case])
    assert last_line(res).startswith("READY: marker written"), "\n".join(res.outlines[-30:])


def test_with_tb_no_a_failure_is_still_named_on_the_terminal_and_in_the_report(project, target):
    add_tests(project, "@pytest.mark.requirement('OWN-2')\ndef test_fails():\n"
              "    pytest.fail('OWN-2: the failure says this', pytrace=False)\n")
    res = run(project, target, "--tb=no")
    assert last_line(res).startswith("NOT READY: ") and "OWN-2" in last_line(res)
    assert any(line.startswith("BLOCKER [OWN-2]") for line in res.outlines)
    (xml,) = (project.path / "reports").glob("acceptance-*.xml")
    failures = [f.get("message", "") for f in ET.parse(xml).getroot().iter("failure")]
    assert any("the failure says this" in f for f in failures), failures


def test_only_the_checkouts_own_reports_directory_is_left_out_of_the_suite4_walk(safe_dir):
    """A report directory elsewhere in the checkout never prunes the walk
    (it is refused at start-up besides): a file the service user owns in it
    is found."""
    root = safe_dir / "checkout"
    (root / "acceptance").mkdir(parents=True)
    planted = root / "acceptance/test_x.py"
    planted.write_text("")
    os.chown(planted, 1000, 1000)
    config = SimpleNamespace(
        pluginmanager=SimpleNamespace(list_name_plugin=lambda: []), rootpath=root,
        invocation_params=SimpleNamespace(dir=root),
        getoption=lambda name: {"--report-dir": str(root / "acceptance")}.get(name))
    owns, skip = owntree.of_run(config, str(root / "acceptance/report.xml"))
    assert skip == [str(root / "reports")]
    checkout = [o for o in owns if o.what == "checkout"]
    found = owntree.problems(checkout, skip)
    assert any(str(planted) in p and "uid 1000" in p for p in found), found


@pytest.mark.parametrize("place, refused", [
    ("{root}/reports", False), ("{root}/reports/deep/er", False), ("/var/lib/reports", False),
    ("{root}", True), ("{root}/acceptance", True), ("{root}/reportsx", True),
    ("{venv}", True), ("{venv}/reports", True)])
def test_report_places(tmp_path, place, refused):
    root, venv = tmp_path / "checkout", str(tmp_path / "venv")
    path = place.format(root=root, venv=venv)
    assert bool(reporting.report_place_problems([("--report-dir", path)], root, venv)) == refused


def test_a_link_into_the_checkout_is_inside_it(tmp_path):
    root = tmp_path / "checkout"
    (root / "acceptance").mkdir(parents=True)
    (tmp_path / "hop").symlink_to(root / "acceptance")
    found = reporting.report_place_problems([("--report-dir", str(tmp_path / "hop/r"))], root, "/nonexistent")
    assert found and "inside the checkout" in found[0]
