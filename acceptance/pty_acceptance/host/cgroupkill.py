"""A signal for a process only while it is inside the cgroup of a unit the
suite owns (SUITE-4): SIGKILL (CGROUP-1 and ORPHAN-1 clean up with it),
SIGCONT (SUITE-5: a process of the suite's stopped from outside, stopguard.py).
A pidfd is taken first, then the process's cgroup and start time are read
(after the cgroup: a pid reused meanwhile is caught), then the signal goes
to the pidfd, which can name no other process."""
from __future__ import annotations

import os
import signal

import psutil

from pty_acceptance.host import cgroups, proc


def kill_inside(pid: int, created: float | None, control_group: str) -> str | None:
    """SIGKILL `pid` only while it is inside `control_group` (signal_inside)."""
    return signal_inside(pid, created, control_group, signal.SIGKILL)


def signal_inside(pid: int, created: float | None, control_group: str, sig: int) -> str | None:
    """Send `sig` to process `pid` (the one started at `created`; None: whichever
    has the pid) only if it is now inside `control_group`, a unit the suite
    owns: a pidfd first, then its cgroup and start time (read after the
    cgroup: a pid reused meanwhile is caught), then pidfd_send_signal.
    Returns why it was not signalled; None when it was, or when that process
    is gone."""
    if not control_group:
        return "no cgroup of the suite's to check it against"
    try:
        fd = proc.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError as e:
        return f"no pidfd for it ({e.strerror or e})"
    try:
        try:
            groups = proc.cgroups(pid)
            if created is not None and proc.create_time(pid) != created:
                return None  # that process is gone; another has its pid
        except (OSError, psutil.NoSuchProcess):
            return None
        if not cgroups.inside(groups, control_group):
            return f"outside {control_group} (in {', '.join(groups) or 'no cgroup of systemd'})"
        signal.pidfd_send_signal(fd, sig)
        return None
    except ProcessLookupError:
        return None
    finally:
        os.close(fd)
