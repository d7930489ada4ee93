"""Reading the live host around a session, from outside it (as root).

Descriptors what a process holds (/proc/<pid>/fd and fdinfo), and what
            every process of the supervisor unit holds, by identity.
tree()      a unit's processes, MainPID first.

Nothing here changes the host.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import cgroups, proc
from pty_acceptance.host.bus import SERVICE_IFACE, BusError, Systemd
from pty_acceptance.host.hostfs import read_nofollow

O_CLOEXEC = 0o2000000


# ------------------------------------------------------------- descriptors
def parse_fd_flags(fdinfo: bytes) -> int | None:
    """The `flags:` field (octal) of a /proc/<pid>/fdinfo/<n> text, None if absent or malformed."""
    for line in fdinfo.splitlines():
        key, sep, value = line.partition(b":")
        if sep and key.strip() == b"flags":
            try:
                return int(value.strip(), 8)
            except ValueError:
                return None
    return None


def fd_flags(pid: int, fd: int) -> int:
    with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
        flags = parse_fd_flags(f.read(4096))
    if flags is None:
        raise ValueError(f"/proc/{pid}/fdinfo/{fd} has no flags line")
    return flags


def socket_inode(target: str) -> int | None:
    """'socket:[123]' -> 123."""
    if target.startswith("socket:[") and target.endswith("]"):
        return int(target[8:-1])
    return None


@dataclass
class UnitProcs:
    unit: str
    main_pid: int
    procs: list[psutil.Process]

    def describe(self) -> list[str]:
        out = []
        for p in self.procs:
            try:
                out.append(f"{p.pid} ppid={p.ppid()} exe={p.exe()} argv={p.cmdline()}")
            except psutil.Error as e:
                out.append(f"{p.pid}: {type(e).__name__}")
        return out


def unit_procs(bus: Systemd, unit: str) -> UnitProcs:
    """MainPID of a unit and every descendant of it (MainPID first)."""
    props = bus.properties(unit, SERVICE_IFACE) or {}
    pid = props.get("MainPID") or 0
    if not pid:
        return UnitProcs(unit, 0, [])
    try:
        main = psutil.Process(pid)
        return UnitProcs(unit, pid, [main] + main.children(recursive=True))
    except psutil.NoSuchProcess:
        return UnitProcs(unit, pid, [])


class DescriptorError(Unreadable):
    """The supervisor's descriptors cannot be read: nothing can be said about them."""


def fd_identity(pid: int, fd: int) -> str:
    """What descriptor `fd` of `pid` is: the kernel's description of it (readlink
    of the fd link, never followed: socket:[ino], pipe:[ino], a path) plus the
    mnt_id and ino fields of its fdinfo, so a file closed and another opened
    under the same number and path read differently only when they differ."""
    link = os.readlink(f"/proc/{pid}/fd/{fd}")
    info = read_nofollow(f"/proc/{pid}/fdinfo/{fd}", 4096)
    fields = {}
    for line in info.splitlines():
        key, sep, value = line.partition(b":")
        if sep and key.strip() in (b"mnt_id", b"ino"):
            fields[key.strip().decode()] = value.strip().decode("ascii", "replace")
    return link + "".join(f" {k}={fields[k]}" for k in sorted(fields))


def supervisor_descriptors(bus: Systemd, unit: str) -> dict[tuple[int, int], str]:
    """{(pid, fd): fd_identity} over every process of the supervisor unit (its
    MainPID and every process of its cgroup: the reference supervisor is a Go
    wrapper with one Python child). DescriptorError when the unit has no
    process or a process that is still in the unit cannot be read: an empty
    or partial table would compare equal to anything."""
    try:
        pids = cgroups.unit_pids(bus, unit)
    except (OSError, ValueError, BusError) as e:
        raise DescriptorError(f"{unit}: its processes cannot be listed: {e}") from None
    if not pids:
        raise DescriptorError(f"{unit} has no MainPID and no process in its cgroup")
    out = {}
    for pid in sorted(pids):
        try:
            names = proc.fd_numbers(pid)
        except OSError as e:
            if pid in _still_in(bus, unit):
                raise DescriptorError(f"{unit}: cannot list /proc/{pid}/fd: {e.strerror}") from None
            continue  # it left the unit (exited) between the listing and the read
        for name in names:
            try:
                out[(pid, name)] = fd_identity(pid, name)
            except FileNotFoundError:
                pass  # closed while it was read
            except OSError as e:
                raise DescriptorError(f"{unit}: cannot read fd {name} of pid {pid}: "
                                      f"{e.strerror}") from None
    return dict(sorted(out.items()))


def _still_in(bus: Systemd, unit: str) -> set[int]:
    try:
        return cgroups.unit_pids(bus, unit)
    except (OSError, ValueError, BusError) as e:
        raise DescriptorError(f"{unit}: its processes cannot be listed: {e}") from None


def new_descriptors(baseline: dict, now: dict) -> dict:
    """The descriptors of `now` that `baseline` did not hold: a new (pid, fd), or
    one whose identity changed. Counts say nothing: a process that keeps one
    descriptor and closes another of its own has as many as before."""
    return {k: v for k, v in now.items() if baseline.get(k) != v}


def wait_descriptors_back(bus: Systemd, unit: str, baseline: dict, deadline_s: float) -> dict:
    """Poll until the supervisor holds no descriptor that `baseline` did not;
    return those still held at the deadline ({} when back). DescriptorError
    when its processes cannot be read."""
    end = time.monotonic() + deadline_s
    delay = 0.01
    while True:
        extra = new_descriptors(baseline, supervisor_descriptors(bus, unit))
        if not extra or time.monotonic() > end:
            return extra
        time.sleep(delay)  # poll interval, not a wait for an outcome
        delay = min(delay * 2, 0.1)


def wait_exec(bus: Systemd, unit: str, exe: str, deadline_s: float) -> UnitProcs:
    """Poll until a process of the unit has exec'd `exe`.

    The kernel names the new executable in /proc/<pid>/exe before it closes
    the old image's close-on-exec descriptors, and sets the comm (the
    basename execve was given) only after; so the exec is complete when both
    name the command."""
    end = time.monotonic() + deadline_s
    delay = 0.005
    comm = os.path.basename(exe)[:15]
    while True:
        procs = unit_procs(bus, unit)
        for pr in procs.procs:
            try:
                if pr.exe() == exe and proc.comm(pr.pid) == comm:
                    return procs
            except (psutil.Error, FileNotFoundError, ProcessLookupError):
                pass
        if time.monotonic() > end:
            raise TimeoutError(f"{unit}: no process runs {exe} (comm {comm!r}) within {deadline_s} s; "
                               f"processes: {procs.describe()}")
        time.sleep(delay)  # poll interval, not a wait for an outcome
        delay = min(delay * 2, 0.1)
