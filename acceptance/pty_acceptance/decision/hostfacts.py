"""What the gate reads of the host, at session start and when the marker is
decided: the deployment's bytes and the running supervisor (SCOPE-1/2,
RUNTIME-1), the run's user and leftovers (MARK-1, SUITE-1/4), the signing
key and tool (--sign-key), the waiver file, and the code this process holds
(loaded_code.py, SUITE-3). Each reading becomes a frozen
record (run_records.py); the rules (rules.py) judge it, nothing here does.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import cast

from pty_acceptance.decision import loaded_code, waivers
from pty_acceptance.decision.run_records import AtMarkerTime, AtStart, Content, Setup, frozen
from pty_acceptance.host import hostfs, scratch
from pty_acceptance.provenance import distributions, manifest, running_binary, suite_identity
from pty_acceptance.report import signing
from pty_acceptance.spec.inventory import Inventory


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
    subject), judged by rules.runtime_blockers. It lies in the service user's
    tree: reached from / without following a link in any component (SUITE-4),
    read by descriptor, at most limits.runtime_bytes."""
    path = inv.runtime.binary
    try:
        fd = hostfs.open_file(path, user_writable=True)
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


def supervisor_now(inv: Inventory) -> running_binary.Running:
    """The running supervisor, tied (or not) to the installed binary
    (running_binary.py); raises running_binary.RunningError."""
    return running_binary.at_marker_time(inv.units.supervisor, inv.binaries.supervisor.path)


def suite_at_start(setup: Setup) -> tuple[suite_identity.Identity | None, str]:
    """Which suite judges (suite_identity.py), or why it could not be read."""
    try:
        return suite_identity.read(setup.root, distributions.site_dirs(sys.prefix)), ""
    except OSError as e:
        return None, f"the suite's own files could not be listed: {e}"


def suite_tree_now(setup: Setup) -> str:
    """The suite's tree digest now (judged against the one at start), or why not."""
    try:
        return suite_identity.digest(suite_identity.tree_listing(setup.root))
    except OSError as e:
        return f"not read: {e}"


def at_start(setup: Setup, inv: Inventory | None) -> AtStart:
    """At session start: which suite judges; and with an inventory, the
    deployment: the binaries' and the runtime's hashes (judged at marker
    time), and evidence for the report: the inventory and checklist files'
    digests and the running supervisor."""
    suite, why = suite_at_start(setup)
    if inv is None:
        return AtStart(suite=suite, suite_error=why)
    hashes, errors = hash_binaries(inv)
    runtime = runtime_digest(inv)
    inventory_digest = file_digest(inv.file)
    checklist_digest = file_digest(setup.root / "ROOT-ACCEPTANCE.md")
    try:  # evidence only: the marker-time check (rules.running_blockers) decides
        found = supervisor_now(inv)
        supervisor = found.describe() + (f" PROBLEM: {found.problem}" if found.problem else "")
    except running_binary.RunningError as e:
        supervisor = f"not tied to the binary: {e}"
    return AtStart(frozen(hashes), tuple(errors), runtime, inventory_digest, checklist_digest, supervisor,
                   suite, why)


def content(inv: Inventory) -> Content:
    """The deployment at marker time: the binaries, the running supervisor,
    the runtime, the source manifest recomputed (SCOPE-1/2, RUNTIME-1)."""
    hashes, errors = hash_binaries(inv)
    try:
        problem = supervisor_now(inv).problem
    except running_binary.RunningError as e:
        problem = str(e)
    runtime = runtime_digest(inv)
    try:
        digest, error = manifest.compute(inv.pilot_root, inv.code_root, inv.tree_bounds())[0], None
    except manifest.ManifestError as e:
        digest, error = None, str(e)
    return Content(frozen(hashes), tuple(errors), problem, runtime, digest, error)


def at_marker_time(setup: Setup, read_content: bool, plugins: tuple[tuple[str, object], ...] = (),
                   rewriter: loaded_code.Rewriter | None = None) -> AtMarkerTime:
    """What the host says when the marker is decided. `read_content`: false
    after a failed preflight (nothing ran; the content is not read);
    `plugins`: what pytest registered (the code in this process is judged
    with them: loaded_code.py)."""
    euid = os.geteuid()
    unfinished = tuple(scratch.unfinished())
    now = content(cast(Inventory, setup.inventory)) if read_content else None  # read: it loaded
    problems = tuple(signing.preflight(setup.signer)) if setup.signer is not None else ()
    given: tuple[waivers.Waiver, ...] = ()
    error: waivers.WaiverError | None = None
    if setup.waivers_file:
        try:
            given = tuple(waivers.load(setup.waivers_file))
        except waivers.WaiverError as e:
            error = e
    digest = file_digest(setup.waivers_file) if setup.waivers_file else None
    today = datetime.datetime.now(datetime.timezone.utc).date()
    foreign = tuple(loaded_code.problems(setup.root, loaded_code.this_process(plugins, rewriter, setup.root)))
    return AtMarkerTime(euid, unfinished, now, problems, given, error, digest, today, foreign, suite_tree_now(setup))
