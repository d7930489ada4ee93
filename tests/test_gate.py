"""The marker gate in real pytest sessions (pytester): a marker only after a
complete, passing, unnarrowed run as root with unchanged content; never after
any other run shape, and an earlier marker is always removed."""

import hashlib
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pty_acceptance.decision import nodeids, readiness_marker as marker
from pty_acceptance.report import reports

from conftest import FakeBus
from gateproject import (PASSING, add_tests, assert_refused, earlier_marker, expectation,
                         last_line, run)


def test_complete_passing_run_writes_a_verified_marker(project, target):
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-20:])
    assert res.ret == 0
    marker.verify(target.marker, expectation(target))
    st = os.lstat(target.marker)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o644)
    written = list((project.path / "reports").glob("acceptance-fake-*.xml"))
    assert len(written) == 1
    tree = ET.parse(written[0])
    cases = list(tree.getroot().iter("testcase"))
    for case in cases[:-1]:
        props = [(p.get("name"), p.get("value")) for p in case.iter("property")]
        assert ("requirement", "OWN-1") in props
    verdict = cases[-1]  # the gate's own case, last: passed, READY
    assert (verdict.get("classname"), verdict.get("name")) == reports.VERDICT_CASE
    assert not [e for e in verdict if e.tag in ("failure", "error", "skipped")]
    assert verdict.find("system-out").text == f"READY: marker written {target.marker}"
    suite = tree.getroot().find("./testsuite")
    assert suite.get("name") == "fake"  # the inventory's host
    names = [p.get("name") for p in suite.find("./properties")]
    assert "MARK-4" in names and "gate" in names


SHAPES = {
    "failing test": ("@pytest.mark.requirement('OWN-2')\ndef test_fails():\n    assert False\n", [], "OWN-2"),
    "skipped test": ("@pytest.mark.requirement('OWN-2')\ndef test_skips():\n    pytest.skip('no')\n", [], "OWN-2"),
    "xfailed test": ("@pytest.mark.requirement('OWN-2')\n@pytest.mark.xfail\ndef test_xf():\n    assert False\n",
                     [], "OWN-2"),
    "xpassed test": ("@pytest.mark.requirement('OWN-2')\n@pytest.mark.xfail\ndef test_xp():\n    pass\n", [], "OWN-2"),
    "fixture error": ("@pytest.fixture\ndef broken():\n    raise RuntimeError('x')\n"
                      "@pytest.mark.requirement('OWN-2')\ndef test_err(broken):\n    pass\n", [], "OWN-2"),
    "teardown error": ("@pytest.fixture\ndef bad_td():\n    yield\n    raise RuntimeError('td')\n"
                       "@pytest.mark.requirement('OWN-2')\ndef test_td(bad_td):\n    pass\n", [], "OWN-2"),
    "-k": ("", ["-k", "everything"], "SUITE-3"),
    "-m": ("", ["-m", "requirement"], "SUITE-3"),
    "--deselect": ("", ["--deselect", "acceptance/test_all.py::test_other"], "SUITE-3"),
    "-x after a failure": ("@pytest.mark.requirement('OWN-2')\ndef test_a_fails():\n    assert False\n",
                           ["-x"], "SUITE-3"),
    "--maxfail": ("", ["--maxfail", "5"], "SUITE-3"),
    "--collect-only": ("", ["--collect-only"], "SUITE-3"),
    "--ignore": ("", ["--ignore", "acceptance/nothing.py"], "SUITE-3"),
    "interrupt": ("@pytest.mark.requirement('OWN-2')\ndef test_zz_interrupt():\n    raise KeyboardInterrupt\n",
                  [], "SUITE-3"),
    "collection error": ("", [], "SUITE-3"),
    "--no-marker": ("", ["--no-marker"], "MARK-1"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_non_passing_run_shapes_leave_no_marker(project, target, shape):
    text, args, blocker = SHAPES[shape]
    add_tests(project, text)
    if shape == "collection error":
        (project.path / "acceptance/test_broken.py").write_text("import no_such_module\n")
    # An interrupt must really reach a separate pytest process.
    res = run(project, target, *args, subprocess=(shape == "interrupt"))
    assert_refused(res, target, blocker)


@pytest.mark.parametrize("flag", ["--lf", "--sw"])
def test_last_failed_and_stepwise_shapes(project, target, flag, safe_dir):
    project.makeini("[pytest]\njunit_family = xunit1\n"  # with the cache plugin
                    f"pty_acceptance_run_dir = {safe_dir}/run\n")
    res = run(project, target, flag)
    assert_refused(res, target, "SUITE-3")


@pytest.mark.parametrize("path", ["acceptance/test_all.py", "acceptance/test_all.py::test_everything"])
def test_a_path_narrower_than_acceptance_is_refused(project, target, path):
    res = run(project, target, path=path)
    assert_refused(res, target, "SUITE-3")


def test_a_module_listed_in_the_checklist_but_absent_blocks(project, target):
    with open(project.path / "ROOT-ACCEPTANCE.md", "a") as f:
        f.write("| Peer | `acceptance/test_peer.py` | PEER-1, PEER-2 | planned |\n")
    res = run(project, target)
    assert_refused(res, target, "PEER-1", "PEER-2")
    assert any("acceptance/test_peer.py (Peer) is listed" in l for l in res.outlines)


def test_uncovered_requirement_blocks(project, target):
    (project.path / "acceptance/test_all.py").write_text(
        PASSING.replace("'PLUGIN-1', ", "").replace(", 'PLUGIN-1'", ""))
    res = run(project, target)
    assert_refused(res, target, "PLUGIN-1")


def test_missing_checklist_blocks(project, target):
    (project.path / "ROOT-ACCEPTANCE.md").unlink()
    assert_refused(run(project, target), target, "SUITE-3")


def test_not_root_blocks(project, target, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # what hostfacts.at_marker_time reads
    assert_refused(run(project, target), target, "MARK-1")


def test_binary_swapped_during_the_run_blocks(project, target):
    add_tests(project, f"@pytest.mark.requirement('OWN-2')\ndef test_swap():\n"
                     f"    open({target.binaries[1]!r}, 'ab').write(b'swapped')\n")
    res = run(project, target)
    assert_refused(res, target, "SCOPE-2", "MARK-3")
    assert any("changed during the run" in l for l in res.outlines)


def _runtime(target) -> Path:
    import yaml
    return Path(yaml.safe_load(target.inventory.read_text())["all"]["hosts"]["fake"]["runtime"]["binary"])


def test_runtime_swapped_during_the_run_blocks(project, target):
    """RUNTIME-1 and MARK-3, as SCOPE-2 for the binaries: the runtime lies in a
    directory the service user owns, who can rename another file into its place
    after RUNTIME-1 read it (issue 21 item 4)."""
    runtime = _runtime(target)
    add_tests(project, f"@pytest.mark.requirement('OWN-2')\ndef test_swap():\n"
                     f"    open({str(runtime)!r} + '.new', 'wb').write(b'another runtime')\n"
                     f"    import os; os.rename({str(runtime)!r} + '.new', {str(runtime)!r})\n")
    res = run(project, target)
    assert_refused(res, target, "RUNTIME-1", "MARK-3")
    other = hashlib.sha256(b"another runtime").hexdigest()
    assert any(f"[RUNTIME-1 MARK-3] {runtime} changed during the run: " in l and l.endswith(f"{other} now")
               for l in res.outlines), "\n".join(res.outlines[-20:])
    assert any(f"[RUNTIME-1 MARK-3] at marker time: {runtime} hashes to {other}, the pin runtime.sha256 is "
               in l for l in res.outlines), "\n".join(res.outlines[-20:])


@pytest.mark.parametrize("change", ["other bytes", "absent"])
def test_runtime_not_the_pinned_one_at_session_start_blocks(project, target, change):
    runtime = _runtime(target)
    if change == "absent":
        runtime.unlink()
    else:
        runtime.write_bytes(b"not the approved SEA\n")
    res = run(project, target)
    assert_refused(res, target, "RUNTIME-1", "MARK-3")
    want = "is not readable" if change == "absent" else "hashes to"
    assert any("[RUNTIME-1 MARK-3] at session start: " in l and want in l for l in res.outlines), \
        "\n".join(res.outlines[-20:])


def test_binary_differs_from_inventory_blocks(project, target):
    Path(target.binaries[2]).write_bytes(b"not the claimed build\n")
    assert_refused(run(project, target), target, "SCOPE-2")


def test_supervisor_running_another_copy_blocks(project, target, supervisor):
    """SCOPE-2: a byte-identical, root-owned copy run by a drop-in hashes like
    the installed binary; only its device and inode tell it apart."""
    copy = str(target.base / "opencode-pty-supervisor.copy")
    shutil.copy2(target.binaries[0], copy)
    supervisor(copy)
    res = run(project, target)
    assert_refused(res, target, "SCOPE-2", "MARK-3")
    assert any("at marker time" in l and "opencode-pty-supervisor.copy" in l and
               f"not {target.binaries[0]}" in l for l in res.outlines), "\n".join(res.outlines[-20:])


def test_supervisor_swapped_during_the_run_blocks(project, target, supervisor):
    copy = str(target.base / "other-supervisor")
    shutil.copy2(target.binaries[0], copy)
    add_tests(project, "@pytest.mark.requirement('OWN-2')\ndef test_swap():\n"
                     "    from tests_gate_swap import swap\n    swap()\n")
    import sys
    mod = type(sys)("tests_gate_swap")
    mod.swap = lambda: supervisor(copy)
    sys.modules["tests_gate_swap"] = mod
    try:
        res = run(project, target)
    finally:
        del sys.modules["tests_gate_swap"]
    assert_refused(res, target, "SCOPE-2", "MARK-3")
    assert any("at marker time" in l and "other-supervisor" in l for l in res.outlines)


def test_supervisor_not_running_blocks(project, target):
    FakeBus.main_pid = 0
    res = run(project, target)
    assert_refused(res, target, "SCOPE-2", "MARK-3")
    assert any("has no MainPID" in l for l in res.outlines), "\n".join(res.outlines[-20:])


def test_supervisor_path_that_is_a_link_blocks(project, target, supervisor):
    """The installed path is judged by lstat: a link to what runs never matches."""
    real = str(target.base / "real-supervisor")
    os.rename(target.binaries[0], real)
    os.symlink(real, target.binaries[0])
    supervisor(real)
    res = run(project, target)
    assert_refused(res, target, "SCOPE-2", "MARK-3")
    assert any("is a symlink, not a regular file" in l for l in res.outlines), "\n".join(res.outlines[-20:])


def test_source_manifest_mismatch_blocks(project, target):
    (target.pilot / "supervisor/go.mod").write_text("module changed\n")
    assert_refused(run(project, target), target, "SCOPE-1")


@pytest.mark.parametrize("kind", ["stale marker", "group-writable marker"])
def test_earlier_marker_is_removed_even_when_the_run_fails(project, target, kind):
    m = earlier_marker(target.marker)
    if kind == "group-writable marker":  # root's and a marker still: it goes (MARK-3 grants it nothing)
        m.chmod(0o664)
    add_tests(project, "@pytest.mark.requirement('OWN-2')\ndef test_fails():\n    assert False\n")
    res = run(project, target)
    assert_refused(res, target, "OWN-2")
    assert any(f"removed an existing marker at {m}" in l for l in res.outlines)


def test_what_is_not_a_marker_stands_and_the_run_is_refused(project, target, tmp_path):
    """Issue 38: only a root-owned file that parses as a marker is removed; a
    link at the marker path (once removed, never followed) now stays, named,
    and the run is refused at start-up (test_marker_removal.py has every kind)."""
    m = Path(target.marker)
    m.parent.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    m.symlink_to(victim)
    res = run(project, target)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    said = _said_not_ready(res)
    assert said.startswith("ERROR: NOT READY: MARK-4: ") and f"{m} is a symlink" in said, said
    assert os.path.islink(m) and victim.read_text() == "keep me\n"


def test_unsafe_marker_directory_blocks_the_write(project, target):
    """The marker fails after the report said READY: the report is rewritten NOT READY."""
    d = Path(target.marker).parent
    d.mkdir(parents=True)
    d.chmod(0o777)
    res = run(project, target)
    assert_refused(res, target, "MARK-1")
    props = _gate_props(_report(project))
    assert props["gate"] == ["NOT READY"] and "marker" not in props
    assert any(b.startswith("MARK-1: writing or re-reading the marker failed") for b in props["blocker"])


def test_test_without_requirement_marker_is_a_usage_error(project, target):
    add_tests(project, "def test_unnamed():\n    pass\n")
    res = run(project, target)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert any("test_unnamed: no @pytest.mark.requirement" in l for l in res.errlines + res.outlines)
    assert not os.path.lexists(target.marker)


def test_unknown_requirement_id_is_a_usage_error(project, target):
    add_tests(project, "@pytest.mark.requirement('OWN-9')\ndef test_odd():\n    pass\n")
    res = run(project, target)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert any("unknown requirement IDs ['OWN-9']" in l for l in res.errlines + res.outlines)


def test_suite_own_tests_leave_the_plugin_inert(project, target):
    (project.path / "tests").mkdir()
    (project.path / "tests/test_self.py").write_text("def test_x():\n    pass\n")
    Path(target.marker).parent.mkdir(parents=True)
    Path(target.marker).write_text("untouched\n")
    res = project.runpytest("tests/", "--inventory", str(target.inventory))
    assert res.ret == 0
    assert Path(target.marker).read_text() == "untouched\n"
    assert not any(l.startswith(("READY", "NOT READY")) for l in res.outlines)


FAKE_READY = "\x1b[2K\rREADY: marker written"


def test_host_text_never_reaches_the_terminal_raw(project, target):
    """SUITE-4: a host file name (in a gate blocker) and host text in a failure
    message or captured output are shown escaped, never as escape sequences."""
    (target.pilot / f"supervisor/{FAKE_READY}.go").symlink_to("/nonexistent")
    add_tests(project, "@pytest.mark.requirement('OWN-2')\ndef test_host_text():\n"
                     f"    print({FAKE_READY!r})\n    assert False, {FAKE_READY!r}\n"
                     "@pytest.mark.requirement('OWN-2')\ndef test_host_fail():\n"
                     f"    pytest.fail('BUILD-1: go build said ' + {FAKE_READY!r}, pytrace=False)\n")
    res = run(project, target)
    assert_refused(res, target, "OWN-2", "SCOPE-1")
    shown = "\n".join(res.outlines + res.errlines)
    assert "\x1b" not in shown
    escaped = "\\x1b[2K\\x0dREADY: marker written"
    assert any(l.startswith("BLOCKER [SCOPE-1") and escaped in l for l in res.outlines), shown[-3000:]
    assert any(l.startswith("E ") and escaped in l for l in res.outlines)  # the assertion message
    assert any(escaped in l and "go build said" in l for l in res.outlines)  # pytest.fail
    assert any(l == escaped for l in res.outlines)  # captured stdout


FLAKY = """
@pytest.mark.requirement('OWN-2')
def test_flaky():
    import pathlib
    count = pathlib.Path(__file__).with_name("attempts")
    n = int(count.read_text()) if count.exists() else 0
    count.write_text(str(n + 1))
    assert n > 0, "fails on the first attempt only"
"""

NAIVE_RERUN = """
import pytest
from _pytest.runner import runtestprotocol


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # what a rerun plugin does: run again after a failure, every report logged
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem)
    if any(r.failed for r in reports):
        runtestprotocol(item, nextitem=nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
"""


def test_a_rerun_never_turns_a_failure_into_a_pass(project, target):
    """SUITE-3: the worst outcome of a phase counts, and a phase reported twice blocks."""
    add_tests(project, FLAKY)
    with open(project.path / "conftest.py", "a") as f:
        f.write(NAIVE_RERUN)
    res = run(project, target)
    assert_refused(res, target, "OWN-2", "SUITE-3")
    assert any("test_flaky: call failed" in l for l in res.outlines)
    assert any("test_flaky was reported more than once" in l and "call 2 times (worst: failed)" in l
               for l in res.outlines), res.outlines[-20:]


def test_duplicate_node_ids_block(project, target):
    """--keep-duplicates runs a test twice under one node id: the first result
    (a failure) must not be overwritten by the second (a pass)."""
    add_tests(project, FLAKY)
    res = run(project, target, "--keep-duplicates", "acceptance/")
    assert_refused(res, target, "OWN-2", "SUITE-3")
    assert any("test_flaky was collected 2 times" in l for l in res.outlines), res.outlines[-20:]


# ------------------------------------------- MARK-4: the marker goes first
def _stale(target) -> Path:
    return earlier_marker(target.marker)


def _said_not_ready(res) -> str:
    said = [l for l in res.outlines + res.errlines if "NOT READY" in l]
    assert said, "\n".join(res.outlines[-10:] + res.errlines[-10:])
    return said[-1]


def test_an_inventory_that_fails_to_load_still_removes_the_marker(project, target):
    """Issue 22: the run goes on NOT READY with the preflight's cause first and
    last, every test not run, and a JUnit report that leads with the cause."""
    m = _stale(target)
    text = target.inventory.read_text()
    target.inventory.write_text(text.replace("    revision:", "    revisionx:"))
    res = run(project, target)
    assert res.ret != 0 and not os.path.lexists(m)
    lines = [l for l in res.outlines if l.strip()]
    assert lines[-2].startswith("NOT READY: preflight: inventory: ") and "revision" in lines[-2], lines[-2]
    assert lines[-1].startswith("NOT READY: ")
    head = res.outlines[:res.outlines.index(next(l for l in res.outlines if l.startswith("collected")))]
    assert any(l.startswith("NOT READY: preflight: inventory: ") for l in head), head
    assert any("MARK-4: removed an existing marker" in l for l in res.outlines)
    props = _gate_props(_report(project))
    assert list(props)[0] == "preflight" and "revisionx: unknown key" in props["preflight"][0]
    assert props["gate"] == ["NOT READY"]


def test_an_inventory_that_names_no_marker_removes_the_default_one(project, target, monkeypatch, safe_dir):
    default = earlier_marker(safe_dir / "default/pty-supervisor-verified")
    monkeypatch.setattr(marker, "DEFAULT_PATH", str(default))
    target.inventory.write_text("all: [not, an, inventory\n")
    res = run(project, target)
    assert res.ret != 0 and not os.path.lexists(default)
    assert "inventory" in [l for l in res.outlines if l.startswith("NOT READY: ")][0]
    assert _report(project).find("testsuite") is not None  # every run leaves its JUnit


def test_the_gate_plugin_disabled_still_removes_the_marker(project, target):
    """-p no: blocks the plugin, not the root conftest's start-up hooks: the
    marker goes, and the run ends NOT READY (a separate pytest process)."""
    m = _stale(target)
    res = run(project, target, "-p", "no:pty_acceptance.gate.plugin", subprocess=True)
    assert res.ret != 0 and not os.path.lexists(m)
    assert "-p no:pty_acceptance.gate.plugin disables the suite's marker gate" in _said_not_ready(res)


def test_a_failed_registration_is_fatal_and_not_ready(project, target):
    m = _stale(target)
    (project.path / "reports").write_text("")  # not a directory
    res = run(project, target, "--report-dir", str(project.path / "reports/sub"))
    assert res.ret == pytest.ExitCode.USAGE_ERROR and not os.path.lexists(m)
    assert "marker gate could not be registered" in _said_not_ready(res)


def test_the_plugin_refuses_to_run_without_the_start_up_hooks(project, target):
    (project.path / "conftest.py").write_text('pytest_plugins = ["pty_acceptance.gate.plugin"]\n')
    res = project.runpytest("acceptance/")
    assert res.ret != 0 and "start-up hooks did not run" in _said_not_ready(res)


# ------------------------------ MARK-1/SUITE-2: the report first, then the marker
def _report(project) -> ET.Element:
    found = list((project.path / "reports").glob("acceptance-*.xml"))  # -fake-: the inventory's host
    assert len(found) == 1, found
    return ET.parse(found[0]).getroot()


def _gate_props(root) -> dict:
    props = {}
    for p in root.find("./testsuite/properties"):
        props.setdefault(reports.base_name(p.get("name")), []).append(p.get("value"))
    return props


def test_the_marker_is_written_only_after_the_report_is_on_disk_and_parses(project, target, monkeypatch):
    seen = []
    real_write = marker.write

    def write(path, content):
        reports = list((project.path / "reports").glob("acceptance-fake-*.xml"))
        seen.append(len(reports) == 1 and ET.parse(reports[0]).getroot().tag == "testsuites")
        return real_write(path, content)

    monkeypatch.setattr(marker, "write", write)  # as finish.write_marker calls it
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-20:])
    assert seen == [True], "the marker was written before the JUnit report existed"
    props = _gate_props(_report(project))
    assert props["gate"] == ["READY"] and "blocker" not in props


def test_a_link_in_the_report_directory_path_blocks(project, target, safe_dir):
    real = safe_dir / "real-reports"
    real.mkdir()
    (safe_dir / "hop").symlink_to(real)
    res = run(project, target, "--report-dir", str(safe_dir / "hop/reports"))
    assert res.ret != 0 and not os.path.lexists(target.marker)
    assert "hop" in _said_not_ready(res)
    assert list(real.rglob("*")) == [], "a report was written through the link"


@pytest.mark.parametrize("kind", ["symlink", "hard link"])
def test_the_report_is_never_written_through_a_link_or_over_a_file(project, target, safe_dir, kind):
    """A link under the name asked for is named and refused before any test,
    never followed; a file there (an earlier run's report: here a hard link
    to another file) is removed by name, never written over, and the run
    publishes its own (issue 38 item 6c: no older verdict stands under the
    name a run was asked to write; report/report_name.py)."""
    victim = safe_dir / "victim"
    victim.write_text("keep me\n")
    reports = project.path / "reports"
    reports.mkdir()
    planted = reports / "fixed.xml"
    if kind == "symlink":
        planted.symlink_to(victim)
        res = run(project, target, f"--junitxml={planted}")
        assert res.ret != 0 and not os.path.lexists(target.marker)
        assert f"{planted} is a symlink, not a report an earlier run wrote" in _said_not_ready(res)
        assert os.path.islink(planted)
    else:
        os.link(victim, planted)
        res = run(project, target, f"--junitxml={planted}")
        assert last_line(res) == f"READY: marker written {target.marker}"
        assert planted.stat().st_ino != victim.stat().st_ino and b"<testsuites" in planted.read_bytes()
    assert victim.read_text() == "keep me\n" and victim.stat().st_nlink == 1


# -- SUITE-3, round two: what the interpreter or the configuration can take away

def _refused_because(res, target, text, *ids):
    assert_refused(res, target, "SUITE-3", *ids)
    assert any(text in line for line in res.outlines), "\n".join(res.outlines[-30:])


def _refused_at_start(res, target, text):
    """Issue 38: refused at start-up (these were SUITE-3 blockers at the end
    of a whole run): ERROR: NOT READY, exit 4, no test run, no report."""
    said = _said_not_ready(res)
    assert res.ret == pytest.ExitCode.USAGE_ERROR, said
    assert said.startswith("ERROR: NOT READY: SUITE-3: ") and text in said, said
    assert not os.path.lexists(target.marker), "a marker was written"
    assert not any("passed" in l or "collected" in l for l in res.outlines), res.outlines[-10:]


def test_python_optimised_never_reaches_the_run(project, target, monkeypatch):
    """-O strips every assert pytest did not rewrite (the library's): the
    clean start (launch.py) leaves PYTHONOPTIMIZE out, so the run that
    judges is not optimised (invocation.py's blocker, which a run in process
    still meets, is not there) and its verdict is the one this project's
    separate process has here anyway (no system bus on this machine)."""
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    res = run(project, target, subprocess=True)
    assert not any("optimisation level" in l for l in res.outlines + res.errlines), res.outlines[-20:]
    assert last_line(res) == "NOT READY: 1 blockers: SCOPE-2 MARK-3", res.outlines[-20:]
    assert not os.path.lexists(target.marker)


def test_plain_assertions_are_refused(project, target):
    _refused_at_start(run(project, target, "--assert=plain"), target, "--assert=plain")


def test_an_ini_override_is_refused_at_start_up(project, target):
    """-o python_functions would drop test_other: refused before collection."""
    _refused_at_start(run(project, target, "-o", "python_functions=test_e*"), target,
                      "-o/--override-ini changes the project's configuration: python_functions=test_e*")


def test_another_ini_file_is_refused(project, target, safe_dir):
    (project.path / "other.ini").write_text("[pytest]\npython_functions = test_e*\n"
                                            f"pty_acceptance_run_dir = {safe_dir}/run\n")
    _refused_at_start(run(project, target, "-c", "other.ini"), target, "-c other.ini")


def test_another_rootdir_is_refused(project, target):
    """Above the checkout or below it (where the root conftest is not loaded
    at all): refused at start-up either way (the run guard: runguard.py)."""
    _refused_at_start(run(project, target, "--rootdir", str(project.path.parent)), target, "--rootdir")
    (project.path / "elsewhere").mkdir()
    _refused_at_start(run(project, target, "--rootdir", str(project.path / "elsewhere")), target, "--rootdir")


def test_a_plugin_named_on_the_command_line_is_refused(project, target):
    """Refused at start-up, before any test (issue 38: it was a blocker only
    at the end, after the plugin had run the whole session)."""
    (project.path / "narrowing_plugin.py").write_text("")
    project.syspathinsert()
    _refused_at_start(run(project, target, "-p", "narrowing_plugin"), target, "-p loads plugins")


def test_a_test_the_list_does_not_name_is_refused(project, target):
    add_tests(project, "@pytest.mark.requirement('OWN-1')\ndef test_new():\n    pass\n")
    _refused_because(run(project, target), target, "does not list")


def test_changed_requirement_ids_are_refused(project, target):
    (project.path / "acceptance/test_all.py").write_text(
        PASSING.replace('@pytest.mark.requirement("OWN-1")', '@pytest.mark.requirement("OWN-2")'))
    _refused_because(run(project, target), target, "requirement IDs changed")


@pytest.mark.parametrize("damage", ["absent", "malformed"])
def test_an_unusable_node_id_list_is_refused(project, target, damage):
    listed = project.path / nodeids.FILE
    if damage == "absent":
        listed.unlink()
    else:
        listed.write_text("acceptance/test_all.py::test_everything\n")
    _refused_because(run(project, target), target, "the checkout's list of tests")


def test_another_marker_path_still_removes_the_inventorys_marker(project, target, safe_dir):
    """MARK-4: --marker X removes the inventory's marker of an earlier READY run too."""
    m = _stale(target)
    other = safe_dir / "other/pty-supervisor-verified"
    add_tests(project, "@pytest.mark.requirement('OWN-2')\ndef test_fails():\n    assert False\n")
    res = run(project, target, "--marker", str(other))
    assert_refused(res, target, "OWN-2")
    assert not os.path.lexists(m) and not os.path.lexists(other)
    assert any(f"removed an existing marker at {m}" in l for l in res.outlines)


def test_a_junit_writer_that_fails_after_the_decision_is_not_ready(project, target, monkeypatch):
    """The decision found no blocker, then pytest's JUnit writer raised: the
    end's sequence never ran, so no marker and no READY line (MARK-1)."""
    from _pytest import junitxml

    def broken(self):
        raise OSError("disk full")

    monkeypatch.setattr(junitxml.LogXML, "pytest_sessionfinish", broken)
    res = run(project, target)
    assert not os.path.lexists(target.marker), "a marker was written"
    assert not any(l.startswith("READY") for l in res.outlines), "\n".join(res.outlines[-20:])
    assert last_line(res) == "NOT READY: 1 blockers: MARK-1", "\n".join(res.outlines[-20:])
