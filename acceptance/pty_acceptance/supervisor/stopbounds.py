"""What a session's stop may take: the suite's own bounds (CONC-3, CGROUP-1).

TARGET-CONTRACT section 1: a session unit has TimeoutStopSec= a few seconds,
and a stop is TERM, then KILL. The inventory states the least grace a
stopped command gets between SIGTERM and SIGKILL and the most TimeoutStopSec
a session unit may have (`session_stop:`); the suite caps the latter at
STOP_BOUND_MAX_S. Every wait on a stop is derived from these bounds, never
from a value read from the host: an administrator's drop-in giving the
session units TimeoutStopSec=infinity then fails CONC-3 at the suite's
bound, naming the unit still stopping, instead of holding the run.
"""
from __future__ import annotations

from dataclasses import dataclass

from pty_acceptance.spec.inventory import SessionStop

SCRIPT_GRACE_S = 2.0     # script(1) sleeps 2 s after a SIGTERM before it SIGKILLs its child
STOP_SLACK_S = 2.0       # scheduling: sessions are stopped side by side on a small host
STOP_BOUND_MAX_S = 30.0  # the suite's cap on any stop timeout: "a few seconds"
USEC_INFINITY = 2 ** 64 - 1  # systemd's "infinity" in a *USec property


@dataclass(frozen=True)
class StopBounds:
    """The least grace a stopped command gets (term_grace_s) and the most
    TimeoutStopSec a session unit may have (timeout_s, already capped)."""
    term_grace_s: float
    timeout_s: float

    @classmethod
    def of(cls, section: SessionStop) -> "StopBounds":
        """The inventory's `session_stop:`, its timeout capped at STOP_BOUND_MAX_S."""
        return cls(float(section.term_grace_s), min(float(section.timeout_s), STOP_BOUND_MAX_S))

    def wait_s(self) -> float:
        """How long the suite waits for a stopped session to be gone: the most
        TimeoutStopSec, then SIGKILL, plus script(1)'s 2 s (systemd's final
        SIGTERM starts after it) and scheduling slack."""
        return self.timeout_s + SCRIPT_GRACE_S + STOP_SLACK_S

    def timeout_problem(self, unit: str, timeout_stop_usec: int) -> str | None:
        """CONC-3: the unit's own TimeoutStopSec (as systemd reports it, in µs)
        lies within [term_grace_s, timeout_s]: TERM gets its grace, KILL follows
        in bounded time."""
        seconds = timeout_stop_usec / 1e6
        if self.term_grace_s <= seconds <= self.timeout_s:
            return None
        shown = "infinity" if timeout_stop_usec >= USEC_INFINITY else f"{seconds:g} s"
        return (f"{unit} has TimeoutStopSec={shown}: a stop gives SIGTERM at least "
                f"session_stop.term_grace_s = {self.term_grace_s:g} s and ends in SIGKILL within "
                f"session_stop.timeout_s = {self.timeout_s:g} s (the suite's cap: "
                f"{STOP_BOUND_MAX_S:g} s)")


# The inventory's defaults: what a session unit's stop may take where no inventory is at hand.
CONTRACT = StopBounds.of(SessionStop())
# The suite's own disposable units (decoys, peers, probes) set TimeoutStopUSec=5 s themselves.
OWN_UNITS = StopBounds(term_grace_s=0.0, timeout_s=5.0)
