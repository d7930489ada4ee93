"""The candidate's Node runtime, identified statically (RUNTIME-1).

The binary is never executed. It lies in the service user's tree: it is
reached by hostfs's walk from / (a link in any component is refused, never
followed; a FIFO is never opened; a hard link is refused), and one
streaming pass over that descriptor (1 MiB chunks, the binary is ~150 MB)
yields:

- its SHA-256;
- the SEA fuse: Node carries the sentinel ``NODE_SEA_FUSE_<hex>`` followed by
  ``:0`` in a plain node binary; postject flips it to ``:1`` when a
  single-executable application blob is injected. Exactly one sentinel is
  expected (postject itself refuses a binary with several); none means it is
  not a Node binary;
- its Node version, from the release URL Node embeds
  (``https://nodejs.org/download/release/vX.Y.Z/``): every occurrence must name
  one version, several distinct versions are ambiguous.

Matches are found across chunk boundaries: every match is taken only once
enough bytes follow its start to hold the longest possible match, the rest of
the buffer is carried into the next round.

And the live side: the process that listens on a TCP port, its uids, its start
time and whether /proc/<pid>/exe is the very file (st_dev, st_ino) that the
inventory's path names (that path is walked from / and never followed).
The candidate unit file is read the same way (unit_file_text).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from typing import cast

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs, proc

SENTINEL = b"NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2"
RELEASE_PREFIX = b"https://nodejs.org/download/release/"
CHUNK = 1 << 20
_PATTERN = re.compile(
    re.escape(SENTINEL) + rb"(?P<fuse>.{0,2})"
    + rb"|" + re.escape(RELEASE_PREFIX) + rb"(?P<version>v\d{1,6}\.\d{1,6}\.\d{1,6})/",
    re.DOTALL)
# Longest possible match is well below this; a match starting at least this
# far before the end of the buffer is complete.
_HOLD = 128

FUSED, PLAIN, NOT_NODE = "fused", "plain", "absent"


@dataclass(frozen=True)
class Identity:
    path: str
    size: int
    sha256: str
    dev: int
    ino: int
    fuse_states: tuple[str, ...]   # per sentinel occurrence: "1", "0", or repr of what followed
    fuse_offsets: tuple[int, ...]
    versions: tuple[str, ...]      # distinct release-URL versions, in first-seen order
    version_count: int             # occurrences of the release URL

    @property
    def fuse(self) -> str:
        """fused (SEA), plain (node, no SEA), absent (not node), or a problem text."""
        if not self.fuse_states:
            return NOT_NODE
        if len(self.fuse_states) > 1:
            return f"ambiguous: {len(self.fuse_states)} fuse sentinels at {list(self.fuse_offsets)}"
        s = self.fuse_states[0]
        return {"1": FUSED, "0": PLAIN}.get(s, f"unknown fuse state {s} at {self.fuse_offsets[0]}")

    @property
    def sea(self) -> bool:
        return self.fuse == FUSED

    @property
    def version(self) -> str | None:
        """The one embedded Node version, None when absent or ambiguous."""
        return self.versions[0] if len(self.versions) == 1 else None

    def version_problem(self) -> str | None:
        if not self.versions:
            return "no embedded Node release URL (https://nodejs.org/download/release/vX.Y.Z/)"
        if len(self.versions) > 1:
            return f"ambiguous: several embedded Node versions {list(self.versions)}"
        return None

    def describe(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256,
                "dev:ino": f"{self.dev}:{self.ino}", "fuse": self.fuse,
                "version": self.version or self.version_problem(),
                "release URL occurrences": self.version_count}


class RuntimeUnreadable(Unreadable):
    """The binary could not be read as a regular file without following links."""


class UnitFileError(Unreadable):
    """The candidate unit file could not be read safely, or is not UTF-8."""


def _open_user_file(path: str, error: type[Unreadable]) -> int:
    """A file of the service user's tree, by hostfs's walk from / (no link
    followed in any component, no FIFO or device opened, no hard link);
    `error` names why not."""
    try:
        return hostfs.open_file(path, user_writable=True)
    except OSError as e:
        raise error(hostfs.unread(e, path)) from None


def identify(path: str, chunk: int = CHUNK, limit: hostfs.Limit | int | None = None) -> Identity:
    """Stream the file once: hash, fuse sentinel(s), release-URL versions.
    At most `limit` bytes (the inventory's limits.runtime_bytes): its size is
    taken from fstat first, a larger file is refused unread (SUITE-4)."""
    lim = hostfs.as_limit(limit)
    fd = _open_user_file(path, RuntimeUnreadable)
    try:
        st = os.fstat(fd)
        if st.st_size > lim.value:
            raise RuntimeUnreadable(f"{path} is {st.st_size} bytes, over {lim}: not read")
        h = hashlib.sha256()
        states: list[str] = []
        offsets: list[int] = []
        versions: list[str] = []
        vcount = 0
        buf = b""
        base = 0      # file offset of buf[0]
        size = 0
        eof = False
        while not eof:
            data = os.read(fd, chunk)
            if data:
                h.update(data)
                size += len(data)
                if size > lim.value:
                    raise RuntimeUnreadable(f"{path} grew past {lim} while it was read")
                buf += data
            else:
                eof = True
            # matches starting before `limit` are complete in buf
            limit = len(buf) if eof else len(buf) - _HOLD
            if limit <= 0:
                continue
            pos = 0
            while True:
                m = _PATTERN.search(buf, pos)
                if m is None or m.start() >= limit:
                    break
                if m.group("version") is not None:
                    vcount += 1
                    v = m.group("version").decode("ascii")
                    if v not in versions:
                        versions.append(v)
                    pos = m.end()
                else:
                    fuse = m.group("fuse")
                    if len(fuse) == 2 and fuse[:1] == b":" and fuse[1:] in (b"0", b"1"):
                        states.append(fuse[1:].decode())
                    else:
                        states.append(repr(fuse))
                    offsets.append(base + m.start())
                    pos = m.start() + len(SENTINEL)
            # carry over everything from the first byte not yet judged
            keep = max(pos, limit)
            base += keep
            buf = buf[keep:]
        return Identity(path, size, h.hexdigest(), st.st_dev, st.st_ino,
                        tuple(states), tuple(offsets), tuple(versions), vcount)
    except OSError as e:
        raise RuntimeUnreadable(f"{path}: read: {e.strerror}") from None
    finally:
        os.close(fd)


def major(version: str) -> int | None:
    m = re.match(r"^v(\d+)\.", version or "")
    return int(m.group(1)) if m else None


# -- the live side -------------------------------------------------------------

@dataclass(frozen=True)
class Listener:
    port: int
    pids: tuple[int | None, ...]          # every socket listening on the port
    addresses: tuple[str, ...]
    pid: int | None = None                # the one owner, when there is exactly one
    uids: tuple[int, ...] | None = None   # real, effective, saved
    gids: tuple[int, ...] | None = None
    create_time: float | None = None
    exe_link: str | None = None           # readlink /proc/<pid>/exe, for evidence only
    exe_dev_ino: tuple[int, int] | None = None
    cmdline: tuple[str, ...] = field(default=())
    problem: str | None = None

    def describe(self) -> dict:
        return {"port": self.port, "addresses": list(self.addresses), "pids": list(self.pids),
                "pid": self.pid, "uids": self.uids, "gids": self.gids,
                "start time": self.create_time, "exe": self.exe_link,
                "exe dev:ino": None if self.exe_dev_ino is None else "%d:%d" % self.exe_dev_ino,
                "argv": [a[:200] for a in self.cmdline[:8]], "problem": self.problem}


def listener(port: int) -> Listener:
    """The single process listening on TCP `port` (any address, v4 or v6).
    Not Testinfra's `host.socket`: it names no owning process, and the owner
    (pid, start time, executable) is what is judged before a credential is sent."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError) as e:
        return Listener(port, (), (), problem=f"cannot list TCP sockets: {e}")
    found = [c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    pids = tuple(sorted({c.pid for c in found}, key=lambda p: -1 if p is None else p))
    addrs = tuple(sorted({f"{c.laddr.ip}:{c.laddr.port}" for c in found if c.laddr}))  # all have one
    if not found:
        return Listener(port, pids, addrs, problem=f"nothing listens on TCP port {port}")
    if None in pids:
        return Listener(port, pids, addrs, problem=f"a socket on port {port} has no visible owner")
    if len(pids) != 1:
        return Listener(port, pids, addrs, problem=f"several processes listen on port {port}: {list(pids)}")
    pid = cast(int, pids[0])  # None in pids was refused above
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            uids, gids, ctime = tuple(p.uids()), tuple(p.gids()), p.create_time()
            cmd = tuple(p.cmdline())
    except psutil.Error as e:
        return Listener(port, pids, addrs, pid=pid, problem=f"cannot read process {pid}: {e}")
    exe = f"/proc/{pid}/exe"
    try:
        link, exe_id = proc.exe(pid), proc.exe_file(pid)
    except OSError as e:
        return Listener(port, pids, addrs, pid, uids, gids, ctime, cmdline=cmd,
                        problem=f"cannot read {exe}: {e.strerror}")
    # the process must still be the one we listed (pid reuse)
    try:
        if proc.create_time(pid) != ctime:
            return Listener(port, pids, addrs, pid, problem=f"process {pid} was replaced while read")
    except psutil.Error:
        return Listener(port, pids, addrs, pid, problem=f"process {pid} exited while read")
    return Listener(port, pids, addrs, pid, uids, gids, ctime, link, exe_id, cmd)


def same_file(path: str, dev_ino: tuple[int, int] | None) -> tuple[bool, str]:
    """Whether `path` is the file (st_dev, st_ino): its directory walked from
    / (no link followed in any component), the file itself judged by fstatat
    without following it. Nothing is opened."""
    parent, name = os.path.split(path)
    try:
        dfd = hostfs.open_dir(parent or "/")
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(dfd)
    except hostfs.PathRefused as e:
        return False, f"{e} (never followed)"
    except OSError as e:
        return False, f"{path}: lstat: {e.strerror or e}"
    if stat.S_ISLNK(st.st_mode):
        return False, f"{path} is a symlink (never followed)"
    if not stat.S_ISREG(st.st_mode):
        return False, f"{path} is not a regular file"
    if dev_ino is None:
        return False, "no executable identity to compare"
    mine = (st.st_dev, st.st_ino)
    if mine != tuple(dev_ino):
        return False, f"{path} is {mine[0]}:{mine[1]}, the process runs {dev_ino[0]}:{dev_ino[1]}"
    return True, f"{path} is {mine[0]}:{mine[1]}, the process's executable"


# -- the candidate unit's ExecStart -------------------------------------------

EXEC_PREFIXES = "-@:+!"
MAX_UNIT_FILE = 256 * 1024
UNIT_FILE_LIMIT = hostfs.Limit(MAX_UNIT_FILE, "the suite's bound on a unit file")


def unit_file_text(path: str) -> str:
    """The candidate unit file (the service user's): walked from / without
    following a link in any component, never a FIFO or a hard link, at most
    UNIT_FILE_LIMIT, UTF-8; UnitFileError says why not (never its bytes)."""
    try:
        return hostfs.read_text(path, UNIT_FILE_LIMIT, user_writable=True)
    except OSError as e:
        raise UnitFileError(hostfs.unread(e, path)) from None


def unit_lines(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file, continuation lines joined,
    comments and blank lines dropped."""
    out, section, pending = [], "", ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if pending:
            line = pending + " " + line.lstrip() if line.lstrip() else pending
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1]
            continue
        key, sep, value = s.partition("=")
        if sep:
            out.append((section, key.strip(), value.strip()))
    if pending:
        s = pending.strip()
        key, sep, value = s.partition("=")
        if sep and s[0] not in "#;":
            out.append((section, key.strip(), value.strip()))
    return out


def exec_start_program(text: str) -> tuple[str | None, str]:
    """The program the single effective [Service] ExecStart= runs (first word,
    unquoted, systemd prefixes stripped), or (None, why not)."""
    import shlex

    values: list[str] = []
    for section, key, value in unit_lines(text):
        if section == "Service" and key == "ExecStart":
            if value == "":
                values = []  # an empty assignment resets the list
            else:
                values.append(value)
    if not values:
        return None, "no ExecStart= in [Service]"
    if len(values) > 1:
        return None, f"ExecStart= is set {len(values)} times"
    value = values[0]
    # systemd reads the prefixes off the first word before unquoting it
    stripped = value.lstrip(EXEC_PREFIXES)
    prefixes = value[:len(value) - len(stripped)]
    try:
        words = shlex.split(stripped, comments=False, posix=True)
    except ValueError as e:
        return None, f"ExecStart= cannot be split ({e}): {value[:200]!r}"
    if not words:
        return None, f"ExecStart= names no program: {value[:200]!r}"
    return words[0], f"ExecStart={value[:300]} (prefixes {prefixes!r})"
