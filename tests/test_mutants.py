"""The fault matrix (CI subset): every seeded fault is killed by the tests of
the requirements its entry names, the clean control passes, no fault run
leaves a marker, and the kill table lands under reports/mutants/."""

import json

import pytest

from conftest import REPO
from tests.mutants import catalogue
from tests.mutants.run import _leaks, run_mutants

pytestmark = [pytest.mark.refhost]


def test_catalogue_is_well_formed():
    from pty_acceptance.requirements import BY_ID

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


def test_ci_subset_is_killed_and_the_control_passes():
    status = run_mutants(REPO, only=catalogue.CI_SUBSET, jobs=2)
    rows = json.loads((REPO / "reports/mutants/latest/kill-table.json").read_text())
    assert rows[0]["id"] == "control" and rows[0]["control_ok"], rows[0]
    survivors = [r for r in rows[1:] if not r["killed"] or r["marker"]]
    assert not survivors, survivors
    assert status == 0
