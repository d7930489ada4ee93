"""What happened in an acceptance session, as frozen records: what the gate's
rules (rules.py) judge and its end (end_of_run.py) acts on.

Each record is made once, when what it holds is known, and never changed:
`Setup` when the gate is registered (plugin.py), `AtStart` at session start
and `AtMarkerTime` when the marker is decided (hostfacts.py: what the host
said), `Session` from pytest's hooks (recorder.py, the one reader of pytest's
objects). Nothing here reads the host or imports pytest.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from pty_acceptance.decision import preflight, waivers
from pty_acceptance.decision.waivers import WaiverError
from pty_acceptance.provenance.suite_identity import Identity
from pty_acceptance.report import signing
from pty_acceptance.spec.checklist import Section
from pty_acceptance.spec.inventory import Inventory

NOT_READ: tuple[str | None, str] = (None, "not read")  # a runtime digest that was never read

# An exit status as pytest gives it (pytest.ExitCode's values; the rules do
# not import pytest, tests/test_gate_rules.py holds the two together).
EXIT_OK, EXIT_TESTS_FAILED, EXIT_NO_TESTS_COLLECTED = 0, 1, 5


def frozen(d: Mapping) -> Mapping:
    """A read-only copy of a mapping (a record's field)."""
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class Setup:
    """What the run was set up as, fixed when the gate is registered
    (plugin.py). The stash key plugin.STATE holds it for the tests that read
    the marker path, the removal and the report path."""
    root: Path
    acceptance: Path
    inventory: Inventory | None  # None: it did not load (the preflight's cause says why)
    inventory_file: str
    preflight: preflight.Result | None
    marker: str
    removal: str  # MARK-4: what the start-up removal did, in words
    write_marker: bool  # not --no-marker
    sections: tuple[Section, ...]  # ROOT-ACCEPTANCE.md's table
    checklist_error: str | None
    record_sections: tuple[str, ...]  # the requirement records' sections (requirements.SECTIONS): "test_x.py"
    expected: Mapping[str, tuple[str, ...]]  # nodeids.FILE: nodeid -> IDs
    nodeids_error: str | None
    hostname: str
    args: tuple[Path, ...]  # the session's path arguments that reach into acceptance/
    report_path: str  # the JUnit report in the report directory ("": no JUnit writer)
    report_private_dir: str | None  # where pytest's JUnit writer writes it first
    waivers_file: str | None
    signer: signing.Signer | None  # --sign-key/--sign-tool
    report_claim: str = ""  # how the report's name became the run's (report/report_name.py)


@dataclass(frozen=True)
class Session:
    """What pytest reported: the collection, every phase's outcome, and how
    the session was shaped and ended (recorder.Recorder.freeze)."""
    items: Mapping[str, tuple[str, ...]]  # nodeid -> requirement IDs
    modules: Mapping[str, str]  # nodeid -> module relpath
    outcomes: Mapping[str, Mapping[str, str]]  # nodeid -> phase -> worst outcome
    reports: Mapping[tuple[str, str], int]  # (nodeid, phase) -> reports seen
    collected: Mapping[str, int]  # nodeid -> times collected
    not_run: Mapping[str, str]  # nodeid -> why it did not run (failures.not_run, the preflight)
    concerns: Mapping[str, tuple[str, ...]]  # nodeid -> "<ID>: text"
    collect_errors: tuple[str, ...]
    outside: tuple[str, ...]  # tests collected outside acceptance/
    deselected: int
    interrupted: bool
    narrowing: tuple[tuple[str, str], ...]  # (option as it reads, repr of its value) of each given
    args: tuple[str, ...]  # the session's arguments as given
    shape_problems: tuple[str, ...]  # invocation.problems
    junit: bool  # pytest's JUnit writer is on
    exitstatus: int
    # SUITE-5: what the run's own watches saw (host/stopguard.py, gate.RunBound)
    stops: tuple[str, ...] = ()  # each process of the suite's own stopped from outside, in words
    unwatched: str | None = None  # why the suite's processes were not watched for stops
    bound: str | None = None  # the whole run's bound was reached: where it was, in words


@dataclass(frozen=True)
class AtStart:
    """The deployment as read at session start (hostfacts.at_start); all
    empty when the inventory did not load."""
    hashes: Mapping[str, str] = field(default_factory=lambda: frozen({}))  # binary path -> SHA-256
    errors: tuple[str, ...] = ()  # binaries that could not be hashed
    runtime: tuple[str | None, str] = NOT_READ  # hostfacts.runtime_digest
    # evidence only, for the report (the marker-time reading decides)
    inventory_digest: str = ""  # "<sha256>  <path>" of the inventory file
    checklist_digest: str = ""  # and of ROOT-ACCEPTANCE.md
    supervisor: str = ""  # the running supervisor, tied to the installed binary or why not
    suite: Identity | None = None  # which suite judged (suite_identity.py); None: not read
    suite_error: str = ""  # why it was not


@dataclass(frozen=True)
class Content:
    """The deployment as read at marker time (SCOPE-1/2, RUNTIME-1)."""
    hashes: Mapping[str, str]  # binary path -> SHA-256
    errors: tuple[str, ...]  # binaries that could not be hashed
    running: str | None  # why the running supervisor is not the installed binary (None: it is)
    runtime: tuple[str | None, str]  # hostfacts.runtime_digest
    manifest: str | None  # the source manifest recomputed
    manifest_error: str | None  # why it could not be (manifest is None then)


@dataclass(frozen=True)
class AtMarkerTime:
    """What the host said when the marker was decided (hostfacts.at_marker_time)."""
    euid: int
    unfinished: tuple[str, ...]  # scratch.unfinished: directories handed out and not removed
    content: Content | None  # None: not read (the preflight failed: nothing ran)
    sign_problems: tuple[signing.SignError, ...]  # signing.preflight (): no signer, or none
    waivers: tuple[waivers.Waiver, ...]  # the waiver file's waivers, as loaded
    waiver_error: WaiverError | None  # the waiver file did not load (not waivers.: the field above shadows it)
    waivers_digest: str | None  # "<sha256>  <path>" of the waiver file (None: none given)
    today: datetime.date  # UTC: when a waiver expires
    foreign_code: tuple[str, ...] = ()  # loaded_code.problems: code in the process that is not the suite's
    suite_tree: str = ""  # the suite's tree digest now (suite_identity.py), or why it was not read
