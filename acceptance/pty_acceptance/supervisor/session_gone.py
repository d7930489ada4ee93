"""Waiting until sessions are gone, and removing units left behind (CONC-2,
CONC-3, CGROUP-1, ORPHAN-1): a footprint is gone when its unit is no longer
loaded, its cgroup directory no longer exists and none of its processes is
alive; how long that took is measured against the stop's bound. A unit still
there at the end of a test is stopped (StopUnit, then ResetFailed), side by
side."""
from __future__ import annotations

import time

from pty_acceptance.host.bus import BusError, Systemd
from pty_acceptance.host.polling import POLL_S
from pty_acceptance.supervisor.session_footprint import Footprint


def wait_gone(bus: Systemd, footprints: list[Footprint], deadline_s: float,
              since: float | None = None) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Poll until every footprint is gone or the deadline passes.
    Returns (unit -> seconds from `since` until gone, unit -> what was left at the deadline)."""
    start = time.monotonic() if since is None else since
    end = time.monotonic() + deadline_s
    pending = {fp.unit: fp for fp in footprints}
    took: dict[str, float] = {}
    last: dict[str, list[str]] = {}
    while pending:
        for unit, fp in list(pending.items()):
            left = fp.leftovers(bus)
            if not left:
                took[unit] = time.monotonic() - start
                del pending[unit]
                last.pop(unit, None)
            else:
                last[unit] = left
        if not pending or time.monotonic() > end:
            break
        time.sleep(POLL_S)  # poll interval, not a wait for an outcome
    return took, last


def force_stop(bus: Systemd, units: list[str]) -> None:
    """Remove units the supervisor (or a failed test) left behind, side by side."""
    stopping = []
    for unit in units:
        try:
            if bus.unit_path(unit) is not None:
                bus.stop(unit)
                stopping.append(unit)
        except BusError:
            pass
    for unit in stopping:
        try:
            bus.wait_for(unit, lambda pr: pr is None or pr.get("ActiveState") in
                         ("inactive", "failed"), 15, "stopped")
            bus.reset_failed(unit)
        except (BusError, TimeoutError):
            pass
