"""The marker gate: what a session did, and whether that earns the marker.

The marker was removed before the gate was registered (startup.py, MARK-4).
The gate watches every collection and test report, and at the end writes the
marker only when every condition in `blockers()` comes back empty (MARK-1,
SUITE-3). The last line of the terminal
output is either ``READY: marker written <path>`` or
``NOT READY: <n> blockers: <IDs>``.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pty_acceptance.gate import marker, nodeids, preflight, runshape, startup, waivers
from pty_acceptance.host import hostfs, scratch, terminal
from pty_acceptance.provenance import manifest, running
from pty_acceptance.report import bundle, reports, signing, verdict
from pty_acceptance.spec.checklist import Section
from pty_acceptance.spec.inventory import Inventory
from pty_acceptance.gate import marks
from pty_acceptance.gate.marks import check_requirement_marks, requirement_ids
from pty_acceptance.spec.requirements import BY_ID, CATALOGUE, CONCERN, ENFORCED_BY_GATE, sort_key

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


@dataclass
class GateState:
    root: Path
    acceptance: Path
    inventory: Inventory | None  # None: it did not load (the preflight's cause says why)
    marker: str
    write_marker: bool
    sections: list[Section]
    checklist_error: str | None
    hostname: str
    args: list[Path]
    removal: str = ""
    preflight: "preflight.Result | None" = None
    inventory_file: str = ""
    not_run: dict[str, str] = field(default_factory=dict)  # nodeid -> why it did not run (marks.not_run)
    expected: dict[str, tuple[str, ...]] = field(default_factory=dict)  # nodeids.FILE: nodeid -> IDs
    nodeids_error: str | None = None
    start_hashes: dict[str, str] = field(default_factory=dict)
    start_errors: list[str] = field(default_factory=list)
    items: dict[str, tuple[str, ...]] = field(default_factory=dict)  # nodeid -> IDs
    modules: dict[str, str] = field(default_factory=dict)  # nodeid -> module relpath
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)  # nodeid -> phase -> worst outcome
    reports: dict[tuple[str, str], int] = field(default_factory=dict)  # (nodeid, phase) -> reports seen
    collected: dict[str, int] = field(default_factory=dict)  # nodeid -> times collected
    collect_errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    deselected: int = 0
    interrupted: bool = False
    result: list[Blocker] | None = None
    written: bool = False
    report_path: str = ""  # the JUnit report in the report directory
    report_private_dir: str | None = None  # where pytest's JUnit writer writes it first
    marker_hashes: dict[str, str] = field(default_factory=dict)  # what content_blockers read
    runtime_at_start: tuple[str | None, str] = (None, "not read")  # runtime_digest at session start
    runtime_at_marker: tuple[str | None, str] = (None, "not read")  # and at marker time
    matrix: list[str] = field(default_factory=list)  # verdict.terminal_lines of the published report
    bundle_files: list[str] = field(default_factory=list)
    waivers_file: str | None = None
    waivers: list = field(default_factory=list)  # the waivers that stand (waivers.Waiver)
    concerns: dict[str, list[str]] = field(default_factory=dict)  # nodeid -> "<ID>: text"
    signer: signing.Signer | None = None  # --sign-key/--sign-tool
    sign_refused: bool = False  # the key or tool failed its preflight: nothing is signed


def hash_binaries(inv: Inventory) -> tuple[dict[str, str], list[str]]:
    hashes, errors = {}, []
    for b in inv.binaries_list:
        try:
            hashes[b.path] = hostfs.sha256_nofollow(b.path, inv.limit("artifact_bytes"))
        except OSError as e:
            errors.append(f"{b.path}: {e.strerror or e}")
    return hashes, errors


def runtime_digest(inv: Inventory) -> tuple[str | None, str]:
    """(SHA-256 or None, "<sha256>  <path>" or why it could not be read) of the
    runtime binary: the report's runtime-at-start/-at-marker-time (the in-toto
    subject), judged by runtime_blockers. It lies in the service user's tree:
    reached from / without following a link in any component (SUITE-4), read
    by descriptor, at most limits.runtime_bytes."""
    path = inv.runtime.binary
    try:
        fd = hostfs.open_file(path)
        try:
            digest = hostfs.sha256_fd_bounded(fd, inv.limit("runtime_bytes"), path)
        finally:
            os.close(fd)
    except OSError as e:
        return None, f"not readable: {path}: {e.strerror or e}"
    return digest, f"{digest}  {path}"


def file_digest(path: str | Path, limit: hostfs.Limit | None = None) -> str:
    """"<sha256>  <path>" of a file the bundle names, never through a link."""
    try:
        return f"{hostfs.sha256_file(os.path.abspath(path), limit)}  {path}"
    except OSError as e:
        return f"not readable: {path}: {e.strerror or e}"


def run_shape_blockers(config: pytest.Config, state: GateState) -> list[Blocker]:
    out = []
    for attr, flag in NARROWING_OPTIONS:
        value = getattr(config.option, attr, None)
        if value:
            out.append(Blocker(("SUITE-3",), f"run narrowed or stopped early by {flag} ({value!r})"))
    if state.deselected:
        out.append(Blocker(("SUITE-3",), f"{state.deselected} tests deselected"))
    if any(p != state.acceptance for p in state.args) or any("::" in a for a in config.args):
        out.append(Blocker(("SUITE-3",), "paths narrower than acceptance/: "
                           + " ".join(config.args)))
    if state.outside:
        out.append(Blocker(("SUITE-3",), f"{len(state.outside)} tests outside acceptance/ "
                           f"collected, e.g. {state.outside[0]}"))
    if state.interrupted:
        out.append(Blocker(("SUITE-3",), "the session was interrupted"))
    for err in state.collect_errors:
        out.append(Blocker(("SUITE-3",), f"collection error in {err}"))
    return out


def nodeid_blockers(state: GateState) -> list[Blocker]:
    """SUITE-3: every test the checkout lists (nodeids.FILE) was collected,
    with the requirement IDs listed for it, and nothing else was. A missing
    test blocks under its own IDs, one line per module."""
    if state.nodeids_error:
        return [Blocker(("SUITE-3",), f"the checkout's list of tests: {state.nodeids_error}")]
    missing, extra, changed = nodeids.differences(state.expected, state.items)
    out = []
    for module, tests in missing.items():
        ids = tuple(sorted({i for n in tests for i in state.expected[n]}, key=sort_key))
        names = ", ".join(n.split("::", 1)[1] for n in tests[:8]) + (", ..." if len(tests) > 8 else "")
        out.append(Blocker(ids, f"{module}: {len(tests)} of its tests in {nodeids.FILE} were not "
                           f"collected: {names}"))
    if extra:
        out.append(Blocker(("SUITE-3",), f"{len(extra)} tests collected that {nodeids.FILE} does not "
                           f"list (pty-acceptance node-ids --write after a review), e.g. {extra[0]}"))
    out += [Blocker(("SUITE-3",), f"requirement IDs changed: {c}") for c in changed[:8]]
    return out


def module_blockers(state: GateState) -> list[Blocker]:
    if state.checklist_error:
        return [Blocker(("SUITE-3",), state.checklist_error)]
    ran = set(state.modules.values())
    out = []
    for s in state.sections:
        if s.module not in ran:
            out.append(Blocker(s.ids or ("SUITE-3",), f"{s.module} ({s.title}) is listed in "
                               "ROOT-ACCEPTANCE.md but no test of it was collected"))
    listed = {s.module for s in state.sections}
    for mod in sorted(ran - listed):
        out.append(Blocker(("SUITE-3",), f"{mod} ran but ROOT-ACCEPTANCE.md does not list it"))
    return out


def duplicate_blockers(state: GateState) -> list[Blocker]:
    """SUITE-3: one test, one result. A node id collected twice
    (--keep-duplicates) or a phase reported twice (a rerun plugin) blocks."""
    twice = {nodeid: n for nodeid, n in state.collected.items() if n > 1}
    out = [Blocker(("SUITE-3",), f"{nodeid} was collected {n} times (--keep-duplicates?): "
                   "its results cannot be told apart") for nodeid, n in twice.items()]
    repeated: dict[str, list[str]] = {}
    for (nodeid, phase), n in state.reports.items():
        if n > 1 and nodeid not in twice:
            repeated.setdefault(nodeid, []).append(
                f"{phase} {n} times (worst: {state.outcomes[nodeid][phase]})")
    out += [Blocker(("SUITE-3",), f"{nodeid} was reported more than once (a rerun?): "
                    + ", ".join(what) + "; the worst outcome counts")
            for nodeid, what in repeated.items()]
    return out


def preflight_cause(state: GateState) -> str | None:
    """The preflight's first failed check, in words (None: it passed)."""
    cause = state.preflight.cause if state.preflight is not None else None
    return f"preflight: {cause}" if cause else None


def not_run_blockers(state: GateState) -> list[Blocker]:
    """Tests that could not run for one shared cause (marks.not_run, or the
    preflight), one blocker per cause first, then one per module under the
    IDs of its tests: the cause is said once, not once per test."""
    causes: dict[str, dict[str, list[str]]] = {}
    for nodeid, cause in state.not_run.items():
        causes.setdefault(cause, {}).setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
    out = []
    for cause, modules in causes.items():
        n = sum(len(t) for t in modules.values())
        if cause != preflight_cause(state):  # the preflight's own blocker leads already
            out.append(Blocker(("SUITE-3",), f"{cause} ({n} tests in {len(modules)} modules not run)"))
    for cause, modules in causes.items():
        for module, tests in modules.items():
            ids = tuple(sorted({i for n in tests for i in state.items.get(n, ())}, key=sort_key))
            out.append(Blocker(ids or ("SUITE-3",), f"{module}: {len(tests)} tests not run: "
                               f"{cause_label(cause)} (above)"))
    return out


def cause_label(cause: str) -> str:
    """A cause's name, for the lines that refer back to it: "preflight:
    systemd", "wire format"."""
    parts = cause.split(": ")
    return ": ".join(parts[:2] if parts[0] == "preflight" else parts[:1])


def outcome_blockers(state: GateState) -> list[Blocker]:
    out = []
    for nodeid, ids in state.items.items():
        if nodeid in state.not_run:
            continue  # not_run_blockers: grouped by their cause
        phases = state.outcomes.get(nodeid, {})
        bad = {ph: o for ph, o in phases.items() if o != "passed"}
        if "call" not in phases and not bad:
            out.append(Blocker(ids, f"{nodeid} did not run"))
        elif bad:
            what = ", ".join(f"{ph} {o}" for ph, o in bad.items())
            out.append(Blocker(ids, f"{nodeid}: {what}"))
        elif "teardown" not in phases:
            out.append(Blocker(ids, f"{nodeid} did not finish (no teardown report)"))
    return out


def passed_ids(state: GateState) -> set[str]:
    ids: set[str] = set()
    for nodeid, req in state.items.items():
        phases = state.outcomes.get(nodeid, {})
        if phases and all(o == "passed" for o in phases.values()) and \
                {"setup", "call", "teardown"} <= set(phases):
            ids.update(req)
    return ids


def coverage_blockers(state: GateState) -> list[Blocker]:
    need = {r.id for r in CATALOGUE} - ENFORCED_BY_GATE
    missing = sorted(need - passed_ids(state), key=sort_key)
    if not missing:
        return []
    return [Blocker(tuple(missing), f"{len(missing)} requirements have no passing test in this run")]


def content_blockers(state: GateState) -> list[Blocker]:
    """SCOPE-1/2 at write time: binaries unchanged since session start and equal
    to the inventory; the running supervisor executes the installed binary; the
    source manifest recomputed equals the inventory."""
    inv = state.inventory
    out = [Blocker(("SCOPE-2", "MARK-3"), f"at session start: {e}") for e in state.start_errors]
    now, errors = hash_binaries(inv)
    state.marker_hashes = now
    out += [Blocker(("SCOPE-2", "MARK-3"), f"at marker time: {e}") for e in errors]
    for b in inv.binaries_list:
        start, end = state.start_hashes.get(b.path), now.get(b.path)
        if start and end and start != end:
            out.append(Blocker(("SCOPE-2", "MARK-3"), f"{b.path} changed during the run: "
                               f"{start} at start, {end} now"))
        if end and end != b.sha256:
            out.append(Blocker(("SCOPE-2", "MARK-3"), f"{b.path} hashes to {end}, "
                               f"inventory claims {b.sha256}"))
    out += running_blockers(inv)
    out += runtime_blockers(state)
    try:
        digest, _ = manifest.compute(inv.pilot_root, inv.code_root, inv.tree_bounds())
        if digest != inv.source_manifest_sha256:
            out.append(Blocker(("SCOPE-1", "MARK-3"), f"source manifest is {digest}, "
                               f"inventory claims {inv.source_manifest_sha256}"))
    except manifest.ManifestError as e:
        out.append(Blocker(("SCOPE-1", "MARK-3"), f"source manifest cannot be computed: {e}"))
    return out


def runtime_blockers(state: GateState) -> list[Blocker]:
    """RUNTIME-1 at write time, as SCOPE-2 for the binaries: the runtime hashes
    to runtime.sha256 at session start and again at marker time. It lies in a
    directory the service user owns, who can rename another file into its
    place at any moment: what RUNTIME-1 read and RUNTIME-2 ran must still be
    there when the marker is written."""
    inv = state.inventory
    state.runtime_at_marker = runtime_digest(inv)
    pin, path = inv.runtime.sha256, inv.runtime.binary
    out = []
    for when, (digest, said) in (("at session start", state.runtime_at_start),
                                 ("at marker time", state.runtime_at_marker)):
        if digest is None:
            out.append(Blocker(("RUNTIME-1", "MARK-3"), f"{when}: the runtime is {said}"))
        elif digest != pin:
            out.append(Blocker(("RUNTIME-1", "MARK-3"), f"{when}: {path} hashes to {digest}, "
                               f"the pin runtime.sha256 is {pin}"))
    start, end = state.runtime_at_start[0], state.runtime_at_marker[0]
    if start and end and start != end:
        out.append(Blocker(("RUNTIME-1", "MARK-3"), f"{path} changed during the run: {start} at "
                           f"start, {end} now"))
    return out


def running_blockers(inv: Inventory) -> list[Blocker]:
    """SCOPE-2 at write time: the supervisor that runs now executes the installed
    binary (its MainPID's /proc/<pid>/exe is the installed path's device and
    inode), whatever ran earlier in the session."""
    binary = inv.binaries.supervisor.path
    try:
        found = running.at_marker_time(inv.units.supervisor, binary)
    except running.RunningError as e:
        return [Blocker(("SCOPE-2", "MARK-3"), f"at marker time: {e}")]
    if found.problem:
        return [Blocker(("SCOPE-2", "MARK-3"), f"at marker time: {found.problem}")]
    return []


def blockers(config: pytest.Config, state: GateState, exitstatus: int) -> list[Blocker]:
    """Everything that keeps the marker away. First what kept tests from
    running at all (the preflight's cause, then every shared cause of tests
    not run), so that an operator reads the cause before its consequences."""
    cause = preflight_cause(state)
    lead = ([Blocker(("SUITE-3",), cause)] if cause else []) + not_run_blockers(state)
    out = []
    if os.geteuid() != 0:
        out.append(Blocker(("MARK-1",), f"not running as root (euid {os.geteuid()})"))
    if "could not remove" in state.removal:
        out.append(Blocker(("MARK-4",), state.removal))
    out += run_shape_blockers(config, state)
    out += [Blocker(("SUITE-3",), why) for why in runshape.problems(config)]
    from _pytest.junitxml import xml_key

    if config.stash.get(xml_key, None) is None:
        out.append(Blocker(("SUITE-2",), "no JUnit report is being written (junitxml disabled?)"))
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) and \
            not (cause and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED):
        out.append(Blocker(("SUITE-3",), f"pytest ended with status {int(exitstatus)}"))
    out += module_blockers(state)
    out += nodeid_blockers(state)
    out += duplicate_blockers(state)
    out += outcome_blockers(state)
    out += [Blocker(("SUITE-1", "SUITE-4"), f"a directory the run made and handed out was not removed: {u}")
            for u in scratch.unfinished()]
    if not state.items:
        out.append(Blocker(("SUITE-3",), "no acceptance test was collected"))
    if not cause:  # after a failed preflight nothing ran: coverage and content add only noise
        out += coverage_blockers(state)
        out += content_blockers(state)
    out += signing_blockers(state)
    out += waiver_blockers(state, lead + out)
    return lead + out


def signing_blockers(state: GateState) -> list[Blocker]:
    """Signing was asked for (--sign-key): a key that fails the chain check
    (SUITE-4: root's secret, judged like the suite's own tree) or a tool that
    is not installed (SUITE-2: the signed Statement is part of what is
    attached) blocks before the marker, and nothing is signed with it."""
    if state.signer is None:
        return []
    found = signing.preflight(state.signer)
    state.sign_refused = bool(found)
    return [Blocker((e.rule,), str(e)) for e in found]


def waiver_blockers(state: GateState, found: list[Blocker]) -> list[Blocker]:
    """Waivers acknowledge CONCERN items only (waivers.py): a bad waiver file
    or a waiver that may not stand blocks; the rest are kept for the report."""
    state.waivers = []
    if not state.waivers_file:
        return []
    try:
        given = waivers.load(state.waivers_file)
    except waivers.WaiverError as e:
        return [Blocker((e.rule,), str(e))]
    concern_ids = {t.split(":", 1)[0] for texts in state.concerns.values() for t in texts}
    concern_ids |= {i for ids in state.items.values() for i in ids
                    if i in BY_ID and BY_ID[i].severity == CONCERN}
    failing = {i for b in found for i in b.ids}
    today = datetime.datetime.now(datetime.timezone.utc).date()
    out = []
    for w in given:
        bad = waivers.problems([w], concern_ids, failing, today)
        out += [Blocker(ids, reason) for ids, reason in bad]
        if not bad:
            state.waivers.append(w)
    return out


def expectation(inv: Inventory) -> marker.Expectation:
    return marker.Expectation(inv.revision, inv.source_manifest_sha256,
                              tuple(b.path for b in inv.binaries_list),
                              tuple(b.sha256 for b in inv.binaries_list))


class Gate:
    """Registered per acceptance session by plugin.pytest_configure."""

    def __init__(self, config: pytest.Config, state: GateState):
        self.config = config
        self.state = state
        self.withheld: list[pytest.Item] = []  # not run: the preflight failed for them
        self.property_names: dict[str, int] = {}  # suite-level property names used so far

    def _global(self, name: str, value: str) -> None:
        """A suite-level property of the JUnit report; a repeated name is
        numbered (reports.property_name: `pin`, `pin.2`, ...)."""
        from _pytest.junitxml import xml_key  # the JUnit writer pytest already runs

        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.add_global_property(reports.property_name(name, self.property_names), value)

    def cleaned(self) -> str:
        """What the start-up removed of an earlier, killed run (startup.take_lock)."""
        done = self.config.stash.get(startup.CLEANED, [])
        return "at start, " + ("; ".join(done) if done else "nothing left by an earlier run")

    # -- start
    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """The preflight's verdict, before any test (and its first cause, once)."""
        found = self.state.preflight
        if found is None:
            return []
        bad = found.failed
        if not bad:
            return [f"preflight: passed ({len(found.findings)} checks)"]
        head = f"NOT READY: {preflight_cause(self.state)}" if found.cause else \
            f"preflight: {len(bad)} checks failed: their tests will not run"
        return [terminal.escape(head)] + [terminal.escape(f"  preflight {f.line()}") for f in bad]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        st = self.state  # the marker was removed before the gate existed (startup.py)
        found = st.preflight
        if found is not None:  # first in the report: an operator reads the cause before the rest
            bad = found.failed
            self._global("preflight", bad[0].cause if bad else f"passed ({len(found.findings)} checks)")
            for f in bad[1:]:
                self._global("preflight", f.cause)
        self._global("MARK-4", st.removal)
        self._global("SUITE-5", self.cleaned())
        if st.inventory is None:
            self._global("inventory", f"{st.inventory_file}: did not load")
            return
        st.start_hashes, st.start_errors = hash_binaries(st.inventory)
        if startup.sigint_ignored():
            self._global("sigint", startup.SIGINT_IGNORED)
        self._global("inventory", f"{st.inventory.file} host {st.inventory.host}")
        self._global("hostname", st.hostname)
        self._global("SCOPE-4", "host acceptance only: this report says whether this host "
                     "passed root acceptance; it is not, and never stands in for, the "
                     "independent source review's MERGE verdict")
        for path, digest in st.start_hashes.items():
            self._global("binary-at-start", f"{digest}  {path}")
        st.runtime_at_start = runtime_digest(st.inventory)
        self._global("runtime-at-start", st.runtime_at_start[1])
        inv = st.inventory
        self._global("pin", f"revision {inv.revision}")
        self._global("pin", f"source-manifest {inv.source_manifest_sha256}")
        for b in inv.binaries_list:
            self._global("pin", f"{b.sha256}  {b.path}")
        self._global("pin", f"{inv.runtime.sha256}  {inv.runtime.binary}")
        p = inv.plugin  # PLUGIN-1 runs only these bytes (smoke.py): the Statement's configuration
        self._global("plugin-bun-pin", f"{p.bun_sha256}  {p.bun}")
        self._global("plugin-harness-pin", f"{p.harness_sha256}  {p.harness}")
        self._global("inventory-file", file_digest(inv.file))
        self._global("checklist-file", file_digest(st.root / "ROOT-ACCEPTANCE.md"))
        try:  # evidence only: the marker-time check (running_blockers) decides
            found = running.at_marker_time(st.inventory.units.supervisor,
                                           st.inventory.binaries.supervisor.path)
            self._global("supervisor-at-start", found.describe()
                         + (f" PROBLEM: {found.problem}" if found.problem else ""))
        except running.RunningError as e:
            self._global("supervisor-at-start", f"not tied to the binary: {e}")

    # -- collection
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.state.collect_errors.append(report.nodeid or "(session)")

    def pytest_deselected(self, items) -> None:
        self.state.deselected += len(items)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        check_requirement_marks(items, self.state.acceptance)
        self._withhold(items)

    def _withhold(self, items) -> None:
        """Tests the preflight says cannot run here are not run: recorded as
        collected, each with its cause (not_run_blockers groups them)."""
        st = self.state
        if st.preflight is None or not st.preflight.failed:
            return
        kept = []
        for item in items:
            why = st.preflight.withheld(tuple(requirement_ids(item)))
            if why is None:
                kept.append(item)
                continue
            self._record(item)
            st.not_run[item.nodeid] = f"preflight: {why}"
            self.withheld.append(item)
        items[:] = kept

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session):
        """Each test withheld by the preflight is reported (JUnit, terminal) as
        not run, with its requirement IDs: skipped at setup, the cause named
        by module, so that pytest's summary says it once per module."""
        for item in self.withheld:
            where = (str(item.path), 0, f"not run: {cause_label(self.state.not_run[item.nodeid])} "
                                        "(the preflight's cause, above)")
            for when, outcome, longrepr in (("setup", "skipped", where), ("teardown", "passed", None)):
                item.ihook.pytest_runtest_logreport(report=pytest.TestReport(
                    item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome, longrepr, when,
                    user_properties=list(item.user_properties)))
        return (yield)

    def _record(self, item) -> None:
        st = self.state
        path = Path(item.path).resolve()
        if st.acceptance not in path.parents:
            st.outside.append(item.nodeid)
            return
        st.collected[item.nodeid] = st.collected.get(item.nodeid, 0) + 1
        st.items[item.nodeid] = tuple(requirement_ids(item))
        st.modules[item.nodeid] = str(path.relative_to(st.root.resolve()))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            self._record(item)

    # -- running
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and (why := marks.not_run_cause(report.longreprtext)):
            self.state.not_run.setdefault(report.nodeid, why)
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        key = (report.nodeid, report.when)
        self.state.reports[key] = self.state.reports.get(key, 0) + 1
        phases = self.state.outcomes.setdefault(report.nodeid, {})
        phases[report.when] = worse(phases.get(report.when, "passed"), outcome)
        said = self.state.concerns.setdefault(report.nodeid, [])
        said += [str(v) for k, v in report.user_properties if k == "concern" and str(v) not in said]

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.state.interrupted = True

    # -- end
    # The order at the end is the point (MARK-1, SUITE-2): decide; pytest's
    # JUnit writer writes (into a private directory); the report is published
    # into the report directory, read back and parsed; only then the marker.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus):
        self._decide(session, exitstatus)  # before the JUnit writer: its properties go in
        result = yield  # pytest's JUnit writer has written its file
        st = self.state
        published = self._publish()
        ahead = None
        if published is not None:
            st.result.append(published)
        elif not st.result and st.signer:
            ahead = self._sign_ahead()  # signed before the marker: its failure blocks
            if st.result:
                self._report_not_ready()
        if published is None and not st.result:
            st.result = self._write()  # the report exists on disk and parses
            if st.result:
                self._report_not_ready()
        if published is None:
            self._bundle(ahead if st.written else None)
        else:
            st.matrix = ["no requirement matrix: the JUnit report was not published"]
        withheld_all = self.withheld and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
        if st.result and (session.exitstatus == pytest.ExitCode.OK or withheld_all):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # NOT READY: 1, as any failed run
        return result

    def _decide(self, session: pytest.Session, exitstatus) -> None:
        st = self.state
        if session.shouldstop or session.shouldfail:
            st.interrupted = True
        found = blockers(self.config, st, exitstatus)
        if not found and not st.write_marker:
            found.append(Blocker(("MARK-1",), "--no-marker given: the marker was not written"))
        st.result = found
        for path, digest in st.marker_hashes.items():
            self._global("binary-at-marker-time", f"{digest}  {path}")
        self._global("runtime-at-marker-time", st.runtime_at_marker[1])
        if st.waivers_file:
            self._global("waiver-file", file_digest(st.waivers_file))
        if st.signer:
            self._global("signing", f"{st.signer.tool} key {st.signer.key}"
                         + (": refused, nothing signed" if st.sign_refused else
                            ": the Statement is signed in a DSSE envelope beside it"))
        for w in st.waivers:
            self._global("waiver", w.describe())
        for b in found:
            self._global("blocker", f"{' '.join(b.ids)}: {b.reason}")
        self._global("gate", "READY" if not found else "NOT READY")
        if not found:
            self._global("marker", f"{st.marker} (written after this report, only if it can be)")

    def _publish(self) -> Blocker | None:
        """The JUnit report into the report directory, safely (reports.py)."""
        from _pytest.junitxml import xml_key

        st = self.state
        xml = self.config.stash.get(xml_key, None)
        if xml is None or not st.report_path:
            return Blocker(("SUITE-2",), "no JUnit report was written")
        try:
            reports.publish(xml.logfile, st.report_path)
        except (reports.ReportError, OSError) as e:
            return Blocker(("SUITE-2",), f"the JUnit report was not published: {e}")
        finally:
            reports.discard(st.report_private_dir)
        xml.logfile = st.report_path  # what pytest's "generated xml file" line shows
        return None

    def _build(self, ready: bool) -> bundle.Bundle:
        st = self.state
        said = [f"{' '.join(b.ids)}: {b.reason}" for b in st.result or []]
        data = hostfs.read_file(st.report_path, reports.LIMIT)
        return bundle.build(data, st.report_path, st.sections, ready=ready, extra_blockers=said)

    def _sign_ahead(self) -> bundle.Bundle | None:
        """With --sign-key, on a run with no blocker: the bundle the marker
        would make true (result PASSED), its Statement signed now, before the
        marker is written, so that a signing failure blocks it (SUITE-2)."""
        st = self.state
        st.sign_refused = True  # unless it succeeds: a failure is not tried again after
        try:
            made = self._build(ready=True)
            made.envelope = signing.sign(st.signer, made.statement)
            st.sign_refused = False
        except signing.SignError as e:
            st.result = [Blocker((e.rule,), f"the in-toto Statement was not signed: {e}")]
            return None
        except (OSError, reports.ReportError, verdict.VerdictError) as e:
            st.result = [Blocker(("SUITE-2",), f"the in-toto Statement was not signed: {e}")]
            return None
        return made

    def _sign_after(self, made: bundle.Bundle) -> None:
        """A run that is NOT READY: its FAILED Statement is signed too when the
        key and tool passed their checks; a failure adds a blocker."""
        st = self.state
        if st.signer is None or st.sign_refused or made.verdict.ready:
            return
        try:
            made.envelope = signing.sign(st.signer, made.statement)
        except signing.SignError as e:
            st.result.append(Blocker((e.rule,), f"the in-toto Statement was not signed: {e}"))

    def _bundle(self, ahead: bundle.Bundle | None = None) -> None:
        """The verdict bundle from the published report (bundle.py); `ahead`,
        signed before the marker, when the marker was written since. If it
        cannot be written, the marker just written is taken back: NOT READY."""
        st = self.state
        try:
            made = ahead or self._build(ready=st.written)
            if ahead is None:
                self._sign_after(made)
            st.matrix = verdict.terminal_lines(made.verdict, made.rows)
            st.bundle_files = bundle.write(st.report_path, made)
        except (OSError, reports.ReportError, verdict.VerdictError) as e:
            st.result = (st.result or []) + [Blocker(("SUITE-2",), "the verdict bundle (HTML, "
                                                     f"in-toto Statement) was not written: {e}")]
            if st.written:
                st.written = False
                try:
                    marker.remove(st.marker)
                except (OSError, marker.UnsafeChain) as gone:
                    st.result.append(Blocker(("MARK-4",), f"the marker could not be taken back: {gone}"))
                self._report_not_ready()

    def _report_not_ready(self) -> None:
        st = self.state
        try:
            reports.mark_not_ready(st.report_path, [f"{' '.join(b.ids)}: {b.reason}" for b in st.result])
        except (reports.ReportError, OSError) as e:
            st.result.append(Blocker(("SUITE-2",), f"{st.report_path} still says READY: {e}"))

    def _write(self) -> list[Blocker]:
        st = self.state
        inv = st.inventory
        records = [(st.start_hashes[b.path], b.path) for b in inv.binaries_list]
        content = marker.render(inv.revision, inv.source_manifest_sha256, records)
        try:
            marker.write(st.marker, content)
            marker.verify(st.marker, expectation(inv))
        except (OSError, marker.UnsafeChain, marker.MarkerRefused) as e:
            try:
                marker.remove(st.marker)
            except (OSError, marker.UnsafeChain):
                pass
            return [Blocker(("MARK-1",), f"writing or re-reading the marker failed: {e}")]
        st.written = True
        return []

    def summary_lines(self) -> list[str]:
        st = self.state
        if st.result is None:
            return ["NOT READY: 1 blockers: SUITE-3"]
        if not st.result:
            return [terminal.escape(f"READY: marker written {st.marker}")]
        ids = sorted({i for b in st.result for i in b.ids}, key=sort_key)
        last = terminal.escape(f"NOT READY: {len(st.result)} blockers: {' '.join(ids)}")
        cause = preflight_cause(st) or next(iter(st.not_run.values()), None)
        return ([terminal.escape(f"NOT READY: {cause}")] if cause else []) + [last]

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        """Every line here may carry host text (file names, error texts): each
        goes through terminal.escape (SUITE-4)."""
        st = self.state
        inv = (f"{st.inventory.file} (host {st.inventory.host})" if st.inventory is not None
               else f"{st.inventory_file} (did not load)")
        lines = [f"inventory: {inv}; marker: {st.marker}",
                 f"MARK-4: {st.removal}", f"SUITE-5: {self.cleaned()}"]
        lines += [startup.SIGINT_IGNORED] if startup.sigint_ignored() else []
        lines += [f"BLOCKER [{' '.join(b.ids)}] {b.reason}" for b in st.result or []]
        lines += st.matrix
        lines += [f"bundle: {path}" for path in st.bundle_files]
        terminalreporter.section("root acceptance gate")
        for line in lines:
            terminalreporter.line(terminal.escape(line))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        reports.discard(self.state.report_private_dir)  # a session that never finished
        tr = config.pluginmanager.get_plugin("terminalreporter")
        for line in self.summary_lines():
            if tr is not None:
                tr.write_line(line)
            else:
                print(line)
