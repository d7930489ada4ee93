"""CONC-3: stops, bounded from both sides.

Issue 29 item 10: an administrator's drop-in TimeoutStopSec=infinity on the
session units held FLOOD-4's saturated STOP for 15 minutes: the suite waited
as long as the unit's own TimeoutStopSec said. Now every wait on a stop is
the suite's own (the inventory's session_stop, capped at 30 s), and the
host's value is judged: below the grace or above the bound fails CONC-3.

Issue 30 item 2: a stop is TERM, then KILL. termgrace's command notes a
SIGTERM in its comm and ignores it; the suite measures from outside (pidfd
and comm) when it saw SIGTERM and when it was killed. Here a local process
runs that very command and this test plays the supervisor's part."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pty_acceptance.host import cgroups, processes, proc
from pty_acceptance.host.polling import poll
from pty_acceptance.spec import inventory
from pty_acceptance.supervisor import unit_vouch, stopbounds, termgrace
from pty_acceptance.supervisor.session_footprint import Footprint, bounded_stop_problem
from pty_acceptance.supervisor.session_gone import wait_gone
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
    fp = Footprint.capture(StuckBus(INFINITY), STRICT, "123456789012", unit_vouch.Owner.of(inv))
    assert fp.stop_bound_s() <= stopbounds.STOP_BOUND_MAX_S + 4
    assert fp.stop_bound_s() == inv.session_stop.timeout_s + stopbounds.SCRIPT_GRACE_S + stopbounds.STOP_SLACK_S
    problem = bounded_stop_problem(fp)
    assert problem is not None and f"{STRICT} has TimeoutStopSec=infinity" in problem


def test_a_stuck_stop_ends_at_the_suites_bound_naming_the_unit_still_stopping(no_host, monkeypatch):
    monkeypatch.setattr(stopbounds, "SCRIPT_GRACE_S", 0.0)
    monkeypatch.setattr(stopbounds, "STOP_SLACK_S", 0.1)
    owner = unit_vouch.Owner("opencode-pty-supervisor.service", "opencode-pty.slice",
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


# ------------------------------------------------------------------ TERM, then KILL
@pytest.fixture
def command():
    """termgrace's command, run here, held once its handlers are in place."""
    p = subprocess.Popen([sys.executable, "-I", "-c", termgrace.PROGRAM, "pty-acceptance-term-test"])

    def ready():
        st = proc.status(p.pid)
        return int(st["SigCgt"], 16) >> 14 & 1 and int(st["SigIgn"], 16) & 1

    try:
        poll(ready, 10, "the command's handlers")
        yield p, termgrace.Held(p.pid, proc.create_time(p.pid), proc.pidfd_open(p.pid), proc.comm(p.pid))
    finally:
        p.kill()
        p.wait()


def _after(seconds: float, fn) -> None:
    threading.Timer(seconds, fn).start()


def test_sigterm_then_kill_is_seen_from_outside(command):
    p, held = command
    t0 = time.monotonic()
    p.send_signal(signal.SIGHUP)  # ignored: a PTY's hangup is no kill
    p.send_signal(signal.SIGTERM)
    _after(0.5, p.kill)
    seen = termgrace.watch(held, t0, 10)
    assert seen.term_s is not None and seen.term_s < 0.4 and seen.comm == termgrace.NOTICE
    assert seen.killed_s is not None and 0.5 <= seen.killed_s < 2
    assert seen.problems(StopBounds(term_grace_s=0.3, timeout_s=5)) == []
    (short,) = seen.problems(StopBounds(term_grace_s=2, timeout_s=5))
    assert "less than session_stop.term_grace_s = 2 s" in short
    assert held.pidfd == -1  # watch closes it


def test_a_kill_without_sigterm_is_named(command):
    p, held = command
    t0 = time.monotonic()
    p.kill()
    seen = termgrace.watch(held, t0, 10)
    (problem,) = seen.problems(StopBounds(term_grace_s=1, timeout_s=5))
    assert "without having noted a SIGTERM" in problem and "'python" in problem


def test_a_command_still_alive_at_the_bound_is_named(command):
    p, held = command
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    seen = termgrace.watch(held, t0, 0.5)
    assert seen.killed_s is None and time.monotonic() - t0 < 2
    (problem,) = seen.problems(StopBounds(term_grace_s=1, timeout_s=5))
    assert "still alive 0.5 s after" in problem and "seen at" in problem
    assert os.waitpid(p.pid, os.WNOHANG) == (0, 0)
