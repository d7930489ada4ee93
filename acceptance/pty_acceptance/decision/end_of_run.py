"""The gate's end, one straight sequence of effects (MARK-1, MARK-4, SUITE-2, SUITE-5).

After pytest's JUnit writer has written its report into a private directory:

1. publish: the report, its verdict set NOT READY (reports.settle: the
   decision's blockers, or with none the one blocker PENDING, the marker not
   written yet; a failing `verdict` test case; the suite named after the
   host), into the report directory, read back and parsed (reports.py);
   unpublished, nothing follows: no marker, no bundle;
2. with no blocker, the READY form of the same report made (its bytes, not
   yet written) and the verdict bundle rendered from it (HTML, in-toto
   Statement; bundle.py); with --sign-key the Statement signed now, before
   the marker, so that a signing failure blocks;
3. write the marker, then 4. read it back (readiness_marker.verify);
5. the READY bundle written beside the report, then the report replaced
   by its READY form and read back.

Nothing on disk says READY before step 4 has passed. SIGINT and SIGTERM are
held for the whole end (interrupts.Held, around the decision too): a signal
noted before or after any step is a SUITE-5 blocker. A step that fails, an
interrupt, or an error of the suite's own in any step (an exception it did
not expect: a SUITE-2 blocker, never a run without a report) ends the
sequence, and `not_ready` takes back what it wrote (the READY files, the
marker), replaces the report by its NOT READY form with every blocker and
writes the NOT READY bundle beside it (its FAILED Statement signed when the
key and tool passed their checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Callable, cast

from pty_acceptance.decision import readiness_marker
from pty_acceptance.decision.run_records import AtStart, Setup
from pty_acceptance.decision.interrupts import Held
from pty_acceptance.decision.rules import Blocker, Decision, internal_error
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
    interrupted: str | None = None  # NOT READY: the signals noted during the end (interrupts.Held)


def finish(setup: Setup, start: AtStart, decision: Decision, junit_file: str | None, held: Held) -> Outcome:
    """The sequence; `junit_file`: what pytest's JUnit writer wrote (None:
    it is off); `held`: the signals noted since the end began."""
    return End(setup, start, decision, held).run(junit_file)


def host_name(setup: Setup) -> str:
    """What the report's suite is named after: the inventory's host."""
    return setup.inventory.host if setup.inventory is not None else setup.hostname


class End:
    """The sequence and what it has written so far (what `not_ready` takes back)."""

    def __init__(self, setup: Setup, start: AtStart, decision: Decision, held: Held):
        self.setup, self.start, self.held = setup, start, held
        self.found: list[Blocker] = list(decision.blockers)
        self.may_sign = setup.signer is not None and not decision.sign_refused
        self.noted = 0  # signals already said as a blocker
        self.said: list[str] = []  # the blockers the published report says
        self.ready: bytes | None = None  # the READY report's bytes (step 2)
        self.made: bundle.Bundle | None = None  # its bundle
        self.marker_tried = False
        self.marker_written = False
        self.ready_files: list[str] = []  # READY bundle files on disk
        self.flipped = False  # the report on disk is the READY one

    # -- the sequence
    def run(self, junit_file: str | None) -> Outcome:
        self.interrupted("before the end's sequence (while the run was decided)")
        unpublished = self.publish(junit_file)
        if unpublished is not None:
            return Outcome(tuple(self.found + [unpublished]), published=False, written=False,
                           matrix=(NO_MATRIX,), bundle_files=(), interrupted=self.held.said())
        for during, step in (("making the READY verdict bundle", self.make_ready),
                             ("writing the marker", self.write_marker),
                             ("reading the marker back", self.verify_marker),
                             ("writing the READY verdict bundle and report", self.write_ready)):
            if self.found or not self.step(during, step):
                return self.not_ready()
        made = cast(bundle.Bundle, self.made)  # write_ready passed: made
        # READY: no signal was noted up to the last look, after the last step
        return Outcome((), published=True, written=True,
                       matrix=tuple(verdict.terminal_lines(made.verdict, made.rows)),
                       bundle_files=tuple(self.ready_files))

    def step(self, during: str, do: Callable[[], list[Blocker]]) -> bool:
        """One step; False when it, or an interrupt, ends the sequence."""
        try:
            self.found += do()
        except Exception as e:  # noqa: BLE001  # the suite's own fault: a blocker, and the report is still written
            self.found.append(internal_error(during, e))
        self.interrupted(f"while {during}")
        return not self.found

    def interrupted(self, during: str) -> None:
        """A signal noted since the last look is a SUITE-5 blocker."""
        new = self.held.caught[self.noted:]
        if new:
            self.noted = len(self.held.caught)
            self.found.append(Blocker(("SUITE-5",), f"interrupted by {', '.join(dict.fromkeys(new))} "
                                      f"{during}: no marker stands, what the end wrote is taken back"))

    def publish(self, junit_file: str | None) -> Blocker | None:
        """Step 1: the report, NOT READY, into the report directory (reports.py)."""
        setup = self.setup
        if junit_file is None or not setup.report_path:
            return Blocker(("SUITE-2",), "no JUnit report was written")
        try:
            root = reports.load(junit_file)
            self.said = [b.said() for b in self.found]
            reports.publish(reports.render(reports.settle(root, self.said, None, host_name(setup))),
                            setup.report_path)
            if not self.found:  # the READY form, made now from the same tree, written only in step 5
                self.ready = reports.render(reports.settle(root, [], setup.marker))
        except (reports.ReportError, OSError) as e:
            return Blocker(("SUITE-2",), f"the JUnit report was not published: {e}")
        except Exception as e:  # noqa: BLE001  # the suite's own fault
            return internal_error("publishing the JUnit report", e)
        finally:
            reports.discard(setup.report_private_dir)
        self.interrupted("while the JUnit report was published")
        return None

    def make_ready(self) -> list[Blocker]:
        """Step 2: the READY bundle, from the READY report's bytes; with
        --sign-key its Statement signed now, so that a failure blocks."""
        try:
            made = bundle.build(cast(bytes, self.ready), self.setup.report_path, self.setup.sections, ready=True)
        except (reports.ReportError, verdict.VerdictError) as e:
            return [Blocker(("SUITE-2",), f"the verdict bundle (HTML, in-toto Statement) was not made: {e}")]
        if not made.verdict.ready:  # a report that does not read back READY is never published as READY
            return [Blocker(("SUITE-2",), "the READY report does not read back as READY: "
                            + "; ".join(made.verdict.blockers))]
        if self.setup.signer is not None:
            try:
                made.envelope = signing.sign(self.setup.signer, made.statement)
            except signing.SignError as e:
                self.may_sign = False  # a failure is not tried again after
                return [Blocker(e.requirements, f"the in-toto Statement was not signed: {e}")]
            except OSError as e:
                self.may_sign = False
                return [Blocker(("SUITE-2",), f"the in-toto Statement was not signed: {e}")]
        self.made = made
        return []

    def write_marker(self) -> list[Blocker]:
        """Step 3: the marker, with the binaries' hashes read at session start."""
        inv = cast(Inventory, self.setup.inventory)  # no blocker: the preflight passed, it loaded
        records = [(self.start.hashes[b.path], b.path) for b in inv.binaries_list]
        content = readiness_marker.render(inv.revision, inv.source_manifest_sha256, records)
        self.marker_tried = True
        try:
            readiness_marker.write(self.setup.marker, content)
        except (OSError, readiness_marker.UnsafeChain) as e:
            return [Blocker(("MARK-1",), f"writing or re-reading the marker failed: {e}")]
        self.marker_written = True
        return []

    def verify_marker(self) -> list[Blocker]:
        """Step 4: the marker read back as a verifier reads it (MARK-1)."""
        try:
            readiness_marker.verify(self.setup.marker, expectation(cast(Inventory, self.setup.inventory)))
        except (OSError, readiness_marker.UnsafeChain, readiness_marker.MarkerRefused) as e:
            return [Blocker(("MARK-1",), f"writing or re-reading the marker failed: {e}")]
        return []

    def write_ready(self) -> list[Blocker]:
        """Step 5: the READY bundle beside the report, then the report's READY form."""
        made = cast(bundle.Bundle, self.made)
        try:
            self.ready_files = bundle.write(self.setup.report_path, made)
        except OSError as e:
            return [Blocker(("SUITE-2",), f"the verdict bundle (HTML, in-toto Statement) was not written: {e}")]
        try:
            self.flipped = True  # from here the report on disk may be the READY one
            reports.replace(self.setup.report_path, cast(bytes, self.ready))
        except (reports.ReportError, OSError) as e:
            return [Blocker(("SUITE-2",), f"the JUnit report was not replaced by its READY form: {e}")]
        return []

    # -- the end of a run that is NOT READY
    def not_ready(self) -> Outcome:
        """What the sequence wrote taken back, the report replaced by its
        NOT READY form and the NOT READY bundle written beside it. Each part
        runs whatever the one before it did; each failure is one more blocker."""
        for during, part in (("taking back the READY verdict bundle", self.take_back_files),
                             ("taking back the marker", self.take_back_marker),
                             ("replacing the JUnit report by its NOT READY form", self.report_not_ready)):
            try:
                self.found += part()
            except Exception as e:  # noqa: BLE001  # the suite's own fault
                self.found.append(internal_error(during, e))
        matrix: tuple[str, ...] = ()
        files: tuple[str, ...] = ()
        try:
            made = self.build_not_ready()
            self.found += self.sign_after(made)
            matrix = tuple(verdict.terminal_lines(made.verdict, made.rows))
            files = tuple(bundle.write(self.setup.report_path, made))
        except (OSError, reports.ReportError, verdict.VerdictError) as e:
            self.found.append(Blocker(("SUITE-2",), "the verdict bundle (HTML, in-toto Statement) was "
                                      f"not written: {e}"))
        except Exception as e:  # noqa: BLE001  # the suite's own fault
            self.found.append(internal_error("writing the NOT READY verdict bundle", e))
        return Outcome(tuple(self.found), published=True, written=False, matrix=matrix, bundle_files=files,
                       interrupted=self.held.said())

    def take_back_files(self) -> list[Blocker]:
        if not self.ready_files:
            return []
        out = []
        dfd = hostfs.open_dir(str(PurePosixPath(self.setup.report_path).parent))
        try:
            for path in self.ready_files:
                try:
                    os.unlink(PurePosixPath(path).name, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    out.append(Blocker(("SUITE-2",), f"{path} says READY and could not be removed: {e}"))
        finally:
            os.close(dfd)
        self.ready_files = []
        return out

    def take_back_marker(self) -> list[Blocker]:
        if not self.marker_tried:
            return []
        try:
            readiness_marker.remove(self.setup.marker)
        except (OSError, readiness_marker.UnsafeChain) as e:
            if self.marker_written:
                return [Blocker(("MARK-4",), f"the marker could not be taken back: {e}")]
        self.marker_written = False
        return []

    def report_not_ready(self) -> list[Blocker]:
        """The published report replaced by its NOT READY form with every
        blocker, unless it says exactly that already."""
        said = [b.said() for b in self.found]
        if said == self.said and not self.flipped:
            return []
        try:
            reports.mark_not_ready(self.setup.report_path, said)
        except (reports.ReportError, OSError) as e:
            return [Blocker(("SUITE-2",), f"{self.setup.report_path} may not say NOT READY: {e}")]
        self.said, self.flipped = said, False
        return []

    def build_not_ready(self) -> bundle.Bundle:
        """The NOT READY bundle from the report on disk; a blocker it does not
        hold (it could not be rewritten) is added."""
        data = hostfs.read_file(self.setup.report_path, reports.LIMIT)
        return bundle.build(data, self.setup.report_path, self.setup.sections, ready=False,
                            extra_blockers=[b.said() for b in self.found])

    def sign_after(self, made: bundle.Bundle) -> list[Blocker]:
        """A run that is NOT READY: its FAILED Statement is signed too when
        the key and tool passed their checks; a failure adds a blocker."""
        if not self.may_sign:
            return []
        try:
            made.envelope = signing.sign(cast(signing.Signer, self.setup.signer), made.statement)  # may_sign: one
        except signing.SignError as e:
            return [Blocker(e.requirements, f"the in-toto Statement was not signed: {e}")]
        return []


def expectation(inv: Inventory) -> readiness_marker.Expectation:
    return readiness_marker.Expectation(inv.revision, inv.source_manifest_sha256,
                              tuple(b.path for b in inv.binaries_list),
                              tuple(b.sha256 for b in inv.binaries_list))


def failed(setup: Setup, decision: Decision, e: Exception) -> Outcome:
    """The end's own guard failed (an error `End` did not catch): no marker
    may stand, and the report, if it was published, is made to say NOT READY."""
    found = list(decision.blockers) + [internal_error("ending the run", e)]
    try:
        readiness_marker.remove(setup.marker)
    except (OSError, readiness_marker.UnsafeChain) as gone:
        found.append(Blocker(("MARK-4",), f"the marker could not be taken back: {gone}"))
    published = False
    if setup.report_path:
        try:
            reports.mark_not_ready(setup.report_path, [b.said() for b in found])
            published = True
        except (reports.ReportError, OSError):
            pass
    return Outcome(tuple(found), published=published, written=False, matrix=(NO_MATRIX,), bundle_files=())
