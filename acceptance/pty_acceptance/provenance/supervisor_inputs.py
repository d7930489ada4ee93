"""What feeds the running supervisor besides its unit files and programs (OWN-2).

named_paths()  the paths its loaded unit names for it to read or run in:
               EnvironmentFile= (a leading `-` only makes a missing file
               allowed), WorkingDirectory= (`!` allows a missing one, `~` is
               the home of its user: root's), RootDirectory=, RootImage=.
held_paths()   what its processes hold now, read from /proc as root: each
               one's cwd and root directory, every descriptor that is a
               regular file or directory, every file it maps.

Each is judged root-controlled (root-owned, not group/other-writable, every
directory above it too). An object a process holds is judged twice: itself,
through /proc (the file the kernel holds, whatever its path now names), and
by its path on the host with lstat; a path that no longer names that same
file (deleted, or a mount private to the unit) is a finding, since its
directories cannot be judged.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from pty_acceptance.host import hostfs, proc

MAX_MAPS = 1 << 20


@dataclass(frozen=True)
class Named:
    what: str        # e.g. "EnvironmentFile="
    path: str
    kind: str        # "regular file" or "directory"
    optional: bool   # systemd accepts it missing


def named_paths(props: dict) -> list[Named]:
    """From the Service interface's properties (D-Bus)."""
    out = []
    for path, optional in props.get("EnvironmentFiles") or []:
        out.append(Named("EnvironmentFile=", str(path), "regular file", bool(optional)))
    wd = str(props.get("WorkingDirectory") or "")
    optional = wd.startswith("!")
    wd = wd.lstrip("!")
    if wd == "~":
        wd = "/root"  # the supervisor runs as root (unit_properties pin User= empty)
    if wd:
        out.append(Named("WorkingDirectory=", wd, "directory", optional))
    if props.get("RootDirectory"):
        out.append(Named("RootDirectory=", str(props["RootDirectory"]), "directory", False))
    if props.get("RootImage"):
        out.append(Named("RootImage=", str(props["RootImage"]), "regular file", False))
    return out


def named_problems(n: Named) -> list[str]:
    """A missing optional path is fine only if no one but root can create it."""
    node = hostfs.Node.at(n.path)
    if not n.path.startswith("/"):
        return [f"{n.what}{n.path} is not an absolute path"]
    problems = [] if (not node.exists and n.optional) else node.root_controlled_problems(n.kind)
    return [f"{n.what}: {p}" for p in problems + hostfs.chain_problems(n.path)]


@dataclass(frozen=True)
class Held:
    pid: int
    what: str                       # "cwd", "root", "fd 5", "map"
    path: str                       # as the kernel names it
    st: os.stat_result | None       # of the object itself (through /proc)
    error: str = ""


def _maps(pid: int) -> dict[str, str]:
    """{path: its first mapping's /proc/<pid>/map_files entry} of every mapped file."""
    data = hostfs.read_nofollow(f"/proc/{pid}/maps", MAX_MAPS)
    out: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            start, _, end = fields[0].partition("-")
            out.setdefault(fields[5], f"/proc/{pid}/map_files/{int(start, 16):x}-{int(end, 16):x}")
    return out


def held_paths(pid: int) -> list[Held]:
    """What one process holds by path. A process gone meanwhile raises OSError."""
    out = []
    for what in ("cwd", "root"):
        link = f"/proc/{pid}/{what}"
        out.append(Held(pid, what, os.readlink(link), os.stat(link)))
    for name in proc.fd_numbers(pid):
        link = f"/proc/{pid}/fd/{name}"
        try:
            target = os.readlink(link)
            st = os.stat(link)
        except FileNotFoundError:
            continue  # closed meanwhile
        if target.startswith("/") and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            out.append(Held(pid, f"fd {name}", target, st))
    for path, entry in _maps(pid).items():
        try:
            out.append(Held(pid, "map", path, os.stat(entry)))
        except FileNotFoundError:
            continue  # unmapped meanwhile
        except OSError as e:
            out.append(Held(pid, "map", path, None, f"{entry}: {e.strerror or e}"))
    return out


def held_problems(h: Held) -> list[str]:
    where = f"pid {h.pid} {h.what} {h.path!r}"
    if h.st is None:
        return [f"{where}: cannot be judged ({h.error})"]
    kind = "directory" if stat.S_ISDIR(h.st.st_mode) else "regular file"
    problems = hostfs.Node(h.path, h.st).root_controlled_problems(kind)
    here = hostfs.Node.at(h.path)
    if h.path.endswith(" (deleted)") or here.st is None or \
            (here.st.st_dev, here.st.st_ino) != (h.st.st_dev, h.st.st_ino):
        problems.append(f"{h.path} on the host is not the file held (deleted, replaced, or a "
                        "mount private to the unit): its directories cannot be judged")
    else:
        problems += hostfs.chain_problems(h.path)
    return [f"{where}: {p}" for p in problems]
