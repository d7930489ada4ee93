"""Processes read from /proc as root, one pid at a time (SUITE-4, ISO-1, ISO-3,
CGROUP-1, ORPHAN-1, RUNTIME-2).

A pid is only a number the kernel hands out again: what a reader says of it
holds while that very process runs. So a pid is held by a pidfd (pidfd_open)
or checked again by its start time (the clock ticks of /proc/<pid>/stat, or
psutil's create_time, equal on every read of one process) before anything is
concluded or signalled. What a process executes, or a descriptor refers to,
is judged by the inode the kernel resolves (stat of the magic link, never
opened); the name a link gives is evidence only, and ownership is read by
lstat. Every read is bounded; a process gone meanwhile raises OSError
(ProcessLookupError or FileNotFoundError) unless a reader says otherwise.

A walk lists processes (or a process's descriptors) and then reads each: a
process may exit in between. Gone is gone (gone(): ENOENT or ESRCH, the
process or the descriptor no longer there) and is skipped; anything else
(EACCES, EIO, a read cut short, a field that does not parse) is a process
that is there and could not be read, and fails (ProcUnreadable): never
taken for gone, never taken for another user's process either (UNIT-5).
"""
from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import psutil

from pty_acceptance.errors import Unreadable
from pty_acceptance.host.hostfs import read_file, read_nofollow

T = TypeVar("T")

STAT_LIMIT = 4096
STATUS_LIMIT = 16384
CMDLINE_LIMIT = 65536
CGROUP_LIMIT = 65536
COMM_LIMIT = 64


class ProcUnreadable(Unreadable):
    """A process that is there could not be read: not gone, and never taken for gone."""


def gone(e: OSError) -> bool:
    """The read failed because what it read is gone: the process exited (and was
    reaped) after it was listed, or the descriptor was closed (ENOENT, ESRCH).
    EACCES, EIO and the rest are not: the process is there, unread."""
    return e.errno in (errno.ENOENT, errno.ESRCH)


def unreadable(pid: int, what: str, e: BaseException) -> ProcUnreadable:
    why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return ProcUnreadable(f"/proc/{pid}: cannot read {what} of a process that is there: {why}")


# ------------------------------------------------------------- which processes
def pids() -> list[int]:
    """Every pid in /proc now, in the kernel's order."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def walk(read: Callable[[int], T], what: str, among: Iterable[int] | None = None) -> dict[int, T]:
    """{pid: read(pid)} for every pid of `among` (None: every process in /proc now).
    A process gone between the listing and its read is left out; any other
    OSError, or a ValueError from read() (a field that does not parse), raises
    ProcUnreadable naming the pid and `what`."""
    out = {}
    for pid in pids() if among is None else among:
        try:
            out[pid] = read(pid)
        except OSError as e:
            if gone(e):
                continue
            raise unreadable(pid, what, e) from None
        except ValueError as e:
            raise unreadable(pid, what, e) from None
    return out


def threads(pid: int) -> list[int]:
    """The thread ids of `pid` (/proc/<pid>/task)."""
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]


def descendants(pid: int) -> list[psutil.Process]:
    """Every descendant of `pid` ([] when it is gone; ProcUnreadable when /proc
    cannot be read: an unread process may be a descendant)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    except (psutil.Error, OSError) as e:
        raise unreadable(pid, "the parents of every process", e) from None


# ------------------------------------------------------------- the same process
def pidfd_open(pid: int) -> int:
    """A pidfd: it names that process, never a later one with its pid
    (ProcessLookupError once it is gone). The caller closes it."""
    return os.pidfd_open(pid)


def pidfd_alive(pidfd: int) -> bool:
    """A pidfd polls readable once its process has exited."""
    return not select.select([pidfd], [], [], 0)[0]


def create_time(pid: int) -> float:
    """psutil's start time of `pid`: the same value on every read of one process
    (psutil.NoSuchProcess once it is gone)."""
    return psutil.Process(pid).create_time()


def alive(pid: int, create_time: float) -> bool:
    """The very process seen earlier (same pid AND same create_time) still runs."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == create_time and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stat_line(pid: int, tid: int | None = None) -> bytes:
    """/proc/<pid>/stat (or a thread's), through O_NOFOLLOW."""
    where = f"/proc/{pid}" if tid is None else f"/proc/{pid}/task/{tid}"
    return read_nofollow(f"{where}/stat", STAT_LIMIT)


def stat_field(data: bytes, number: int) -> bytes:
    """Field `number` (3 = state, 22 = starttime) of a /proc/<pid>/stat text; comm
    (field 2) may hold anything, so fields are counted after its last ')'.
    ValueError when the text has no such field."""
    try:
        return data[data.rindex(b")") + 2:].split()[number - 3]
    except IndexError:
        raise ValueError(f"no field {number}") from None


def start_ticks(pid: int) -> int:
    """When `pid` started, in clock ticks after boot (field 22 of its stat)."""
    return int(stat_field(stat_line(pid), 22))


def start_realtime_ns(pid: int) -> int:
    """When `pid` started, on the realtime clock in nanoseconds: its start in
    ticks after boot (CLOCK_BOOTTIME, which /proc/<pid>/stat counts in) moved
    by the realtime clock's offset from boot, read now; to a tick."""
    ticks = start_ticks(pid)
    offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return offset + ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def start_time(pid: int) -> float | None:
    """A process's start time (seconds since the epoch), from /proc/<pid>/stat."""
    try:
        ticks = start_ticks(pid)
        uptime = float(read_file("/proc/uptime", 256).split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------- what it is
def read(pid: int, name: str, limit: int) -> bytes:
    """At most `limit` bytes of /proc/<pid>/<name>."""
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read(limit)


def status(pid: int, tid: int | None = None) -> dict[str, str]:
    """/proc/<pid>/status (or a thread's) as {field: value} (raises OSError if it is gone)."""
    name = "status" if tid is None else f"task/{tid}/status"
    out = {}
    for line in read(pid, name, STATUS_LIMIT).decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def ppid(pid: int) -> int:
    return int(status(pid)["PPid"])


def uid(pid: int) -> int:
    """The effective uid of `pid`: the owner of /proc/<pid> (lstat)."""
    return os.lstat(f"/proc/{pid}").st_uid


def cmdline(pid: int) -> list[bytes]:
    raw = read(pid, "cmdline", CMDLINE_LIMIT)
    return raw.split(b"\0")[:-1] if raw.endswith(b"\0") else raw.split(b"\0")


def comm(pid: int) -> str:
    """The name the kernel keeps for `pid` (the basename execve was given)."""
    return read(pid, "comm", COMM_LIMIT).rstrip(b"\n").decode("utf-8", "replace")


def exe(pid: int) -> str:
    """readlink of /proc/<pid>/exe: the kernel's name for what it executes (evidence)."""
    return os.readlink(f"/proc/{pid}/exe")


def exe_file(pid: int) -> tuple[int, int]:
    """(st_dev, st_ino) of the file `pid` executes: the magic link resolves to
    the mapped file itself, whatever its path names now."""
    st = os.stat(f"/proc/{pid}/exe")
    return st.st_dev, st.st_ino


def exe_identity(pid: int) -> tuple[str, tuple[int, int] | None]:
    """(readlink of /proc/<pid>/exe, (st_dev, st_ino) of what it executes)."""
    try:
        link = exe(pid)
        ident = exe_file(pid)
    except OSError as e:
        return f"? ({e.strerror})", None
    return link, ident


def cgroups(pid: int) -> list[str]:
    """The cgroups of systemd's tree (as ControlGroup names them) `pid` is in
    now: the unified hierarchy's, and the legacy name=systemd one's.
    OSError (ProcessLookupError included) passes through."""
    text = read_file(f"/proc/{pid}/cgroup", CGROUP_LIMIT).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and ((parts[0] == "0" and not parts[1]) or "name=systemd" in parts[1].split(",")):
            out.append(parts[2])
    return out


# ------------------------------------------------------------- its descriptors
def fd_numbers(pid: int) -> list[int]:
    """The descriptors `pid` holds, sorted."""
    return sorted(int(name) for name in os.listdir(f"/proc/{pid}/fd"))


def fds(pid: int) -> dict[int, str]:
    """{fd: readlink target} of a live process (a descriptor closed while it is
    read is left out; any other error raises)."""
    out = {}
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            out[int(name)] = os.readlink(f"{base}/{name}")
        except OSError as e:
            if not gone(e):
                raise
    return dict(sorted(out.items()))


def fd_stat(pid: int, fd: int) -> os.stat_result:
    """stat of what descriptor `fd` of `pid` refers to, through its magic link
    (the object itself, never opened)."""
    return os.stat(f"/proc/{pid}/fd/{fd}")
