"""CONC-3: stops, bounded from both sides.

Issue 29 item 10: an administrator's drop-in TimeoutStopSec=infinity on the
session units held FLOOD-4's saturated STOP for 15 minutes: the suite waited
as long as the unit's own TimeoutStopSec said. Now every wait on a stop is
the suite's own (the inventory's session_stop, capped at 30 s), and the
host's value is judged: below the grace or above the bound fails CONC-3.

"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pty_acceptance.host import cgroups, processes
from pty_acceptance.spec import inventory
from pty_acceptance.supervisor import sessionunit, stopbounds
from pty_acceptance.supervisor.footprint import Footprint, bounded_stop_problem
from pty_acceptance.supervisor.gone import wait_gone
from pty_acceptance.supervisor.stopbounds import StopBounds

REPO = Path(__file__).resolve().parents[1]
STRICT = "opencode-pty-0123456789abcdef0123456789abcdef.service"
INFINITY = 2 ** 64 - 1


class StuckBus:
    """systemd with one session unit that stays in `deactivating stop-sigterm`."""

    def __init__(self, timeout_stop_usec: int):
        self.usec = timeout_stop_usec

    def properties(self, name, iface=None):
        if name != STRICT:
            return None
        return {"BindsTo": ["opencode-pty-supervisor.service"], "Slice": "opencode-pty.slice",
                "ActiveState": "deactivating", "SubState": "stop-sigterm", "MainPID": 4242,
                "ControlGroup": f"/opencode.slice/opencode-pty.slice/{STRICT}",
                "TimeoutStopUSec": self.usec}


@pytest.fixture
def no_host(monkeypatch):
    monkeypatch.setattr(cgroups, "cgroup_dir", lambda cg: "/nonexistent" + cg)
    monkeypatch.setattr(processes, "processes_in", lambda path: {})
    monkeypatch.setattr(processes, "token_processes", lambda token: {})


def test_an_infinite_host_stop_timeout_never_sets_the_wait(no_host):
    """Before: stop_bound_s() was the unit's TimeoutStopSec + 4 s (about 1.8e13 s)."""
    inv = inventory.load(REPO / "inventories/reference.yml")
    fp = Footprint.capture(StuckBus(INFINITY), STRICT, "123456789012", sessionunit.Owner.of(inv))
    assert fp.stop_bound_s() <= stopbounds.STOP_BOUND_MAX_S + 4
    assert fp.stop_bound_s() == inv.session_stop.timeout_s + stopbounds.SCRIPT_GRACE_S + stopbounds.STOP_SLACK_S
    problem = bounded_stop_problem(fp)
    assert problem is not None and f"{STRICT} has TimeoutStopSec=infinity" in problem


def test_a_stuck_stop_ends_at_the_suites_bound_naming_the_unit_still_stopping(no_host, monkeypatch):
    monkeypatch.setattr(stopbounds, "SCRIPT_GRACE_S", 0.0)
    monkeypatch.setattr(stopbounds, "STOP_SLACK_S", 0.1)
    owner = sessionunit.Owner("opencode-pty-supervisor.service", "opencode-pty.slice",
                              StopBounds(term_grace_s=0.1, timeout_s=0.2))
    bus = StuckBus(INFINITY)
    fp = Footprint.capture(bus, STRICT, "123456789012", owner)
    t0 = time.monotonic()
    _, left = wait_gone(bus, [fp], fp.stop_bound_s())
    assert time.monotonic() - t0 < 2
    assert "ActiveState=deactivating SubState=stop-sigterm" in left[STRICT][0]


@pytest.mark.parametrize("usec, ok", [(5_000_000, True), (3_000_000, True), (5_000, False),
                                      (0, False), (6_000_000, False), (INFINITY, False)])
def test_the_hosts_stop_timeout_is_judged_from_both_sides(usec, ok):
    bounds = StopBounds.of(inventory.SessionStop(term_grace_s=3, timeout_s=5))
    assert (bounds.timeout_problem(STRICT, usec) is None) == ok


def test_the_inventorys_stop_timeout_is_capped_by_the_suite():
    assert StopBounds.of(inventory.SessionStop(timeout_s=3600)).timeout_s == stopbounds.STOP_BOUND_MAX_S
