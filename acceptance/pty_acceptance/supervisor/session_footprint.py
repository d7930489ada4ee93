"""What a live session leaves on the host, taken while it lives (CONC-2,
CONC-3, CGROUP-1, ORPHAN-1; SUITE-4 for what may be signalled).

A session leaves a Footprint: the unit name, the ControlGroup systemd
reports, the cgroup directory that holds it on this host (unified hierarchy
or systemd's named one), the processes in it (pid and create_time, so a
reused pid is never taken for a survivor) and a token that the suite put in
the session's argv, so that descendants are found even if they were never
seen in the cgroup. A footprint is gone when the unit is no longer loaded,
the directory no longer exists and no recorded or tagged process is alive.
The token only finds and reports: any process of the service user may carry
it. What is left is signalled only when it is, at that moment, inside the
cgroup of a unit the suite owns (a vouched session unit, or one of its own
disposable units): cgroupkill.kill_inside. A stop is waited for only as
long as the suite's own bounds allow (stopbounds: the inventory's, capped),
never by the TimeoutStopSec the unit reports: that value is judged (CONC-3).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import cgroups, proc, processes, terminal
from pty_acceptance.host.bus import SERVICE_IFACE, Systemd
from pty_acceptance.host.cgroupkill import kill_inside
from pty_acceptance.supervisor.unit_vouch import NotLoaded, Owner, vouch
from pty_acceptance.supervisor.stopbounds import OWN_UNITS, StopBounds


class HostReadError(Unreadable):
    pass


@dataclass
class Footprint:
    unit: str
    token: str
    control_group: str = ""
    path: str = ""            # the cgroup directory on this host
    timeout_stop_usec: int = 0  # as the unit reports it: judged, never waited on
    main_pid: int = 0
    bounds: StopBounds = OWN_UNITS  # what its stop may take: the suite's own
    procs: dict[int, tuple[float, str]] = field(default_factory=dict)

    @classmethod
    def capture(cls, bus: Systemd, unit: str, token: str, owner: Owner | None) -> "Footprint":
        """Read a live session's unit, cgroup and processes. Raises HostReadError.

        A footprint is what the suite may later stop and kill: a name from a
        reply is vouched for first (unit_vouch.vouch: NotOurs fails the test,
        SUITE-4). owner=None only for the suite's own disposable units (decoys),
        whose stop is bounded as the suite set it up."""
        if owner is not None:
            try:
                vouch(bus, unit, owner)
            except NotLoaded:
                raise HostReadError(f"{unit} is not loaded right after STARTED") from None
        props = bus.properties(unit, SERVICE_IFACE)
        if props is None:
            raise HostReadError(f"{unit} is not loaded right after STARTED")
        usec = props.get("TimeoutStopUSec")
        fp = cls(unit, token, control_group=props.get("ControlGroup") or "",
                 timeout_stop_usec=usec if isinstance(usec, int) else 0,
                 main_pid=props.get("MainPID") or 0,
                 bounds=owner.stop if owner is not None else OWN_UNITS)
        fp.path = cgroups.cgroup_dir(fp.control_group) or ""
        if not fp.path:
            raise HostReadError(f"{unit}: ControlGroup {fp.control_group!r} is under none of "
                                f"{cgroups.CGROUP_ROOTS}")
        fp.remember()
        return fp

    def remember(self) -> None:
        """Add what runs now (in the cgroup or tagged) to the processes to account for."""
        self.procs.update(processes.processes_in(self.path) if self.path else {})
        self.procs.update(processes.token_processes(self.token))

    def leftovers(self, bus: Systemd) -> list[str]:
        """What of the session is still there; [] when it is completely gone."""
        left = []
        props = bus.properties(self.unit)
        if props is not None:
            left.append(f"unit {self.unit} still loaded (ActiveState={props.get('ActiveState')} "
                        f"SubState={props.get('SubState')})")
        if self.path and os.path.isdir(self.path):
            left.append(f"cgroup {self.path} still exists with pids {cgroups.cgroup_pids(self.path)}")
        survivors = {pid: v for pid, v in self.procs.items() if proc.alive(pid, v[0])}
        survivors.update(processes.token_processes(self.token))
        if survivors:
            left.append("processes alive: " + "; ".join(f"pid {pid} {line!r}" for pid, (_, line)
                                                         in sorted(survivors.items())))
        return left

    def kill_survivors(self) -> list[str]:
        """SIGKILL what is left of the session: only processes inside its unit's
        cgroup at that moment (kill_inside: pid reuse guarded, and a process
        outside that carries the token is never hit). Returns the processes
        left alone, described (escaped)."""
        procs = dict(self.procs)
        procs.update(processes.processes_in(self.path) if self.path else {})
        procs.update(processes.token_processes(self.token))
        spared = []
        for pid, (created, line) in sorted(procs.items()):
            why = kill_inside(pid, created, self.control_group)
            if why:
                spared.append(terminal.escape(f"pid {pid} {line!r}: {why}: not signalled"))
        return spared

    @property
    def timeout_stop_s(self) -> float:
        """The unit's own TimeoutStopSec (evidence; infinity shows as about 1.8e13 s)."""
        return self.timeout_stop_usec / 1e6

    def describe(self) -> str:
        return (f"unit={self.unit} cgroup={self.path} TimeoutStopSec={self.timeout_stop_s:g} "
                f"processes={ {pid: line for pid, (_, line) in self.procs.items()} }")

    def stop_bound_s(self) -> float:
        """How long the suite waits for its stop: the suite's own bound (the
        inventory's most TimeoutStopSec, capped, then script(1)'s 2 s and slack),
        whatever TimeoutStopSec the unit reports."""
        return self.bounds.wait_s()


def bounded_stop_problem(fp: Footprint) -> str | None:
    """CONC-3: a session unit's own TimeoutStopSec lies within the inventory's
    bounds (TERM gets its grace, KILL follows in bounded time)."""
    return fp.bounds.timeout_problem(fp.unit, fp.timeout_stop_usec)
