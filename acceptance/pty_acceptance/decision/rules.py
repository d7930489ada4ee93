"""The gate's rules: what keeps the marker away (MARK-1, SUITE-3).

Each rule is a pure function from what happened (run_records.py's frozen
records) to blockers: it reads no host, imports no pytest and changes
nothing. The readings are hostfacts.py's, pytest's reports recorder.py's,
the effects end_of_run.py's. `decide` applies every rule, in the order an
operator reads them: first what kept tests from running at all (the
preflight's cause, then every shared cause of tests not run), then the rest.
The marker is written only when it comes back empty (MARK-1, SUITE-3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from pty_acceptance.decision import nodeids, waivers
from pty_acceptance.decision.run_records import (EXIT_NO_TESTS_COLLECTED, EXIT_OK, EXIT_TESTS_FAILED, AtMarkerTime,
                                          AtStart, Content, Session, Setup)
from pty_acceptance.spec.inventory import Inventory
from pty_acceptance.spec.requirements import BY_ID, CATALOGUE, CONCERN, ENFORCED_BY_GATE, sort_key
from pty_acceptance.spec.checklist import ROOT_SECTION_PREFIX

# Run shapes that select or stop early: (option attribute, how it reads).
NARROWING_OPTIONS = (
    ("keyword", "-k"), ("markexpr", "-m"), ("deselect", "--deselect"),
    ("lf", "--lf"), ("stepwise", "--sw"), ("stepwise_skip", "--sw-skip"),
    ("maxfail", "-x/--maxfail"), ("exitfirst", "-x"), ("collectonly", "--collect-only"),
    ("setuponly", "--setup-only"), ("setupplan", "--setup-plan"),
    ("ignore", "--ignore"), ("ignore_glob", "--ignore-glob"),
)

# How bad an outcome is: a phase reported more than once keeps its worst
# (a rerun or a duplicate node id never turns a failure into a pass).
# Anything not listed ranks with "failed".
OUTCOME_RANK = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 1, "rerun": 2, "failed": 3}


def worse(a: str, b: str) -> str:
    return a if OUTCOME_RANK.get(a, 3) >= OUTCOME_RANK.get(b, 3) else b


@dataclass(frozen=True)
class Blocker:
    ids: tuple[str, ...]
    reason: str

    def said(self) -> str:
        """"<IDs>: <reason>", as the report and the bundle carry it."""
        return f"{' '.join(self.ids)}: {self.reason}"


def internal_error(during: str, e: BaseException) -> Blocker:
    """An error of the suite's own (an exception it did not expect) at the
    run's end: a blocker, so that the run still ends with a report (SUITE-2)."""
    return Blocker(("SUITE-2",), f"an internal error of the suite while {during}: "
                   f"{type(e).__name__}: {str(e)[:500]}")


@dataclass(frozen=True)
class Decision:
    """What the rules made of a session, before any effect."""
    blockers: tuple[Blocker, ...]
    waivers: tuple[waivers.Waiver, ...]  # the waivers that stand
    sign_refused: bool  # the key or tool failed its preflight: nothing is signed


def preflight_cause(setup: Setup) -> str | None:
    """The preflight's first failed check, in words (None: it passed)."""
    cause = setup.preflight.cause if setup.preflight is not None else None
    return f"preflight: {cause}" if cause else None


def cause_label(cause: str) -> str:
    """A cause's name, for the lines that refer back to it: "preflight:
    systemd", "wire format"."""
    parts = cause.split(": ")
    return ": ".join(parts[:2] if parts[0] == "preflight" else parts[:1])


def not_run_blockers(setup: Setup, session: Session) -> list[Blocker]:
    """Tests that could not run for one shared cause (failures.not_run, or the
    preflight), one blocker per cause first, then one per module under the
    IDs of its tests: the cause is said once, not once per test."""
    causes: dict[str, dict[str, list[str]]] = {}
    for nodeid, cause in session.not_run.items():
        causes.setdefault(cause, {}).setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
    out = []
    for cause, modules in causes.items():
        n = sum(len(t) for t in modules.values())
        if cause != preflight_cause(setup):  # the preflight's own blocker leads already
            out.append(Blocker(("SUITE-3",), f"{cause} ({n} tests in {len(modules)} modules not run)"))
    for cause, modules in causes.items():
        for module, tests in modules.items():
            ids = tuple(sorted({i for n in tests for i in session.items.get(n, ())}, key=sort_key))
            out.append(Blocker(ids or ("SUITE-3",), f"{module}: {len(tests)} tests not run: "
                               f"{cause_label(cause)} (above)"))
    return out


def run_shape_blockers(setup: Setup, session: Session) -> list[Blocker]:
    """SUITE-3: the whole of acceptance/, run to its end: nothing selected,
    deselected, stopped early, interrupted or left uncollected."""
    out = [Blocker(("SUITE-3",), f"run narrowed or stopped early by {flag} ({shown})")
           for flag, shown in session.narrowing]
    if session.deselected:
        out.append(Blocker(("SUITE-3",), f"{session.deselected} tests deselected"))
    if any(p != setup.acceptance for p in setup.args) or any("::" in a for a in session.args):
        out.append(Blocker(("SUITE-3",), "paths narrower than acceptance/: " + " ".join(session.args)))
    if session.outside:
        out.append(Blocker(("SUITE-3",), f"{len(session.outside)} tests outside acceptance/ "
                           f"collected, e.g. {session.outside[0]}"))
    if session.interrupted:
        out.append(Blocker(("SUITE-3",), "the session was interrupted"))
    for err in session.collect_errors:
        out.append(Blocker(("SUITE-3",), f"collection error in {err}"))
    return out


STOPS_SHOWN = 5  # stops from outside named one by one after the first (the JUnit holds them all)


def watch_blockers(session: Session) -> list[Blocker]:
    """SUITE-5: the whole run bounded, and no process of the suite's own stopped
    from outside (a stopped process is named, never waited for); a run whose
    processes could not be watched cannot say that none was."""
    out = []
    if session.bound:
        out.append(Blocker(("SUITE-5",), session.bound))
    if session.stops:
        first, more = session.stops[0], session.stops[1:]
        out.append(Blocker(("SUITE-5",), f"a process of the suite's own was stopped from outside: {first}"))
        if more:
            shown = "; ".join(more[:STOPS_SHOWN]) + (f"; and {len(more) - STOPS_SHOWN} more"
                                                      if len(more) > STOPS_SHOWN else "")
            out.append(Blocker(("SUITE-5",), f"{len(more)} more stops from outside: {shown}"))
    if session.unwatched:
        out.append(Blocker(("SUITE-5",), "the suite's own processes were not watched for a stop from "
                                         f"outside: {session.unwatched}"))
    return out


def nodeid_blockers(setup: Setup, session: Session) -> list[Blocker]:
    """SUITE-3: every test the checkout lists (nodeids.FILE) was collected,
    with the requirement IDs listed for it, and nothing else was. A missing
    test blocks under its own IDs, one line per module."""
    if setup.nodeids_error:
        return [Blocker(("SUITE-3",), f"the checkout's list of tests: {setup.nodeids_error}")]
    missing, extra, changed = nodeids.differences(setup.expected, session.items)
    out = []
    for module, tests in missing.items():
        ids = tuple(sorted({i for n in tests for i in setup.expected[n]}, key=sort_key))
        names = ", ".join(n.split("::", 1)[1] for n in tests[:8]) + (", ..." if len(tests) > 8 else "")
        out.append(Blocker(ids, f"{module}: {len(tests)} of its tests in {nodeids.FILE} were not "
                           f"collected: {names}"))
    if extra:
        out.append(Blocker(("SUITE-3",), f"{len(extra)} tests collected that {nodeids.FILE} does not "
                           f"list (pty-acceptance node-ids --write after a review), e.g. {extra[0]}"))
    out += [Blocker(("SUITE-3",), f"requirement IDs changed: {c}") for c in changed[:8]]
    return out


def module_blockers(setup: Setup, session: Session) -> list[Blocker]:
    """SUITE-3: every module ROOT-ACCEPTANCE.md lists ran, and no other."""
    if setup.checklist_error:
        return [Blocker(("SUITE-3",), setup.checklist_error)]
    ran = set(session.modules.values())
    out = []
    for s in setup.sections:
        if s.module not in ran:
            out.append(Blocker(s.ids or ("SUITE-3",), f"{s.module} ({s.title}) is listed in "
                               "ROOT-ACCEPTANCE.md but no test of it was collected"))
    listed = {s.module for s in setup.sections}
    for mod in sorted(ran - listed):
        out.append(Blocker(("SUITE-3",), f"{mod} ran but ROOT-ACCEPTANCE.md does not list it"))
    return out


def records_blockers(setup: Setup) -> list[Blocker]:
    """SUITE-3: the list of what must run (nodeids.FILE, ROOT-ACCEPTANCE.md's
    table) checked against the package's own requirement records
    (requirements.yml): every requirement the gate does not enforce itself is
    named by a listed test, every section of the records has its row and its
    listed tests, and every row is a section of the records. A module deleted
    together with its node-id lines and its table row passes every rule that
    reads only those two (module_blockers, nodeid_blockers, coverage_blockers:
    the rest still cover its IDs, or nothing names them); not this one."""
    if setup.nodeids_error or setup.checklist_error:
        return []  # nodeid_blockers and module_blockers say why the lists are unusable
    named = {i for ids in setup.expected.values() for i in ids}
    unnamed = sorted({r.id for r in CATALOGUE} - ENFORCED_BY_GATE - named, key=sort_key)
    out = []
    if unnamed:
        out.append(Blocker(tuple(unnamed), f"{len(unnamed)} requirements of the requirement records are named "
                           f"by no test in {nodeids.FILE}"))
    records = {ROOT_SECTION_PREFIX + m for m in setup.record_sections}
    rows = {s.module for s in setup.sections}
    listed = {n.split("::", 1)[0] for n in setup.expected}
    for module in sorted(records - rows):
        out.append(Blocker(section_ids(module), f"{module} is a section of the requirement records but "
                           "ROOT-ACCEPTANCE.md has no row for it"))
    for module in sorted(records - listed):
        out.append(Blocker(section_ids(module), f"{module} is a section of the requirement records but "
                           f"{nodeids.FILE} lists no test of it"))
    for module in sorted(rows - records):
        out.append(Blocker(("SUITE-3",), f"{module} has a row in ROOT-ACCEPTANCE.md but is no section of the "
                           "requirement records"))
    return out


def section_ids(module: str) -> tuple[str, ...]:
    """The IDs whose checklist text the records put in `module`'s section."""
    name = module.removeprefix(ROOT_SECTION_PREFIX)
    ids = sorted({r.id for r in CATALOGUE for item in r.checklist if item.section == name}, key=sort_key)
    return tuple(ids) or ("SUITE-3",)


def suite_blockers(start: AtStart, now: AtMarkerTime) -> list[Blocker]:
    """SUITE-3: which suite judged was read at start (suite_identity.py), and
    its files are the same when the marker is decided."""
    if start.suite is None:
        return [Blocker(("SUITE-3",), f"which suite judged was not read: {start.suite_error}")]
    if now.suite_tree != start.suite.tree_digest:
        return [Blocker(("SUITE-3",), f"the suite's own files changed during the run: tree "
                        f"{start.suite.tree_digest} at start, {now.suite_tree or 'not read'} now")]
    return []


def duplicate_blockers(session: Session) -> list[Blocker]:
    """SUITE-3: one test, one result. A node id collected twice
    (--keep-duplicates) or a phase reported twice (a rerun plugin) blocks."""
    twice = {nodeid: n for nodeid, n in session.collected.items() if n > 1}
    out = [Blocker(("SUITE-3",), f"{nodeid} was collected {n} times (--keep-duplicates?): "
                   "its results cannot be told apart") for nodeid, n in twice.items()]
    repeated: dict[str, list[str]] = {}
    for (nodeid, phase), n in session.reports.items():
        if n > 1 and nodeid not in twice:
            repeated.setdefault(nodeid, []).append(
                f"{phase} {n} times (worst: {session.outcomes[nodeid][phase]})")
    out += [Blocker(("SUITE-3",), f"{nodeid} was reported more than once (a rerun?): "
                    + ", ".join(what) + "; the worst outcome counts")
            for nodeid, what in repeated.items()]
    return out


def outcome_blockers(session: Session) -> list[Blocker]:
    """Every collected test ran all its phases and passed each (those not
    run for a shared cause are not_run_blockers')."""
    out = []
    for nodeid, ids in session.items.items():
        if nodeid in session.not_run:
            continue  # not_run_blockers: grouped by their cause
        phases = session.outcomes.get(nodeid, {})
        bad = {ph: o for ph, o in phases.items() if o != "passed"}
        if "call" not in phases and not bad:
            out.append(Blocker(ids, f"{nodeid} did not run"))
        elif bad:
            what = ", ".join(f"{ph} {o}" for ph, o in bad.items())
            out.append(Blocker(ids, f"{nodeid}: {what}"))
        elif "teardown" not in phases:
            out.append(Blocker(ids, f"{nodeid} did not finish (no teardown report)"))
    return out


def passed_ids(session: Session) -> set[str]:
    ids: set[str] = set()
    for nodeid, req in session.items.items():
        phases = session.outcomes.get(nodeid, {})
        if phases and all(o == "passed" for o in phases.values()) and \
                {"setup", "call", "teardown"} <= set(phases):
            ids.update(req)
    return ids


def coverage_blockers(session: Session) -> list[Blocker]:
    """Every requirement the gate does not enforce itself has a test that
    passed in this run."""
    need = {r.id for r in CATALOGUE} - ENFORCED_BY_GATE
    missing = sorted(need - passed_ids(session), key=sort_key)
    if not missing:
        return []
    return [Blocker(tuple(missing), f"{len(missing)} requirements have no passing test in this run")]


def content_blockers(inv: Inventory, start: AtStart, now: Content) -> list[Blocker]:
    """SCOPE-1/2 at write time: binaries unchanged since session start and equal
    to the inventory; the running supervisor executes the installed binary; the
    source manifest recomputed equals the inventory."""
    out = [Blocker(("SCOPE-2", "MARK-3"), f"at session start: {e}") for e in start.errors]
    out += [Blocker(("SCOPE-2", "MARK-3"), f"at marker time: {e}") for e in now.errors]
    for b in inv.binaries_list:
        then, end = start.hashes.get(b.path), now.hashes.get(b.path)
        if then and end and then != end:
            out.append(Blocker(("SCOPE-2", "MARK-3"), f"{b.path} changed during the run: "
                               f"{then} at start, {end} now"))
        if end and end != b.sha256:
            out.append(Blocker(("SCOPE-2", "MARK-3"), f"{b.path} hashes to {end}, "
                               f"inventory claims {b.sha256}"))
    out += running_blockers(now)
    out += runtime_blockers(inv, start.runtime, now.runtime)
    if now.manifest_error is not None:
        out.append(Blocker(("SCOPE-1", "MARK-3"),
                           f"source manifest cannot be computed: {now.manifest_error}"))
    elif now.manifest != inv.source_manifest_sha256:
        out.append(Blocker(("SCOPE-1", "MARK-3"), f"source manifest is {now.manifest}, "
                           f"inventory claims {inv.source_manifest_sha256}"))
    return out


def running_blockers(now: Content) -> list[Blocker]:
    """SCOPE-2 at write time: the supervisor that runs now executes the installed
    binary (its MainPID's /proc/<pid>/exe is the installed path's device and
    inode), whatever ran earlier in the session."""
    if now.running is None:
        return []
    return [Blocker(("SCOPE-2", "MARK-3"), f"at marker time: {now.running}")]


def runtime_blockers(inv: Inventory, at_start: tuple[str | None, str],
                     at_marker: tuple[str | None, str]) -> list[Blocker]:
    """RUNTIME-1 at write time, as SCOPE-2 for the binaries: the runtime hashes
    to runtime.sha256 at session start and again at marker time. It lies in a
    directory the service user owns, who can rename another file into its
    place at any moment: what RUNTIME-1 read and RUNTIME-2 ran must still be
    there when the marker is written."""
    pin, path = inv.runtime.sha256, inv.runtime.binary
    out = []
    for when, (digest, said) in (("at session start", at_start), ("at marker time", at_marker)):
        if digest is None:
            out.append(Blocker(("RUNTIME-1", "MARK-3"), f"{when}: the runtime is {said}"))
        elif digest != pin:
            out.append(Blocker(("RUNTIME-1", "MARK-3"), f"{when}: {path} hashes to {digest}, "
                               f"the pin runtime.sha256 is {pin}"))
    start, end = at_start[0], at_marker[0]
    if start and end and start != end:
        out.append(Blocker(("RUNTIME-1", "MARK-3"), f"{path} changed during the run: {start} at "
                           f"start, {end} now"))
    return out


def signing_blockers(now: AtMarkerTime) -> list[Blocker]:
    """Signing was asked for (--sign-key): a key that fails the chain check
    (SUITE-4: root's secret, judged like the suite's own tree) or a tool that
    is not installed (SUITE-2: the signed Statement is part of what is
    attached) blocks before the marker, and nothing is signed with it."""
    return [Blocker(e.requirements, str(e)) for e in now.sign_problems]


def waiver_blockers(session: Session, now: AtMarkerTime,
                    found: list[Blocker]) -> tuple[list[Blocker], tuple[waivers.Waiver, ...]]:
    """Waivers acknowledge CONCERN items only (waivers.py): a bad waiver file
    or a waiver that may not stand blocks; the rest stand, for the report.
    `found`: every other blocker (a waiver never stands for a failing ID)."""
    if now.waiver_error is not None:
        return [Blocker(now.waiver_error.requirements, str(now.waiver_error))], ()
    concern_ids = {t.split(":", 1)[0] for texts in session.concerns.values() for t in texts}
    concern_ids |= {i for ids in session.items.values() for i in ids
                    if i in BY_ID and BY_ID[i].severity == CONCERN}
    failing = {i for b in found for i in b.ids}
    out, standing = [], []
    for w in now.waivers:
        bad = waivers.problems([w], concern_ids, failing, now.today)
        out += [Blocker(ids, reason) for ids, reason in bad]
        if not bad:
            standing.append(w)
    return out, tuple(standing)


CODE_SHOWN = 10  # code problems shown one by one (the JUnit's blocker properties hold these)


def code_blockers(now: AtMarkerTime) -> list[Blocker]:
    """SUITE-3: only the reviewed suite's code judged (loaded_code.py): each
    piece of code in the process that is not the checkout's, the pinned
    distributions' or the interpreter's, up to CODE_SHOWN, then how many more."""
    found = now.foreign_code
    out = [Blocker(("SUITE-3",), p) for p in found[:CODE_SHOWN]]
    if len(found) > CODE_SHOWN:
        out.append(Blocker(("SUITE-3",), f"and {len(found) - CODE_SHOWN} more of the process's code or start "
                           "that is not the suite's (every one a `foreign-code` property of the report)"))
    return out


def decide(setup: Setup, session: Session, start: AtStart, now: AtMarkerTime) -> Decision:
    """Everything that keeps the marker away. First what kept tests from
    running at all (the preflight's cause, then every shared cause of tests
    not run, a stop from outside or the run's bound before that), so that an
    operator reads the cause before its consequences."""
    cause = preflight_cause(setup)
    lead = (([Blocker(("SUITE-3",), cause)] if cause else []) + watch_blockers(session)
            + not_run_blockers(setup, session))
    out = []
    if now.euid != 0:
        out.append(Blocker(("MARK-1",), f"not running as root (euid {now.euid})"))
    if "could not remove" in setup.removal or "no marker looked for" in setup.removal:
        out.append(Blocker(("MARK-4",), setup.removal))  # what stands there is unknown
    out += run_shape_blockers(setup, session)
    out += [Blocker(("SUITE-3",), why) for why in session.shape_problems]
    out += code_blockers(now)
    if not session.junit:
        out.append(Blocker(("SUITE-2",), "no JUnit report is being written (junitxml disabled?)"))
    if session.exitstatus not in (EXIT_OK, EXIT_TESTS_FAILED) and \
            not (cause and session.exitstatus == EXIT_NO_TESTS_COLLECTED):
        out.append(Blocker(("SUITE-3",), f"pytest ended with status {session.exitstatus}"))
    out += module_blockers(setup, session)
    out += nodeid_blockers(setup, session)
    out += records_blockers(setup)
    out += suite_blockers(start, now)
    out += duplicate_blockers(session)
    out += outcome_blockers(session)
    out += [Blocker(("SUITE-1", "SUITE-4"), f"a directory the run made and handed out was not removed: {u}")
            for u in now.unfinished]
    if not session.items:
        out.append(Blocker(("SUITE-3",), "no acceptance test was collected"))
    if not cause:  # after a failed preflight nothing ran: coverage and content add only noise
        out += coverage_blockers(session)
        # no cause: the inventory loaded and the content was read
        out += content_blockers(cast(Inventory, setup.inventory), start, cast(Content, now.content))
    out += signing_blockers(now)
    waived, standing = waiver_blockers(session, now, lead + out)
    found = lead + out + waived
    if not found and not setup.write_marker:
        found.append(Blocker(("MARK-1",), "--no-marker given: the marker was not written"))
    return Decision(tuple(found), standing, bool(now.sign_problems))
