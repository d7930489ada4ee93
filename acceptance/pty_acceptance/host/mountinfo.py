"""A mount namespace's table, read from /proc/<pid>/mountinfo as root, and
where a file of one filesystem can be reached by path in it (UNIT-7).

A bind mount keeps the device of the filesystem it comes from, so a host
socket is named by its filesystem's device and its path inside that
filesystem (`Place`); a mount of that device whose root is the socket or a
directory above it exposes the socket at its mount point plus the rest of
the path, unless another mount covers that path. Which mount a path
resolves through is decided as the kernel walks it: component by component
from the namespace's root mount, stepping onto a child mounted exactly at
each prefix (a stack of mounts at one place ends on its top). A mount that
sits below a covered directory is unreachable, even where its own mount
point would be the longest prefix.

The table is the kernel's (nothing in it is the service user's to write);
it is read bounded and parsed field by field (proc(5)).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs

LIMIT = 4 << 20  # bytes of one mountinfo: thousands of mounts
_ESCAPE = re.compile(r"\\([0-7]{3})")


class MountinfoError(Unreadable):
    """A mount table that cannot be read as one (UNIT-7 fails on it)."""
    requirements = ("UNIT-7",)


@dataclass(frozen=True)
class Mount:
    id: int
    parent: int
    dev: tuple[int, int]      # st_dev of every file it shows, as (major, minor)
    root: str                 # the directory of its filesystem it shows
    mountpoint: str
    fstype: str

    def describe(self) -> str:
        return f"mount {self.id} ({self.fstype} {self.dev[0]}:{self.dev[1]} {self.root} at {self.mountpoint})"


@dataclass(frozen=True)
class Place:
    """A file as its filesystem holds it: the device and the path inside."""
    dev: tuple[int, int]
    path: str


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse(text: str) -> list[Mount]:
    """The mounts of one mountinfo text, in its order."""
    mounts = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
            major, minor = fields[2].split(":")
            mounts.append(Mount(int(fields[0]), int(fields[1]), (int(major), int(minor)),
                                _unescape(fields[3]), _unescape(fields[4]), fields[sep + 1]))
        except (ValueError, IndexError):
            raise MountinfoError(f"line {n} is not a mountinfo line: {line[:200]!r}") from None
    if not mounts:
        raise MountinfoError("no mounts")
    return mounts


def read(pid: int | str) -> list[Mount]:
    """The mount table of the namespace process `pid` ("self": the suite's) is in."""
    data = hostfs.read_nofollow(f"/proc/{pid}/mountinfo", LIMIT)
    if len(data) > LIMIT:
        raise MountinfoError(f"/proc/{pid}/mountinfo is longer than {LIMIT} bytes")
    return parse(data.decode("utf-8", "surrogateescape"))


def _prefixes(path: str) -> list[str]:
    parts = PurePosixPath(path).parts
    return ["/" + "/".join(parts[1:i]) for i in range(1, len(parts) + 1)]


def resolve(mounts: list[Mount], path: str) -> tuple[Mount, str]:
    """The mount an absolute, link-free `path` resolves through in this table, and
    the path inside that mount's filesystem."""
    ids = {m.id for m in mounts}
    roots = [m for m in mounts if m.mountpoint == "/" and (m.parent not in ids or m.parent == m.id)]
    if not roots:
        raise MountinfoError("no root mount")
    cur = roots[0]
    for prefix in _prefixes(path):
        while True:
            above = [m for m in mounts if m.parent == cur.id and m.mountpoint == prefix and m.id != cur.id]
            if not above:
                break
            cur = above[-1]
    rest = PurePosixPath(path).relative_to(cur.mountpoint)
    inside = str(PurePosixPath(cur.root) / rest) if str(rest) != "." else cur.root
    return cur, inside


def place(mounts: list[Mount], path: str) -> Place:
    """Where the file at `path` (absolute, no link on the way) lives: its filesystem's
    device and its path inside it, as the table `mounts` resolves it."""
    m, inside = resolve(mounts, path)
    return Place(m.dev, inside)


def exposures(mounts: list[Mount], target: Place) -> list[tuple[str, Mount]]:
    """Every path at which this table shows `target`: a mount of its device whose root
    is the target or a directory above it, at a path no other mount covers."""
    out = []
    for m in mounts:
        if m.dev != target.dev:
            continue
        try:
            rest = PurePosixPath(target.path).relative_to(m.root)
        except ValueError:
            continue
        at = str(PurePosixPath(m.mountpoint) / rest) if str(rest) != "." else m.mountpoint
        if resolve(mounts, at)[0] == m:
            out.append((at, m))
    return out


def device_of(st: os.stat_result) -> tuple[int, int]:
    return os.major(st.st_dev), os.minor(st.st_dev)
