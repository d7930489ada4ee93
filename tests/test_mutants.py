"""The fault matrix (CI subset): every seeded fault is killed by the tests of
the requirements its entry names, the clean control passes, no fault run
leaves a marker, and the kill table lands under reports/mutants/."""

import json

import pytest

from conftest import REPO
from tests.mutants import catalogue, run as mutants_run
from tests.mutants.run import _leaks, run_mutants
from tests.refhost.run import AFTER_SUITE, EXIT_SETUP_FAILED, EXIT_TIMED_OUT, SUITE_STDERR
from tests.refhost.tree import RELEASES


def test_catalogue_is_well_formed():
    from pty_acceptance.spec.requirements import BY_ID

    ids = [f.id for f in catalogue.FAULTS]
    assert len(ids) == len(set(ids)) and len(ids) >= 45
    for f in catalogue.FAULTS:
        assert f.breaks and all(i in BY_ID for i in f.breaks + f.must_fail), f.id
        assert f.script or f.supervisor or f.script_file or f.candidate, f.id
        assert f.modules is None or all((REPO / m).is_file() for m in f.modules), f.id
        if f.script_file:
            assert (catalogue.FAULT_DIR / f.script_file).is_file(), f.id
    assert sum(1 for f in catalogue.FAULTS if f.modules is None) >= 8
    assert set(catalogue.CI_SUBSET) <= set(ids)
    for f in catalogue.FAULTS:  # a refusal names a release the harness boots, and why
        assert all(r in RELEASES and why for r, why in f.refused_on) and \
            len(dict(f.refused_on)) < len(RELEASES), f.id


def test_a_planted_secret_or_its_hash_anywhere_in_the_output_is_a_leak(tmp_path):
    import hashlib

    secret = catalogue.TREE_SECRET
    (tmp_path / "reports").mkdir()
    (tmp_path / "suite-output.txt").write_text("NOT READY\n")
    assert _leaks(tmp_path, secret) == []
    (tmp_path / "reports/a.xml").write_text(f"<x v='{hashlib.sha256(secret.encode()).hexdigest()}'/>")
    (tmp_path / "journal.log").write_bytes(b"\x1b[31m" + secret.encode())
    assert _leaks(tmp_path, secret) == ["journal.log", "reports/a.xml"]
    assert all(f.secret for f in catalogue.FAULTS if f.id.endswith("-root-secret"))


JUNIT = """<?xml version="1.0"?><testsuites><testsuite>{props}
<testcase classname="acceptance.test_x" name="test_a"><properties>
<property name="requirement" value="OWN-1"/></properties>{failure}</testcase></testsuite></testsuites>"""


def _fake_run(status=0, failing=False, marker=True, after_status=0, secret_in=None):
    """run_reference as a withstood fault's run would leave its output directory."""
    def fake(repo, *, before_suite, after_suite, out_dir, suite_paths, quiet, suite_timeout, supervisor, release):
        assert suite_timeout == 900 and suite_paths == ["acceptance/"] and supervisor == "go"
        assert release == "bookworm"
        out_dir.mkdir(parents=True)
        if status != EXIT_TIMED_OUT:
            (out_dir / "reports").mkdir()
            (out_dir / "reports/acceptance-reference-1.xml").write_text(JUNIT.format(
                props="<properties/>", failure='<failure message="OWN-1: no"/>' if failing else ""))
        if marker:
            (out_dir / "pty-supervisor-verified").write_text("marker\n")
        (out_dir / AFTER_SUITE).write_text(f"0 {after_status}\nthe log\n")
        if secret_in:
            (out_dir / secret_in).write_text(catalogue.SWAP_SECRET)
        return status
    return fake


@pytest.mark.parametrize("run, control_marker, killed, note", [
    (dict(), True, True, None),
    (dict(status=EXIT_TIMED_OUT, marker=False), True, False, "still running 900 s later"),
    (dict(failing=True, marker=False), True, False, None),
    (dict(marker=False), True, False, "the verdict differs from the control's"),
    (dict(after_status=1), True, False, "the attack achieved something"),
    (dict(secret_in="journal.log"), True, False, "the root-only secret or its SHA-256 is in journal.log"),
    (dict(marker=False), False, True, None),  # a host whose control is NOT READY: the same verdict
])
def test_a_withstood_fault_is_killed_only_by_ending_as_the_control_with_nothing_achieved(
        tmp_path, monkeypatch, run, control_marker, killed, note):
    fault = catalogue.BY_ID["user-swaps-temp-dirs-for-fifos"]
    monkeypatch.setattr(mutants_run, "run_reference", _fake_run(**run))
    row = mutants_run.run_one(REPO, tmp_path / "out", fault)
    mutants_run.withstood(row, {"marker": control_marker})
    assert row["killed"] is killed, row
    if note:
        assert note in row["note"], row
    assert row["kill"] == "withstood" and row["supervisor"] == "go" and row["release"] == "bookworm"


@pytest.mark.parametrize("status, refused, problem", [
    (EXIT_SETUP_FAILED, True, None),  # the fault's script failed: the refusal is proven
    (0, False, "the catalogue says bookworm refuses it"),  # it applied after all: a stale catalogue fact
    (1, False, "the catalogue says bookworm refuses it"),  # the suite ran (and failed): not a refusal
])
def test_a_fault_a_release_refuses_is_a_proven_fact_not_a_kill(tmp_path, monkeypatch, status, refused, problem):
    fault = catalogue.BY_ID["supervisor-private-tmp-disconnected"]
    assert fault.refusal("bookworm") and fault.refusal("trixie") is None

    def fake(repo, *, out_dir, release, **_):
        assert release == "bookworm"
        out_dir.mkdir(parents=True)
        if status != EXIT_SETUP_FAILED:
            (out_dir / "reports").mkdir()
            (out_dir / "reports/acceptance-reference-1.xml").write_text(JUNIT.format(props="", failure=""))
        return status
    monkeypatch.setattr(mutants_run, "run_reference", fake)
    row = mutants_run.run_one(REPO, tmp_path / "out", fault, release="bookworm")
    assert row["killed"] is None and row["refused"] is refused, row
    assert ("refused by bookworm's systemd: systemd 252" in row["note"]) is refused, row
    if problem:
        assert problem in row["note"], row


@pytest.mark.refhost
def test_ci_subset_is_killed_and_the_control_passes():
    status = run_mutants(REPO, only=catalogue.CI_SUBSET, jobs=2)
    rows = json.loads((REPO / "reports/mutants/latest/kill-table.json").read_text())
    assert rows[0]["id"] == "control" and rows[0]["control_ok"], rows[0]
    survivors = [r for r in rows[1:] if not r["killed"] or r["marker"]]
    assert not survivors, survivors
    assert status == 0


def test_the_cli_offers_the_supervisor_implementations_and_releases_the_harness_deploys():
    """cli.py keeps its own list (it imports tests/ only once a reference command
    runs): it must name the implementations tests/refhost/run.py deploys, with
    the same default."""
    from pty_acceptance import cli

    from tests.refhost.run import DEFAULT_SUPERVISOR, SUPERVISORS
    from tests.refhost.tree import DEFAULT_RELEASE, RELEASES
    assert sorted(cli.SUPERVISOR_IMPLS) == sorted(SUPERVISORS)
    assert sorted(cli.RELEASES) == sorted(RELEASES)
    for command in ("reference", "mutants"):
        args = cli.parser().parse_args([command])
        assert args.supervisor == DEFAULT_SUPERVISOR and args.release == DEFAULT_RELEASE, command


@pytest.mark.parametrize("status, refusal, after, killed", [
    (4, "ERROR: NOT READY: MARK-4: /etc/opencode/pty-supervisor-verified does not parse as a marker (1 lines, "
        "not 4): not removed (MARK-4: no other marker path)", 0, True),
    (4, "ERROR: NOT READY: SUITE-3: -q: the header ...", 0, False),  # refused, but not for what stands there
    (4, "ERROR: NOT READY: MARK-4: /etc/opencode/pty-supervisor-verified is a symlink", 0, False),  # not its says
    (4, "ERROR: NOT READY: MARK-4: /etc/opencode/pty-supervisor-verified does not parse as a marker", 1, False),
    (1, "", 0, False),  # the run went on: nothing refused it
])
def test_a_start_refused_fault_is_killed_only_by_a_refusal_naming_it(tmp_path, monkeypatch, status, refusal,
                                                                     after, killed):
    fault = catalogue.BY_ID["foreign-file-at-marker"]

    def fake(repo, *, out_dir, **_):
        out_dir.mkdir(parents=True)
        if status != 4:
            (out_dir / "reports").mkdir()
            (out_dir / "reports/acceptance-reference-1.xml").write_text(JUNIT.format(props="", failure=""))
        (out_dir / SUITE_STDERR).write_text(refusal + "\n")
        (out_dir / AFTER_SUITE).write_text(f"0 {after}\n")
        (out_dir / "pty-supervisor-verified").write_text("keep me\n")  # the harness copies what stands there
        return status
    monkeypatch.setattr(mutants_run, "run_reference", fake)
    row = mutants_run.run_one(REPO, tmp_path / "out", fault)
    assert row["killed"] is killed, row
    assert row["marker"] is False, row  # what was planted stands there: no marker
    assert (row["caught_by"] == ["MARK-4"]) is (refusal.startswith("ERROR: NOT READY: MARK-4") and status == 4)
