"""The running supervisor tied to the installed binary (SCOPE-2).

A hash of /usr/local/libexec/opencode-pty-supervisor says nothing about what
runs: a drop-in's `ExecStart=` can run another copy, even a root-owned one.
So the supervisor unit's MainPID (read over D-Bus) is held by a pidfd while
/proc/<pid>/exe is stat'ed, and is confirmed afterwards to be still alive and
still the MainPID (a reused PID never passes for it). What it executes must be
the same st_dev/st_ino as the `lstat` of the installed path: a link there has
its own inode, so it is never followed and never matches.

Used by the SCOPE-2 test and again by the gate at marker time (decision/hostfacts.py), so a
supervisor swapped in mid-run cannot earn the marker.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import proc
from pty_acceptance.host.bus import SERVICE_IFACE, BusError, Systemd

ATTEMPTS = 3  # a MainPID that changes while it is read is read again, this often


class RunningError(Unreadable):
    pass


@dataclass(frozen=True)
class Running:
    unit: str
    binary: str
    pid: int
    exe_link: str                        # readlink /proc/<pid>/exe (text the kernel gave)
    exe_id: tuple[int, int] | None       # (st_dev, st_ino) of what the MainPID executes
    installed_id: tuple[int, int] | None  # lstat of the installed path
    installed_kind: str

    @property
    def problem(self) -> str | None:
        if self.installed_id is None:
            return f"{self.binary} cannot be lstat'ed ({self.installed_kind})"
        if self.installed_kind != "regular file":
            return f"{self.binary} is a {self.installed_kind}, not a regular file"
        if self.exe_id is None:
            return f"/proc/{self.pid}/exe of {self.unit}'s MainPID cannot be read: {self.exe_link}"
        if self.exe_id != self.installed_id:
            return (f"{self.unit}'s MainPID {self.pid} executes {self.exe_link!r} "
                    f"(device:inode {_id(self.exe_id)}), not {self.binary} "
                    f"(device:inode {_id(self.installed_id)})")
        return None

    def describe(self) -> str:
        return (f"{self.unit} MainPID {self.pid}: /proc/{self.pid}/exe -> {self.exe_link!r} "
                f"{_id(self.exe_id)}; lstat {self.binary}: {self.installed_kind} {_id(self.installed_id)}")


def _id(pair: tuple[int, int] | None) -> str:
    if pair is None:
        return "?"
    dev, ino = pair
    return f"{os.major(dev)}:{os.minor(dev)}:{ino}"


def main_pid(bus: Systemd, unit: str) -> int:
    """The unit's MainPID (0: none); RunningError if systemd cannot say."""
    try:
        props = bus.properties(unit, SERVICE_IFACE)
    except BusError as e:
        raise RunningError(f"cannot read {unit} from systemd: {e}") from None
    if props is None:
        raise RunningError(f"{unit} is not loaded")
    return int(props.get("MainPID") or 0)


def _installed(path: str) -> tuple[tuple[int, int] | None, str]:
    try:
        st = os.lstat(path)
    except OSError as e:
        return None, e.strerror or str(e)
    kind = ("regular file" if stat.S_ISREG(st.st_mode) else
            "symlink" if stat.S_ISLNK(st.st_mode) else "special file or directory")
    return (st.st_dev, st.st_ino), kind


def identify(bus: Systemd, unit: str, binary: str) -> Running:
    """What the unit's MainPID executes against the installed `binary`."""
    last = ""
    for _ in range(ATTEMPTS):
        pid = main_pid(bus, unit)
        if pid <= 0:
            raise RunningError(f"{unit} has no MainPID (not running): nothing ties it to {binary}")
        try:
            pidfd = proc.pidfd_open(pid)
        except ProcessLookupError:
            last = f"MainPID {pid} exited before it could be held"
            continue
        try:
            link, exe_id = proc.exe_identity(pid)
            same = main_pid(bus, unit) == pid and proc.pidfd_alive(pidfd)
        finally:
            os.close(pidfd)
        if not same:
            last = f"MainPID {pid} exited or was replaced while it was read"
            continue
        installed_id, kind = _installed(binary)
        return Running(unit, binary, pid, link, exe_id, installed_id, kind)
    raise RunningError(f"{unit}: {last} ({ATTEMPTS} attempts)")


def at_marker_time(unit: str, binary: str) -> Running:
    """identify() over a connection of its own (the gate has no bus fixture)."""
    try:
        bus = Systemd.connect()
    except (OSError, BusError) as e:
        raise RunningError(f"the system bus is not reachable: {e}") from None
    try:
        return identify(bus, unit, binary)
    finally:
        bus.close()
