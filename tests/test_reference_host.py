"""`pty-acceptance reference` end to end: the suite, run as root inside a
freshly booted reference host (one of each release, tests/refhost/tree.py
RELEASES), passes every module that exists, withholds
the marker while checklist sections are still planned or the host has known
findings (tests/refhost/findings.py), and a seeded fault fails the test that
owns it and leaves no marker."""

import subprocess
import sys
from pathlib import Path

import pytest

from pty_acceptance.spec import checklist

from conftest import REPO, assert_junit_readers_accept
from leftovers import assert_nothing_left
from tests.refhost import findings
from tests.refhost.interrupts import run_matrix
from tests.refhost.run import SUPERVISORS, inventory, new_run_id, said_of
from tests.refhost.tree import DEFAULT_RELEASE, RELEASES
from tests.refhost.junit import Report

pytestmark = [pytest.mark.refhost]


def reference(*args) -> tuple[int, Path, str]:
    done = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "reference", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL)
    run_dir = (REPO / "reports/reference/latest").resolve()
    assert_nothing_left(f"ptyacc-{run_dir.name.lower()}")
    return done.returncode, run_dir, done.stdout + done.stderr


def planned_ids() -> set[str]:
    return {i for s in checklist.load(REPO / "ROOT-ACCEPTANCE.md") if s.state == "planned" for i in s.ids}


SNAP = ("/opt/pty-acceptance/venv/bin/python -B /opt/pty-acceptance/src/tests/refhost/guestsnap.py")
OUT = "/opt/pty-acceptance/out"


def snapshot_scripts(tmp_path) -> list[str]:
    """SUITE-1: the guest's file tree (metadata and content hashes, outside the
    report directory and the marker) and its unit list, before and after the
    suite (tests/refhost/guestsnap.py); the difference is collected."""
    before, after = tmp_path / "suite-1-before.sh", tmp_path / "suite-1-after.sh"
    before.write_text(f"set -e\n{SNAP} write {OUT}/suite-1-before.json\n")
    after.write_text(f"set -e\nmkdir -p {OUT}/evidence\n{SNAP} write {OUT}/suite-1-after.json\n"
                     f"{SNAP} diff {OUT}/suite-1-before.json {OUT}/suite-1-after.json "
                     f"> {OUT}/evidence/suite-1-diff.txt && echo 0 > {OUT}/evidence/suite-1-status "
                     f"|| echo $? > {OUT}/evidence/suite-1-status\n")
    return ["--before-suite", str(before), "--after-suite", str(after)]


def assert_read_only(run_dir: Path) -> None:
    """SUITE-1: nothing of the guest changed but the reports and the marker."""
    status = run_dir / "evidence/suite-1-status"
    assert status.is_file(), f"no SUITE-1 snapshot difference was collected into {run_dir}/evidence"
    diff = (run_dir / "evidence/suite-1-diff.txt").read_text()
    assert status.read_text().strip() == "0", f"SUITE-1: the run changed the host:\n{diff[:6000]}"


# One good host per release, the two supervisor implementations crossed with
# them (CI's time: docs/reference-host.md "What CI runs"); the other combinations are run by
# hand for the proven matrix (docs/reference-host.md "The releases").
CROSSED = [(DEFAULT_RELEASE, "go")] + [(r, "python") for r in sorted(set(RELEASES) - {DEFAULT_RELEASE})]


def test_every_release_and_implementation_has_a_good_host_run_here():
    assert {r for r, _ in CROSSED} == set(RELEASES)
    assert {s for _, s in CROSSED} == set(SUPERVISORS)


@pytest.mark.parametrize("release,supervisor", CROSSED)
def test_good_reference_host_passes_every_module_that_exists(tmp_path, release, supervisor):
    status, run_dir, log = reference("--release", release, "--supervisor", supervisor,
                                     *snapshot_scripts(tmp_path))
    report = Report.find(run_dir)
    assert report is not None and len(report.cases) >= 30, log[-3000:]
    failed = [(c.name, c.outcome) for c in report.failed() if not findings.known(c.name)]
    assert not failed, f"on a good reference host: {failed}\n{said_of(log)[-6000:]}"
    reproduced = {findings.case_key(c.name) for c in report.failed()}
    assert reproduced == set(findings.KNOWN_FINDINGS), \
        f"known findings that no longer fail: {set(findings.KNOWN_FINDINGS) - reproduced}"
    assert all(c.requirements for c in report.cases)
    # Fail closed: planned sections and the host's findings keep the marker away,
    # and nothing else does.
    planned = planned_ids() | findings.finding_ids(report)
    assert report.blocker_ids() <= planned, (report.blocker_ids() - planned, log[-3000:])
    if planned:
        assert status != 0 and not (run_dir / "pty-supervisor-verified").exists()
    else:
        assert status == 0 and (run_dir / "pty-supervisor-verified").exists()
        verify = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "verify-marker",
                                 "--root", str(run_dir), "--marker", "/pty-supervisor-verified",
                                 "--inventory", str(REPO / inventory(supervisor, release))],
                                capture_output=True, text=True)
        assert verify.returncode == 0, verify.stdout
    for b in ("supervisor", "launcher", "client"):
        assert (run_dir / f"usr/local/libexec/opencode-pty-{b}").is_file()
    assert_read_only(run_dir)
    (junit,) = (run_dir / "reports").glob("acceptance-*.xml")
    assert_junit_readers_accept(junit)  # a real host's report, as third-party readers take it
    assert f"reference run {run_dir.name} ({release}, supervisor {supervisor})" in log
    assert f"inventory: {inventory(supervisor, release)} (host reference)" in log
    assert any(line.startswith("host: Debian GNU/Linux ") and f"({release}); systemd " in line
               for line in log.splitlines()), "the preflight named no host"


def test_group_writable_client_fails_own_1_and_leaves_no_marker(tmp_path):
    script = tmp_path / "fault.sh"
    script.write_text("chmod g+w /usr/local/libexec/opencode-pty-client\n")
    status, run_dir, log = reference("--before-suite", str(script))
    assert status != 0
    report = Report.find(run_dir)
    new = [c for c in report.failed() if not findings.known(c.name)]
    failed = {c.name.split("::", 1)[1] for c in new}
    # OWN-1 owns it; the plugin smoke harness's own permissions check sees it too
    assert failed == {"test_binary_is_a_root_owned_regular_file[client]",
                      "test_harness_passes_ten_times_in_a_row"}, failed
    assert {i for c in new for i in c.requirements} == {"OWN-1", "PLUGIN-1"}
    assert "OWN-1" in report.blocker_ids()
    harness = next(c for c in new if c.name.endswith("test_harness_passes_ten_times_in_a_row"))
    assert "permissions" in harness.message, harness.message
    assert not (run_dir / "pty-supervisor-verified").exists()


def test_interrupted_runs_leave_nothing_and_never_overlap():
    """SUITE-5 (tests/refhost/interrupts.py): SIGINT and SIGTERM at four points
    of a run leave no unit, process, socket or file; a second run fails at once
    naming the first; after SIGKILL the next run removes the leftovers first."""
    out = REPO / "reports/reference" / f"interrupts-{new_run_id()}"
    report, text, name = run_matrix(REPO, out)
    assert_nothing_left(name)
    assert report is not None, text[-4000:]
    summary = "\n".join(f"{r['point']}: exit {r.get('exit')} in {r.get('seconds')} s, {r.get('last')}"
                        for r in report["results"])
    assert not report["problems"], "\n".join(report["problems"]) + "\n" + summary + f"\n(see {out})"
