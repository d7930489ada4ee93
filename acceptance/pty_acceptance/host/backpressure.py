"""A writer blocked by backpressure, seen from the host: the bytes a process
of a cgroup has written (/proc/<pid>/io's write_chars) stop growing (CONC-2's
saturated session, FLOOD-4's saturated STOP)."""
from __future__ import annotations

import time

import psutil

from pty_acceptance.host import proc
from pty_acceptance.host.cgroups import cgroup_pids
from pty_acceptance.host.polling import poll


def write_chars(path: str, name: str) -> int | None:
    """Bytes written so far by the process called `name` in a cgroup (None: none
    there; a process gone meanwhile is not it, one that cannot be read raises
    proc.ProcUnreadable)."""
    for pid in cgroup_pids(path):
        try:
            process = psutil.Process(pid)
            if process.name() == name:
                return process.io_counters().write_chars
        except psutil.NoSuchProcess:
            continue
        except psutil.Error as e:
            raise proc.unreadable(pid, "the name and write_chars", e) from None
    return None


def wait_stalled(path: str, name: str, deadline_s: float, quiet_s: float = 0.3) -> int:
    """Until the writer `name` in the cgroup has written nothing for quiet_s (it is
    blocked by backpressure). Returns its byte count then."""
    seen: list = [None, time.monotonic()]

    def stalled():
        now, n = time.monotonic(), write_chars(path, name)
        if n is None or n != seen[0]:
            seen[0], seen[1] = n, now
            return None
        return n if now - seen[1] >= quiet_s else None

    return poll(stalled, deadline_s, f"{name} blocked by backpressure",
                lambda: f"{name} write_chars={seen[0]}")
