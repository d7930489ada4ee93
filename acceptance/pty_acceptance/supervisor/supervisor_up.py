"""Whether the supervisor unit is up, waiting for it and starting it (not
the readiness marker, gate/marker.py) (CONC-2, ORPHAN-1: a restart of the supervisor
is one of the ways a session ends, and the suite brings it back on every
path: conftest's `supervisor_guard`): active/running, Type=notify's READY
coming after listen, and its socket there; optionally a new invocation."""
from __future__ import annotations

import os
import stat

from pty_acceptance.host.bus import Systemd
from pty_acceptance.host.polling import poll


def supervisor_ready(bus: Systemd, name: str, socket_path: str) -> bool:
    """Active/running (Type=notify: READY comes after listen) and its socket exists."""
    props = bus.properties(name)
    if not props or props.get("ActiveState") != "active" or props.get("SubState") != "running":
        return False
    try:
        return stat.S_ISSOCK(os.stat(socket_path).st_mode)
    except OSError:
        return False


def wait_supervisor_ready(bus: Systemd, name: str, socket_path: str, deadline_s: float = 30,
                          invocation: bytes | None = None) -> dict:
    """Until the supervisor is ready (and, if given, no longer `invocation`)."""
    def ready():
        if not supervisor_ready(bus, name, socket_path):
            return None
        props = bus.properties(name)
        if invocation is not None and bytes(props.get("InvocationID") or b"") == invocation:
            return None
        return props

    def state():
        props = bus.properties(name) or {}
        return (f"{name} ActiveState={props.get('ActiveState')} SubState={props.get('SubState')}, "
                f"socket {socket_path} exists={os.path.exists(socket_path)}")

    return poll(ready, deadline_s, f"{name} ready with its socket", state)


def start_supervisor(bus: Systemd, name: str, socket_path: str) -> None:
    bus.reset_failed(name)
    bus.call("StartUnit", "ss", (name, "replace"))
    wait_supervisor_ready(bus, name, socket_path)
