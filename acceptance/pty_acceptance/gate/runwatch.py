"""SUITE-5 in the gate: the whole run bounded in time, and the suite's own
processes watched for a stop from outside.

- The bound (`run_bound_s` of the inventory, from session start to the
  decision): past it SIGALRM interrupts the run where it is, as SIGINT
  would (KeyboardInterrupt: fixtures torn down, every unit of the suite's
  stopped), and the bound is a blocker naming the test that was in
  progress. Every wait of the suite has a bound of its own; this one bounds
  their sum, whatever a hostile host makes of them.
- The stop guard (host/stopguard.py): a process of the suite's own stopped
  from outside is continued and named; from then on no further test runs
  (each is reported not run, naming the stop), since every later wait could
  meet the same stop and last its whole bound.

Both start at session start (when the inventory loaded) and end when the
verdict is decided, before the end's writes (the alarm never fires there).
"""

from __future__ import annotations

import signal
from types import FrameType

from pty_acceptance.host import stopguard, terminal
from pty_acceptance.spec.inventory import Inventory

NOT_RUN_CAUSE = "SUITE-5: the run was ended at the first stop from outside (above)"


class RunWatch:
    """Made by the gate at session start."""

    def __init__(self, inv: Inventory):
        self.bound_s = inv.run_bound_s
        self.guard = stopguard.Guard(inv.units.supervisor, connect=stopguard.connect)
        self.bound: str | None = None  # the bound was reached: where, in words
        self._before: object = None
        self._armed = False

    def start(self) -> None:
        self.guard.start()
        self._before = signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, float(self.bound_s))
        self._armed = True

    def _expired(self, signum: int, frame: FrameType | None) -> None:
        during = self.guard.during or "the time between tests"
        self.bound = terminal.escape(f"the run did not end within its bound of {self.bound_s} s "
                                     f"(run_bound_s): it was in {during}, and was ended there")
        raise KeyboardInterrupt(self.bound)

    def entering(self, nodeid: str) -> str | None:
        """A test is about to run: why it must not (None: run it)."""
        self.guard.during = nodeid
        return NOT_RUN_CAUSE if self.guard.tripped is not None else None

    def left(self) -> None:
        self.guard.during = ""

    def end(self) -> tuple[tuple[str, ...], str | None, str | None]:
        """Disarm and stop watching: (stops, why unwatched, the bound reached)."""
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            before = self._before if self._before is not None else signal.SIG_DFL
            signal.signal(signal.SIGALRM, before)  # type: ignore[arg-type]  # getsignal's own values
            self._armed = False
        self.guard.halt()
        return tuple(self.guard.said()), self.guard.broken, self.bound
