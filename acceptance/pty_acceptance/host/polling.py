"""Polling against a deadline: how the suite waits for what the host will do
(CONC-2, CONC-3, CGROUP-1, ORPHAN-1: a unit gone, a supervisor ready, a
process seen), never by a fixed sleep. A wait that runs out raises
TimeoutError naming what was awaited and the state at the deadline."""
from __future__ import annotations

import time

POLL_S = 0.02


def poll(predicate, deadline_s: float, what: str, state=lambda: ""):
    """Call predicate() until it returns something true; TimeoutError names `what`
    and state() at the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not reached within {deadline_s:g} s; {state()}")
        time.sleep(POLL_S)  # poll interval
