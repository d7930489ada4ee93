"""The gate's rules as pure functions (decision/rules.py): given a record of what
happened (decision/run_records.py), the blockers, in order, to the letter. No pytest
session runs here and nothing of the host is read; tests/test_gate.py runs
the same rules in real sessions."""

import dataclasses
import datetime
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pty_acceptance.decision import preflight, rules, run_records as happened, waivers
from pty_acceptance.decision.run_records import AtMarkerTime, AtStart, Content, Session, Setup, frozen
from pty_acceptance.provenance.suite_identity import Identity
from pty_acceptance.report import signing
from pty_acceptance.spec.checklist import Section
from pty_acceptance.spec.requirements import CATALOGUE, ENFORCED_BY_GATE

ALL_IDS = tuple(r.id for r in CATALOGUE if r.id not in ENFORCED_BY_GATE)
TEST = "acceptance/test_all.py::test_everything"
MODULE = "acceptance/test_all.py"
ROOT = Path("/srv/checkout")
BINARY, RUNTIME = "/usr/local/bin/opencode-pty-supervisor", "/home/svc/opencode/runtime"
SHA, RT, MF = "a" * 64, "b" * 64, "c" * 64
OTHER = "d" * 64
TODAY = datetime.date(2026, 1, 15)

INV = SimpleNamespace(binaries_list=[SimpleNamespace(path=BINARY, sha256=SHA)],
                      runtime=SimpleNamespace(sha256=RT, binary=RUNTIME), source_manifest_sha256=MF)
SETUP = Setup(
    root=ROOT, acceptance=ROOT / "acceptance", inventory=INV, inventory_file="inventories/target.yml",
    preflight=preflight.Result([preflight.PreflightCheck("systemd", True, "PID 1 is systemd")]),
    marker="/etc/opencode/pty-supervisor-verified", removal="no marker at the path", write_marker=True,
    sections=(Section("All", MODULE, ALL_IDS),), checklist_error=None, record_sections=("test_all.py",),
    expected=frozen({TEST: ALL_IDS}),
    nodeids_error=None, hostname="pilot", args=(ROOT / "acceptance",), report_path="/srv/r.xml",
    report_private_dir=None, waivers_file=None, signer=None)
PASSED = frozen({"setup": "passed", "call": "passed", "teardown": "passed"})
SESSION = Session(
    items=frozen({TEST: ALL_IDS}), modules=frozen({TEST: MODULE}), outcomes=frozen({TEST: PASSED}),
    reports=frozen({(TEST, p): 1 for p in PASSED}), collected=frozen({TEST: 1}), not_run=frozen({}),
    concerns=frozen({TEST: ()}), collect_errors=(), outside=(), deselected=0, interrupted=False,
    narrowing=(), args=("acceptance/",), shape_problems=(), junit=True, exitstatus=0)
TREE = "e" * 64
SUITE = Identity("0.1.0", "f" * 40, "no", TREE, (f"{SHA}  acceptance/test_all.py",), ("pytest==9.2.0",), OTHER)
START = AtStart(frozen({BINARY: SHA}), (), (RT, f"{RT}  {RUNTIME}"), suite=SUITE)
CONTENT = Content(frozen({BINARY: SHA}), (), None, (RT, f"{RT}  {RUNTIME}"), MF, None)
NOW = AtMarkerTime(euid=0, unfinished=(), content=CONTENT, sign_problems=(), waivers=(),
                   waiver_error=None, waivers_digest=None, today=TODAY, suite_tree=TREE)


def with_(record, **changes):
    return dataclasses.replace(record, **changes)


def failed(phase: str) -> dict:
    return {TEST: frozen({**PASSED, phase: "failed"})}


def waiver(req: str, expires=TODAY) -> waivers.Waiver:
    return waivers.Waiver(req, "reviewed", "ops", expires)


SUITE3, S2, R1 = ("SUITE-3",), ("SCOPE-2", "MARK-3"), ("RUNTIME-1", "MARK-3")
NO_SYSTEMD = preflight.PreflightCheck("systemd", False, "PID 1 is not systemd")
UNCOVERED = (ALL_IDS, f"{len(ALL_IDS)} requirements have no passing test in this run")

# case -> (changes to SETUP, to SESSION, to NOW, the blockers as (IDs, reason), in order)
CASES = {
    "a complete passing run": ({}, {}, {}, []),
    "not root": ({}, {}, {"euid": 1000}, [(("MARK-1",), "not running as root (euid 1000)")]),
    "--no-marker": ({"write_marker": False}, {}, {},
                    [(("MARK-1",), "--no-marker given: the marker was not written")]),
    "a marker that could not be removed": (
        {"removal": "could not remove the marker at /m: EPERM"}, {}, {},
        [(("MARK-4",), "could not remove the marker at /m: EPERM")]),
    "-k and an interrupt": (
        {}, {"narrowing": (("-k", "'every'"),), "interrupted": True, "exitstatus": 2}, {},
        [(SUITE3, "run narrowed or stopped early by -k ('every')"),
         (SUITE3, "the session was interrupted"), (SUITE3, "pytest ended with status 2")]),
    "a node id narrower than acceptance/": (
        {}, {"args": (f"{TEST}",)}, {}, [(SUITE3, f"paths narrower than acceptance/: {TEST}")]),
    "no JUnit writer": ({}, {"junit": False}, {},
                        [(("SUITE-2",), "no JUnit report is being written (junitxml disabled?)")]),
    "a failed call": ({}, {"outcomes": frozen(failed("call"))}, {},
                      [(ALL_IDS, f"{TEST}: call failed"), UNCOVERED]),
    "a rerun": ({}, {"outcomes": frozen(failed("call")), "reports": frozen({(TEST, "call"): 2})}, {},
                [(SUITE3, f"{TEST} was reported more than once (a rerun?): call 2 times (worst: failed); "
                          "the worst outcome counts"),
                 (ALL_IDS, f"{TEST}: call failed"), UNCOVERED]),
    "no teardown report": ({}, {"outcomes": frozen({TEST: frozen({"setup": "passed", "call": "passed"})})},
                           {}, [(ALL_IDS, f"{TEST} did not finish (no teardown report)"), UNCOVERED]),
    "a listed test not collected": (
        {"expected": frozen({TEST: ALL_IDS, f"{MODULE}::test_other": ("OWN-1",)})}, {}, {},
        [(("OWN-1",), f"{MODULE}: 1 of its tests in acceptance/node-ids.txt were not collected: "
                      "test_other")]),
    "a directory left": ({}, {}, {"unfinished": ("/tmp/x: 9 entries",)},
                         [(("SUITE-1", "SUITE-4"), "a directory the run made and handed out was not "
                                                   "removed: /tmp/x: 9 entries")]),
    "the runtime swapped": (
        {}, {}, {"content": with_(CONTENT, runtime=(OTHER, f"{OTHER}  {RUNTIME}"))},
        [(R1, f"at marker time: {RUNTIME} hashes to {OTHER}, the pin runtime.sha256 is {RT}"),
         (R1, f"{RUNTIME} changed during the run: {RT} at start, {OTHER} now")]),
    "a binary swapped, another supervisor running, the manifest unreadable": (
        {}, {}, {"content": with_(CONTENT, hashes=frozen({BINARY: OTHER}), running="MainPID 7 executes x",
                                  manifest=None, manifest_error="a FIFO")},
        [(S2, f"{BINARY} changed during the run: {SHA} at start, {OTHER} now"),
         (S2, f"{BINARY} hashes to {OTHER}, inventory claims {SHA}"),
         (S2, "at marker time: MainPID 7 executes x"),
         (("SCOPE-1", "MARK-3"), "source manifest cannot be computed: a FIFO")]),
    "a failed preflight: its cause first, no coverage, no content": (
        {"preflight": preflight.Result([NO_SYSTEMD])},
        {"outcomes": frozen({}), "reports": frozen({}), "exitstatus": 5,
         "not_run": frozen({TEST: "preflight: systemd: PID 1 is not systemd"})}, {"content": None},
        [(SUITE3, "preflight: systemd: PID 1 is not systemd"),
         (ALL_IDS, f"{MODULE}: 1 tests not run: preflight: systemd (above)")]),
    "a shared cause of tests not run": (
        {}, {"not_run": frozen({TEST: "wire format: no frame"}), "outcomes": frozen(failed("setup"))}, {},
        [(SUITE3, "wire format: no frame (1 tests in 1 modules not run)"),
         (ALL_IDS, f"{MODULE}: 1 tests not run: wire format (above)"), UNCOVERED]),
    "a signing key refused": (
        {"signer": signing.Signer("/root/k.pem")}, {},
        {"sign_problems": (signing.SignError("SUITE-4", "bad key"),)}, [(("SUITE-4",), "bad key")]),
    "a waiver for a failing ID": (
        {"waivers_file": "/srv/w.yml"}, {"outcomes": frozen(failed("call"))}, {"waivers": (waiver("OWN-1"),)},
        [(ALL_IDS, f"{TEST}: call failed"), UNCOVERED,
         (("OWN-1",), "a waiver for OWN-1 (by ops), which is MUST-FIX in this run: a waiver acknowledges "
                      "a CONCERN, never a failure")]),
    "an expired waiver": (
        {"waivers_file": "/srv/w.yml"}, {}, {"waivers": (waiver("UNIT-9", TODAY - datetime.timedelta(1)),)},
        [(("UNIT-9",), "the waiver for UNIT-9 by ops expired on 2026-01-14")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_decide(case):
    setup, session, now, want = CASES[case]
    decision = rules.decide(with_(SETUP, **setup), with_(SESSION, **session), START, with_(NOW, **now))
    assert [(b.ids, b.reason) for b in decision.blockers] == want


def test_a_waiver_for_a_recorded_concern_stands():
    concern = with_(SESSION, concerns=frozen({TEST: ("UNIT-9: exposure recorded, not judged",)}))
    w = waiver("UNIT-9")
    decision = rules.decide(with_(SETUP, waivers_file="/srv/w.yml"), concern, START, with_(NOW, waivers=(w,)))
    assert decision.blockers == () and decision.waivers == (w,)


def test_a_waiver_file_that_does_not_load_blocks_and_nothing_stands():
    bad = waivers.WaiverError("SUITE-3", "/srv/w.yml: not YAML")
    decision = rules.decide(with_(SETUP, waivers_file="/srv/w.yml"), SESSION, START,
                            with_(NOW, waiver_error=bad))
    assert [(b.ids, b.reason) for b in decision.blockers] == [(SUITE3, "/srv/w.yml: not YAML")]
    assert decision.waivers == ()


def test_sign_refused_follows_the_signing_preflight():
    problem = (signing.SignError("SUITE-2", "--sign-tool gpg: /usr/bin/gpg is not installed"),)
    assert rules.decide(SETUP, SESSION, START, with_(NOW, sign_problems=problem)).sign_refused
    assert not rules.decide(SETUP, SESSION, START, NOW).sign_refused


@pytest.mark.parametrize("a, b, worst", [("passed", "failed", "failed"), ("failed", "passed", "failed"),
                                         ("skipped", "rerun", "rerun"), ("passed", "odd", "odd"),
                                         ("xpassed", "passed", "xpassed")])
def test_the_worst_outcome_counts(a, b, worst):
    assert rules.worse(a, b) == worst


@pytest.mark.parametrize("cause, label", [("preflight: systemd: PID 1 is not systemd", "preflight: systemd"),
                                          ("wire format: no frame: 0 bytes", "wire format")])
def test_cause_label(cause, label):
    assert rules.cause_label(cause) == label


def test_the_exit_codes_are_pytests():
    assert (happened.EXIT_OK, happened.EXIT_TESTS_FAILED, happened.EXIT_NO_TESTS_COLLECTED) == \
        (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)


def test_the_records_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SESSION.deselected = 3
    with pytest.raises(TypeError):
        SESSION.items["x"] = ()


def test_the_rules_import_no_pytest():
    """rules, properties, hostfacts and finish run without pytest: recorder.py
    alone reads pytest's objects."""
    code = ("import sys, pty_acceptance.decision.rules, pty_acceptance.decision.properties, "
            "pty_acceptance.decision.hostfacts, pty_acceptance.decision.end_of_run; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"


# -- issue 38 item 2: the list of what must run, against the package's own records
def real_setup(root: Path) -> Setup:
    """SETUP made of a checkout's ROOT-ACCEPTANCE.md and node-id list, the
    package's requirement records as they are."""
    from pty_acceptance.decision import nodeids
    from pty_acceptance.spec import checklist, requirements
    return with_(SETUP, root=root, acceptance=root / "acceptance",
                 sections=tuple(checklist.load(root / "ROOT-ACCEPTANCE.md")),
                 expected=frozen(nodeids.load(root)),
                 record_sections=tuple(s.module for s in requirements.SECTIONS))


def everything_passed(setup: Setup) -> Session:
    """A session in which every listed test was collected and passed."""
    items = dict(setup.expected)
    return with_(SESSION, items=frozen(items), modules=frozen({n: n.split("::")[0] for n in items}),
                 outcomes=frozen({n: PASSED for n in items}),
                 reports=frozen({(n, p): 1 for n in items for p in PASSED}),
                 collected=frozen({n: 1 for n in items}), concerns=frozen({n: () for n in items}))


def test_the_checkouts_lists_agree_with_the_records():
    from conftest import REPO
    assert rules.records_blockers(real_setup(REPO)) == []


def test_a_module_deleted_with_its_node_ids_and_row_is_caught(tmp_path):
    """The review's reproduction, on a copy: acceptance/test_isolation.py gone
    together with its node-id lines and its table row. The rules that read only
    those two lists (modules, node ids, coverage) say nothing: the rest of the
    checkout still covers what they check. The records still name the section."""
    from conftest import REPO
    gone = "acceptance/test_isolation.py"
    (tmp_path / "acceptance").mkdir()
    text = (REPO / "ROOT-ACCEPTANCE.md").read_text()
    (tmp_path / "ROOT-ACCEPTANCE.md").write_text("".join(
        line for line in text.splitlines(keepends=True) if f"`{gone}`" not in line))
    listed = (REPO / "acceptance/node-ids.txt").read_text()
    (tmp_path / "acceptance/node-ids.txt").write_text("".join(
        line for line in listed.splitlines(keepends=True) if not line.startswith(gone + "::")))
    setup = real_setup(tmp_path)
    assert gone not in {s.module for s in setup.sections} and not any(n.startswith(gone) for n in setup.expected)
    session = everything_passed(setup)
    assert rules.module_blockers(setup, session) == []
    assert rules.nodeid_blockers(setup, session) == []
    said = [(b.ids, b.reason) for b in rules.records_blockers(setup)]
    iso = rules.section_ids(gone)
    assert "ISO-1" in iso
    assert said[-2:] == [
        (iso, f"{gone} is a section of the requirement records but ROOT-ACCEPTANCE.md has no row for it"),
        (iso, f"{gone} is a section of the requirement records but acceptance/node-ids.txt lists no test of it")]
    # requirements only that module's tests named are named by no listed test now
    only_there = [i for i in iso if not any(i in ids for ids in setup.expected.values())]
    if only_there:
        assert said[0][0] == tuple(only_there)
    decided = rules.decide(setup, session, START, NOW)
    assert any(b.reason.startswith(f"{gone} is a section of the requirement records") for b in decided.blockers)


def test_a_row_the_records_do_not_have_is_caught():
    setup = with_(SETUP, record_sections=("test_other.py",))
    said = [(b.ids, b.reason) for b in rules.records_blockers(setup)]
    assert (SUITE3, "acceptance/test_all.py has a row in ROOT-ACCEPTANCE.md but is no section of the "
                    "requirement records") in said


def test_a_requirement_no_listed_test_names_is_caught():
    ids = tuple(i for i in ALL_IDS if i != "PTY-2")
    setup = with_(SETUP, expected=frozen({TEST: ids}))
    assert [(b.ids, b.reason) for b in rules.records_blockers(setup)] == [
        (("PTY-2",), "1 requirements of the requirement records are named by no test in acceptance/node-ids.txt")]


def test_the_suite_read_at_start_and_unchanged_at_the_decision():
    assert rules.suite_blockers(START, NOW) == []
    changed = rules.suite_blockers(START, with_(NOW, suite_tree="1" * 64))
    assert [(b.ids, b.reason) for b in changed] == [
        (SUITE3, f"the suite's own files changed during the run: tree {TREE} at start, {'1' * 64} now")]
    unread = rules.suite_blockers(with_(START, suite=None, suite_error="the suite's own files could not be "
                                                                       "listed: EACCES"), NOW)
    assert [b.reason for b in unread] == ["which suite judged was not read: the suite's own files could not be "
                                          "listed: EACCES"]


def test_code_that_is_not_the_suites_blocks_the_first_few_named():
    found = tuple(f"not the suite's code: module m{n}: /tmp/m{n}.py is neither ..." for n in range(13))
    said = rules.code_blockers(with_(NOW, foreign_code=found))
    assert [b.reason for b in said[:10]] == list(found[:10])
    assert said[10].reason.startswith("and 3 more of the process's code") and len(said) == 11
    assert all(b.ids == SUITE3 for b in said)
    assert rules.decide(SETUP, SESSION, START, with_(NOW, foreign_code=found[:1])).blockers[0].reason == found[0]
