"""SIGINT and SIGTERM held for the gate's end (SUITE-2, SUITE-5).

The end writes: the JUnit report, the marker, the verdict bundle
(end_of_run.py). An interrupt raised as KeyboardInterrupt in the middle of it
would leave what was written so far, a marker without its bundle or a
report that no longer tells the truth. So from the decision to the recorded
outcome the two signals are only noted: a handler that records the signal
stands in for the run's own (startup.py's SIGTERM, Python's SIGINT), and
the end asks `Held.caught` before and after each step: an interrupt takes
back what the end wrote and the run ends NOT READY, its report saying so.

Python runs signal handlers in the main thread only, so a signal the kernel
delivers to a worker thread (one a test left running) is noted as well;
blocking the signals with pthread_sigmask in the main thread alone would not
hold such a one. A signal that is ignored (SIGINT in a background job) stays
ignored. Every step of the end is bounded (bounded reads, the signing tool's
and the bus's timeouts), so holding delays an interrupt, never loses it.
After the end the run's own handlers are back; a noted signal is not sent
again: the run is over, and its exit status says it was interrupted.
"""

from __future__ import annotations

import signal
from types import FrameType

HELD = (signal.SIGINT, signal.SIGTERM)


class Held:
    """`with Held() as held:` the two signals noted in `held.caught`."""

    def __init__(self) -> None:
        self.caught: list[str] = []
        self._before: dict[signal.Signals, object] = {}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.caught.append(signal.Signals(signum).name)

    def __enter__(self) -> Held:
        for sig in HELD:
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue  # ignored it was, ignored it stays
            self._before[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, before in self._before.items():
            # None: the handler was not set from Python; the default is the closest
            signal.signal(sig, before if before is not None else signal.SIG_DFL)  # type: ignore[arg-type]  # getsignal's own values
        self._before.clear()

    def said(self) -> str | None:
        """The signals noted so far, in words (None: none)."""
        return ", ".join(dict.fromkeys(self.caught)) or None
