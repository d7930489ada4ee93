"""Several sessions ended several ways, side by side (CONC-2: every way a
session ends leaves a clean state; CONC-3: a bounded stop; CGROUP-1: the
whole cgroup removed, escaped descendants included).

An Ending is one session ended one way, driven in a daemon thread of its own
with its own bus connection: its drive(ending) causes the end, then the
unit, cgroup and processes must be gone within the stop's bound, counted
from that moment. run_endings starts them all, drives them side by side and
returns the problems, each naming its case and unit; an interrupt is never
held up by the threads (SUITE-5).

An end the suite asks of the supervisor (a STOP frame, a disconnect: the
drive is marked `asks_stop`) is the supervisor's StopUnit (CONC-3): systemd
must have queued a job for the unit after the sessions were STARTED
(unitwatch.JobWatch). Without one, the unit ended because its processes
did: the service user, whose processes they are, can end them the way a
stop would (a blind red team's ninth pass played the stop itself, SIGTERM,
a grace, SIGKILL, when the supervisor left the unit running on a
disconnect), and what the suite watched was not the supervisor's stop.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from pty_acceptance.host.bus import Systemd
from pty_acceptance.host.unitwatch import JobWatch
from pty_acceptance.supervisor.session_footprint import Footprint, HostReadError, bounded_stop_problem
from pty_acceptance.supervisor.session_gone import wait_gone
from pty_acceptance.supervisor.session_clients import RawSession
from pty_acceptance.supervisor.session_stream import Drain
from pty_acceptance.supervisor.tracked_sessions import Sessions
from pty_acceptance.supervisor.unit_vouch import NotOurs
from pty_acceptance.supervisor.tokens import new_token, tagged_sh

ENDINGS_DEADLINE_S = 120.0  # run_endings: every case driven side by side ends within this
JOIN_SLICE_S = 0.1  # run_endings: how late an interrupt that lands mid-join may be acted on


def asks_stop(drive: Callable) -> Callable:
    """Marks a drive whose end is asked of the supervisor (a STOP frame, a
    disconnect): a stop job for the unit must follow (run_endings)."""
    drive.asks_stop = True  # type: ignore[attr-defined]
    return drive


@dataclass
class Ending:
    """One session ended one way, driven in a thread of its own with its own bus
    connection. drive(ending) causes the end (calling caused() at that moment) and
    checks the stream; expect_gone() then holds it to its bound."""

    name: str
    script: str               # sh script; {t} is replaced by the session's token
    drive: Callable[[Ending], object]
    runtime_s: int = 60
    token: str = field(default_factory=new_token)
    s: RawSession | None = None
    fp: Footprint | None = None
    bus: Systemd | None = None
    t0: float | None = None   # when the suite caused the end
    checked: bool = False
    facts: list = field(default_factory=list)
    problems: list = field(default_factory=list)

    def caused(self) -> None:
        self.t0 = time.monotonic()

    @property
    def asks_stop(self) -> bool:
        return bool(getattr(self.drive, "asks_stop", False))

    def expect_gone(self, bound_s: float | None = None) -> None:
        """Unit, cgroup and processes gone within the bound, counted from caused()."""
        self.checked = True
        fp, bus = cast(Footprint, self.fp), cast(Systemd, self.bus)  # run_endings and run() set them
        bound = bound_s or fp.stop_bound_s()
        since = self.t0 if self.t0 is not None else time.monotonic()
        took, left = wait_gone(bus, [fp], max(0.1, bound - (time.monotonic() - since)),
                               since=since)
        if left:
            self.problems.append(f"expected the unit, its cgroup and its processes gone within "
                                 f"{bound:.1f} s, the host still had: {left[fp.unit]}")
        else:
            self.facts.append(f"gone {took[fp.unit]:.2f} s after the end was caused "
                              f"(bound {bound:.1f} s)")

    def stream_end(self, drain: Drain | None = None, deadline_s: float = 15):
        out = (drain or Drain(cast(RawSession, self.s))).to_end(deadline_s)  # run_endings started it
        self.facts.append(f"stream: exit={out.exit} error={out.error} closed={out.closed}")
        return out

    def want_exit(self, out) -> None:
        if out.exit is None:
            self.problems.append(f"expected an EXIT frame, the stream ended with {out.describe()}")

    def run(self) -> None:
        self.bus = Systemd.connect()
        try:
            self.drive(self)
            if not self.checked:
                self.expect_gone()
        except NotOurs:  # a refusal fails the test under SUITE-4, not as one case's problem
            raise
        except Exception as ex:  # every failure of a case is reported with the others
            self.problems.append(f"{type(ex).__name__}: {ex}")
        finally:
            self.bus.close()


def run_endings(sessions: Sessions, endings: list[Ending], evidence, prepare=None) -> list[str]:
    """Start every ending's session (here: the agent serves one request at a time),
    optionally prepare(ending) once it is STARTED, then drive all side by side.
    Returns the problems, each naming its case and unit (CONC-3's bounded stop included)."""
    for e in endings:
        e.s = sessions.start(tagged_sh(e.script.format(t=e.token), e.token), e.runtime_s)
    for e in endings:
        e.fp = sessions.started(cast(RawSession, e.s), e.token)  # started just above
        if problem := bounded_stop_problem(e.fp):
            e.problems.append(f"CONC-3: {problem}")
        if prepare is not None:
            try:
                prepare(e)
            except (TimeoutError, HostReadError) as ex:
                e.problems.append(str(ex))
    with contextlib.ExitStack() as stack:
        jobs = stack.enter_context(JobWatch()) if any(e.asks_stop for e in endings) else None
        _drive_side_by_side(endings)
        if jobs is not None:
            stopped = jobs.jobs_for()
            for e in endings:
                if not e.asks_stop or e.t0 is None:
                    continue
                if cast(Footprint, e.fp).unit in stopped:
                    e.facts.append("systemd queued a job for the unit after the end was asked (a stop)")
                else:  # first: what else went wrong with this ending follows from it
                    e.problems.insert(0, "CONC-3: systemd queued no job for the unit after the end was asked of "
                                      "the supervisor: no StopUnit ended it (whatever ended its processes, "
                                      "their end was not the supervisor's stop)")
    problems = []
    for e in endings:
        fp = cast(Footprint, e.fp)  # every ending's session STARTED above
        evidence(e.name, f"{fp.describe()}; " + "; ".join(e.facts))
        problems += [f"{e.name} ({fp.unit}): {x}" for x in e.problems]
    return problems


def _drive_side_by_side(endings: list[Ending]) -> None:
    # Daemon threads, joined against one deadline: an interrupt (SIGINT, SIGTERM)
    # unwinds the main thread at once and the process never waits for them (SUITE-5).
    # Joined in short slices: a signal landing between CPython's pending-signal
    # check and a lock wait does not cut that wait short, and is acted on only
    # when it returns (one long join could hold an interrupted run up to the deadline).
    threads = [threading.Thread(target=e.run, name=e.name, daemon=True) for e in endings]
    for t in threads:
        t.start()
    end = time.monotonic() + ENDINGS_DEADLINE_S
    for t in threads:
        while t.is_alive() and time.monotonic() < end:
            t.join(min(JOIN_SLICE_S, max(0.0, end - time.monotonic())))
    for e, t in zip(endings, threads, strict=False):
        if t.is_alive():
            e.problems.append(f"still being driven {ENDINGS_DEADLINE_S:g} s after the cases began")
