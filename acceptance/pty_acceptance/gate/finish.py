"""The gate's end, one straight sequence of effects (MARK-1, MARK-4, SUITE-2).

After pytest's JUnit writer has written its report into a private directory
(its properties carry the decision, rules.py):

1. publish the report into the report directory, read back and parsed
   (reports.py); unpublished, nothing follows: no marker, no bundle;
2. sign, with --sign-key and no blocker: the Statement the marker would make
   true (PASSED), signed before the marker so that a signing failure blocks;
3. write the marker and verify it, with no blocker;
4. render the verdict bundle (HTML, in-toto Statement; bundle.py) from the
   published report, for every published run: a NOT READY run's Statement is
   signed then, when the key and tool passed their checks.

Signing and the marker stop at the first blocker. A step that fails after
the report said READY rewrites it NOT READY; a bundle that cannot be written
takes the marker just written back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from pty_acceptance.gate import marker
from pty_acceptance.gate.happened import AtStart, Setup
from pty_acceptance.gate.rules import Blocker, Decision
from pty_acceptance.host import hostfs
from pty_acceptance.report import bundle, reports, signing, verdict
from pty_acceptance.spec.inventory import Inventory

NO_MATRIX = "no requirement matrix: the JUnit report was not published"


@dataclass(frozen=True)
class Outcome:
    """What the end did: the blockers that stand, and what it wrote."""
    blockers: tuple[Blocker, ...]
    published: bool  # the JUnit report is in the report directory
    written: bool  # the marker is written
    matrix: tuple[str, ...]  # verdict.terminal_lines of the published report (not yet escaped)
    bundle_files: tuple[str, ...]


def finish(setup: Setup, start: AtStart, decision: Decision, junit_file: str | None) -> Outcome:
    """The sequence; `junit_file`: what pytest's JUnit writer wrote (None: it is off)."""
    found = list(decision.blockers)
    unpublished = publish(setup, junit_file)
    if unpublished is not None:
        return Outcome(tuple(found + [unpublished]), published=False, written=False, matrix=(NO_MATRIX,),
                       bundle_files=())
    may_sign = setup.signer is not None and not decision.sign_refused
    ahead = None
    if not found and setup.signer is not None:
        ahead, found = sign_ahead(setup)
        if found:
            may_sign = False  # a failure is not tried again after
            found += report_not_ready(setup, found)
    written = False
    if not found:
        found = write_marker(setup, start)  # the report exists on disk and parses
        written = not found
        if found:
            found += report_not_ready(setup, found)
    return render_bundle(setup, found, ahead if written else None, written, may_sign)


def publish(setup: Setup, junit_file: str | None) -> Blocker | None:
    """The JUnit report into the report directory, safely (reports.py)."""
    if junit_file is None or not setup.report_path:
        return Blocker(("SUITE-2",), "no JUnit report was written")
    try:
        reports.publish(junit_file, setup.report_path)
    except (reports.ReportError, OSError) as e:
        return Blocker(("SUITE-2",), f"the JUnit report was not published: {e}")
    finally:
        reports.discard(setup.report_private_dir)
    return None


def build(setup: Setup, found: list[Blocker], ready: bool) -> bundle.Bundle:
    data = hostfs.read_file(setup.report_path, reports.LIMIT)
    return bundle.build(data, setup.report_path, setup.sections, ready=ready,
                        extra_blockers=[b.said() for b in found])


def sign_ahead(setup: Setup) -> tuple[bundle.Bundle | None, list[Blocker]]:
    """With --sign-key, on a run with no blocker: the bundle the marker
    would make true (result PASSED), its Statement signed now, before the
    marker is written, so that a signing failure blocks it (SUITE-2)."""
    try:
        made = build(setup, [], ready=True)
        made.envelope = signing.sign(cast(signing.Signer, setup.signer), made.statement)  # finish() checked
    except signing.SignError as e:
        return None, [Blocker(e.requirements, f"the in-toto Statement was not signed: {e}")]
    except (OSError, reports.ReportError, verdict.VerdictError) as e:
        return None, [Blocker(("SUITE-2",), f"the in-toto Statement was not signed: {e}")]
    return made, []


def sign_after(setup: Setup, made: bundle.Bundle, may_sign: bool) -> list[Blocker]:
    """A run that is NOT READY: its FAILED Statement is signed too when the
    key and tool passed their checks; a failure adds a blocker."""
    if not may_sign or made.verdict.ready:
        return []
    try:
        made.envelope = signing.sign(cast(signing.Signer, setup.signer), made.statement)  # may_sign: one
    except signing.SignError as e:
        return [Blocker(e.requirements, f"the in-toto Statement was not signed: {e}")]
    return []


def expectation(inv: Inventory) -> marker.Expectation:
    return marker.Expectation(inv.revision, inv.source_manifest_sha256,
                              tuple(b.path for b in inv.binaries_list),
                              tuple(b.sha256 for b in inv.binaries_list))


def write_marker(setup: Setup, start: AtStart) -> list[Blocker]:
    """The marker, with the binaries' hashes read at session start, written
    and read back; what failed is removed again (MARK-1)."""
    inv = cast(Inventory, setup.inventory)  # no blocker: the preflight passed, it loaded
    records = [(start.hashes[b.path], b.path) for b in inv.binaries_list]
    content = marker.render(inv.revision, inv.source_manifest_sha256, records)
    try:
        marker.write(setup.marker, content)
        marker.verify(setup.marker, expectation(inv))
    except (OSError, marker.UnsafeChain, marker.MarkerRefused) as e:
        try:
            marker.remove(setup.marker)
        except (OSError, marker.UnsafeChain):
            pass
        return [Blocker(("MARK-1",), f"writing or re-reading the marker failed: {e}")]
    return []


def render_bundle(setup: Setup, found: list[Blocker], ahead: bundle.Bundle | None, written: bool,
                  may_sign: bool) -> Outcome:
    """The verdict bundle from the published report (bundle.py); `ahead`,
    signed before the marker, when the marker was written since. If it
    cannot be written, the marker just written is taken back: NOT READY."""
    matrix: tuple[str, ...] = ()
    try:
        made = ahead or build(setup, found, ready=written)
        if ahead is None:
            found = found + sign_after(setup, made, may_sign)
        matrix = tuple(verdict.terminal_lines(made.verdict, made.rows))
        files = tuple(bundle.write(setup.report_path, made))
    except (OSError, reports.ReportError, verdict.VerdictError) as e:
        found = found + [Blocker(("SUITE-2",), "the verdict bundle (HTML, in-toto Statement) was "
                                 f"not written: {e}")]
        if written:
            written = False
            found += take_back(setup)
            found += report_not_ready(setup, found)
        return Outcome(tuple(found), published=True, written=written, matrix=matrix, bundle_files=())
    return Outcome(tuple(found), published=True, written=written, matrix=matrix, bundle_files=files)


def take_back(setup: Setup) -> list[Blocker]:
    try:
        marker.remove(setup.marker)
    except (OSError, marker.UnsafeChain) as gone:
        return [Blocker(("MARK-4",), f"the marker could not be taken back: {gone}")]
    return []


def report_not_ready(setup: Setup, found: list[Blocker]) -> list[Blocker]:
    """The published report, which said READY, rewritten NOT READY with
    `found`; a failure to rewrite it is one more blocker."""
    try:
        reports.mark_not_ready(setup.report_path, [b.said() for b in found])
    except (reports.ReportError, OSError) as e:
        return [Blocker(("SUITE-2",), f"{setup.report_path} still says READY: {e}")]
    return []
