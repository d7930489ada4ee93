"""A writer blocked by backpressure, seen from the host: the bytes a process
of a cgroup has written (/proc/<pid>/io's write_chars) stop growing (CONC-2's
saturated session, FLOOD-4's saturated STOP).

A writer also stops when its terminal's output is stopped (TCXONC TCOOFF, or
^S): the service user owns a session's terminal and may stop it without a
signal or a ptrace stop the guard would see, and then the supervisor has
nothing to hold back (a blind red team's round eleven). So once the writer is
still, root starts the terminal's output again (TCOON on the writer's own
stdout, the terminal it writes to) and looks: a writer the supervisor holds
back stays where it was; one whose output had been stopped moves on, and the
stall is no backpressure (TerminalStopped, SUITE-4)."""
from __future__ import annotations

import os
import stat
import termios
import time

import psutil

from pty_acceptance.errors import Refused
from pty_acceptance.host import proc
from pty_acceptance.host.cgroups import cgroup_pids
from pty_acceptance.host.polling import poll

RESTART_WATCH_S = 0.5  # how long a still writer is watched once its terminal's output is started again
# bytes it may still write then and be held back all the same: none (a supervisor that holds the
# writer back has left its terminal no room; a writer whose output was merely stopped writes at
# once, and an attacker stopping it again at once, in a loop, still lets a write through first)
RESTART_SLACK = 0


class TerminalStopped(Refused):
    """The writer was still because its terminal's output was stopped, not because
    the supervisor held it back."""
    requirements = ("SUITE-4",)


def writer(path: str, name: str) -> tuple[int, int] | None:
    """(pid, bytes written so far) of the process called `name` in a cgroup (None:
    none there; a process gone meanwhile is not it, one that cannot be read raises
    proc.ProcUnreadable)."""
    for pid in cgroup_pids(path):
        try:
            process = psutil.Process(pid)
            if process.name() == name:
                return pid, process.io_counters().write_chars
        except psutil.NoSuchProcess:
            continue
        except psutil.Error as e:
            raise proc.unreadable(pid, "the name and write_chars", e) from None
    return None


def wait_stalled(path: str, name: str, deadline_s: float, quiet_s: float = 0.3) -> int:
    """Until the writer `name` in the cgroup has written nothing for quiet_s (it is
    blocked by backpressure). Returns its byte count then. TerminalStopped when it
    was still because its terminal's output was stopped (restarted_by_root)."""
    seen: list = [None, time.monotonic(), None]

    def stalled():
        now, found = time.monotonic(), writer(path, name)
        n = None if found is None else found[1]
        if n is None or n != seen[0]:
            seen[0], seen[1], seen[2] = n, now, None if found is None else found[0]
            return None
        return n if now - seen[1] >= quiet_s else None

    n = poll(stalled, deadline_s, f"{name} blocked by backpressure",
             lambda: f"{name} write_chars={seen[0]}")
    if (moved := restarted_by_root(seen[2], path, name, n)) is not None:
        raise TerminalStopped(f"SUITE-4: {name} (pid {seen[2]}) was still at {n} bytes because its terminal's "
                              f"output was stopped, not because the supervisor held it back: once root started "
                              f"it again it wrote {moved} bytes more within {RESTART_WATCH_S:g} s")
    return n


def restarted_by_root(pid: int | None, path: str, name: str, before: int) -> int | None:
    """Start the output of `pid`'s terminal again (TCOON on its stdout, when that is
    its controlling terminal) and watch: the bytes it wrote past RESTART_SLACK within
    RESTART_WATCH_S, or None (it stayed held back, or writes to no terminal)."""
    if pid is None:
        return None
    try:
        fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # gone, or its stdout is no file root can open: nothing to start
    try:
        st = os.fstat(fd)
        if not stat.S_ISCHR(st.st_mode) or st.st_rdev != _tty_nr(pid):
            return None  # its stdout is not its terminal
        termios.tcflow(fd, termios.TCOON)
    except OSError:
        return None
    finally:
        os.close(fd)
    end = time.monotonic() + RESTART_WATCH_S
    while time.monotonic() < end:
        found = writer(path, name)
        if found is None or found[0] != pid:
            return None
        if found[1] - before > RESTART_SLACK:
            return found[1] - before
        time.sleep(0.02)  # poll interval while the restarted writer may move
    return None


def _tty_nr(pid: int) -> int:
    """The controlling terminal's device number (/proc/<pid>/stat field 7)."""
    return int(proc.stat_field(proc.stat_line(pid), 7))
