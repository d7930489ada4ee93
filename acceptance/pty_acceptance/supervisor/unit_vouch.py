"""Which unit a reply may make the suite stop or kill (SUITE-4).

A session's unit name comes from the supervisor (STARTED) or from a watch on
systemd: hostile input. A lying supervisor, or the service user ptracing the
peer agent, could name `sshd.service`, and root would then stop that unit,
SIGKILL its cgroup or signal its MainPID. So before the suite acts on a
session unit it vouches for it: a strict session name
(opencode-pty-<32 lowercase hex>.service), loaded, BindsTo= the inventory's
supervisor and Slice= the inventory's slice (TARGET-CONTRACT section 1,
UNIT-8). A unit that fails is refused: the test fails naming SUITE-4 (and the
name, escaped), and the suite neither stops nor kills it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pty_acceptance.errors import Unreadable
from pty_acceptance.errors import Refused
from pty_acceptance.host import terminal
from pty_acceptance.host.bus import SERVICE_IFACE, UNIT_IFACE, BusError, Systemd
from pty_acceptance.host.systemd import STRICT_SESSION
from pty_acceptance.supervisor.stopbounds import CONTRACT, StopBounds


@dataclass(frozen=True)
class Owner:
    """Who a session unit must belong to: the inventory's supervisor and slice;
    and what its stop may take (the inventory's session_stop, CONC-3)."""
    supervisor: str
    slice: str
    stop: StopBounds = CONTRACT

    @classmethod
    def of(cls, inv) -> "Owner":
        return cls(inv.units.supervisor, inv.units.slice, StopBounds.of(inv.session_stop))


class NotOurs(Refused):
    """A unit the suite refuses to act on; the failing test is also reported
    under `requirements` (the plugin adds them to its JUnit case)."""
    requirements = ("SUITE-4",)

    def __init__(self, name: str, why: str):
        self.name = name
        super().__init__(f"SUITE-4: the session unit {terminal.escape(repr(name))} {why}: the "
                         f"suite neither stops nor kills it")


class NotLoaded(Unreadable):
    """A strict, well-bound name whose unit is not loaded (nothing to act on)."""


def vouch(bus: Systemd, name: str, owner: Owner) -> dict:
    """The Service properties of `name` when the suite may stop or kill it.
    Raises NotOurs (refused) or NotLoaded; BusError passes through."""
    if not isinstance(name, str) or not STRICT_SESSION.match(name):
        raise NotOurs(name, "is not a strict session name (opencode-pty-<32 lowercase hex>.service)")
    unit = bus.properties(name, UNIT_IFACE)
    svc = bus.properties(name, SERVICE_IFACE)
    if unit is None or svc is None:
        raise NotLoaded(f"{name} is not loaded")
    binds = list(unit.get("BindsTo") or [])
    if owner.supervisor not in binds:
        raise NotOurs(name, f"is not bound to {owner.supervisor} (BindsTo={binds})")
    if svc.get("Slice") != owner.slice:
        raise NotOurs(name, f"is in {terminal.escape(repr(svc.get('Slice')))}, not {owner.slice}")
    return svc


def may_act(bus: Systemd, name: str, owner: Owner) -> bool:
    """vouch() as a yes/no for cleanup paths (a refusal there was already reported)."""
    try:
        vouch(bus, name, owner)
        return True
    except (NotOurs, NotLoaded, BusError):
        return False
