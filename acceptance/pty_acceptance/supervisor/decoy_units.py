"""Decoy units for the orphan cleanup (ORPHAN-1): transient units of the
suite's own that look like session units, a planted orphan bound to the
supervisor or a look-alike that must be left untouched (another name, or
bound to another unit as well: only BindsTo= exactly the supervisor is an
orphan's), and the anchor such a unit is bound to. Each is tagged (a
crashed run's leftover is found by its Description) and carries a token in
its argv, so its processes are found like a session's (Footprint)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from pty_acceptance.host.bus import Systemd
from pty_acceptance.supervisor.session_gone import force_stop
from pty_acceptance.supervisor.peer import TAG_PREFIX


@dataclass
class Decoy:
    """A transient unit of the suite's (tagged, so a crashed run's leftover is
    found) that looks like a session unit: a planted orphan or a look-alike."""

    bus: Systemd
    name: str
    tag: str
    binds_to: list[str] = field(default_factory=list)
    token: str = ""           # in its argv, so its processes can be found (Footprint)

    def start(self) -> "Decoy":
        props = [
            ("Description", ("s", f"{TAG_PREFIX} {self.tag}: decoy {self.name}")),
            ("Type", ("s", "exec")),
            ("User", ("s", "nobody")),
            ("NoNewPrivileges", ("b", True)),
            ("ExecStart", ("a(sasb)", [("/bin/sleep", ["/bin/sleep", f"300.{self.token}"], False)])),
            ("CollectMode", ("s", "inactive-or-failed")),
            ("TimeoutStopUSec", ("t", 5_000_000)),
        ]
        if self.binds_to:
            props += [("BindsTo", ("as", self.binds_to)), ("After", ("as", self.binds_to))]
        self.bus.start_transient(self.name, props)
        self.bus.wait_for(self.name, lambda pr: pr and pr.get("ActiveState") == "active", 10, "active")
        return self

    def state(self) -> dict | None:
        props = self.bus.properties(self.name)
        if props is None:
            return None
        return {"ActiveState": props.get("ActiveState"), "SubState": props.get("SubState"),
                "InvocationID": bytes(props.get("InvocationID") or b"").hex()}

    def remove(self) -> None:
        force_stop(self.bus, [self.name])


def strict_session_name() -> str:
    return f"opencode-pty-{secrets.token_hex(16)}.service"
