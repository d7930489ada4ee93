"""Whether a process is a unit's own (CUT-1, CUT-2, RUNTIME-1, ISO-1).

A listener on a port says nothing of who started it: the service user can
kill the candidate's unit until systemd gives up restarting it and serve its
port with its own run of the same runtime, or answer on production's port
once production is stopped. So a listener is judged only when it is the
unit's own: the unit active, the process its MainPID or a process in its
cgroup (`/proc/<pid>/cgroup` against the ControlGroup systemd reports over
D-Bus), and the unit's InvocationID the same before and after that read and
the same as when this module's checks first read it (a unit restarted
between the checks is another run of it). The process is named by pid and
start time: one gone or replaced while it is read is not judged.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass

import psutil

from pty_acceptance.host import cgroups, proc
from pty_acceptance.host.bus import SERVICE_IFACE, UNIT_IFACE, Systemd


@dataclass(frozen=True)
class UnitState:
    """What systemd says of a unit at one read."""
    unit: str
    loaded: bool
    active: str          # ActiveState ("" when not loaded)
    sub: str             # SubState
    result: str          # Result (why a failed unit failed: start-limit-hit, ...)
    invocation: str      # InvocationID, hex ("" when it has none)
    main_pid: int
    control_group: str   # "" when it has none

    def describe(self) -> str:
        if not self.loaded:
            return f"{self.unit}: not loaded"
        failed = self.result not in ("", "success")
        return (f"{self.unit}: {self.active}/{self.sub}" + (f" (Result {self.result})" if failed else "")
                + f", MainPID {self.main_pid or 'none'}, ControlGroup {self.control_group or '(none)'}"
                + f", InvocationID {self.invocation or '(none)'}")


def state(bus: Systemd, unit: str) -> UnitState:
    """The unit's state as systemd reports it now (BusError passes through)."""
    props = bus.properties(unit, UNIT_IFACE)
    if props is None:
        return UnitState(unit, False, "", "", "", "", 0, "")
    svc = bus.properties(unit, SERVICE_IFACE) or {}
    return UnitState(unit, True, str(props.get("ActiveState") or ""), str(props.get("SubState") or ""),
                     str(svc.get("Result") or ""), bytes(props.get("InvocationID") or b"").hex(),
                     int(svc.get("MainPID") or 0), str(svc.get("ControlGroup") or ""))


@dataclass(frozen=True)
class Ownership:
    """Whether process `pid` is `unit`'s own, and what that was judged on."""
    pid: int
    cgroups: tuple[str, ...]
    unit: UnitState
    first: UnitState | None   # the state the module's checks first read, when earlier
    problem: str | None

    def describe(self) -> dict:
        return {"pid": self.pid, "cgroup": list(self.cgroups), "unit": self.unit.describe(),
                "first seen": None if self.first is None else self.first.describe(),
                "problem": self.problem}


def judge(bus: Systemd, unit: str, pid: int, create_time: float | None,
          seen: MutableMapping[str, UnitState] | None = None) -> Ownership:
    """Whether the process `pid` (started at `create_time`, psutil's; None: read
    here) is `unit`'s
    own: the unit active, with an InvocationID, the same before and after the
    process's cgroup is read and the same as `seen[unit]` (the first state this
    module's checks read, recorded there on the first call); the process its
    MainPID or inside its ControlGroup, and still the process listed."""
    before = state(bus, unit)
    first = seen.setdefault(unit, before) if seen is not None else before
    try:
        started = proc.create_time(pid) if create_time is None else create_time
        groups: tuple[str, ...] = tuple(dict.fromkeys(proc.cgroups(pid)))
        same = proc.create_time(pid) == started
    except (OSError, psutil.Error) as e:
        return Ownership(pid, (), before, first, f"cannot read /proc/{pid}/cgroup: {e}")
    after = state(bus, unit)
    where = f"pid {pid} (cgroup {', '.join(groups) or '(none)'})"

    def problem() -> str | None:
        if not same:
            return f"pid {pid} was replaced while it was read"
        if not before.loaded or before.active != "active":
            return f"{where} is not {unit}'s own: the unit is not active ({before.describe()})"
        if not before.invocation:
            return f"{where}: {unit} has no InvocationID ({before.describe()})"
        if after.invocation != before.invocation or after.active != "active":
            return (f"{where}: {unit} changed while it was read: {before.describe()}, "
                    f"then {after.describe()}")
        if first.invocation != before.invocation:
            return (f"{where}: {unit} is not the run the checks first read: {first.describe()}, "
                    f"now {before.describe()}")
        if pid != before.main_pid and not cgroups.inside(list(groups), before.control_group):
            return f"{where} is not {unit}'s own: neither its MainPID nor in its cgroup ({before.describe()})"
        return None

    return Ownership(pid, groups, before, first if first is not before else None, problem())
