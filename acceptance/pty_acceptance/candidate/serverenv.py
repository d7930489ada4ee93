"""server.env, read safely (CUT-3) and used for the candidate's Basic auth
and, as the runtime's only environment, by RUNTIME-2.

The path is walked from / without following a link in any component
(hostfs: a directory of the path made a link is itself the finding); the file
is judged by lstat (a symlink is itself the finding, and so is a hard link:
a file with more than one link, whose other names may be root's) and read through an
O_NOFOLLOW descriptor whose fstat must be the same regular file, at most
MAX_SIZE bytes. Lines are read the way systemd's EnvironmentFile= reads the
simple cases: blank lines and lines starting with ``#`` or ``;`` are ignored,
leading whitespace is dropped, the last assignment of a key wins, a value
wrapped in matching single or double quotes is unquoted.

The password never appears in evidence, a message or a repr: it is held by a
Secret whose str/repr is ``<redacted>``; only ``reveal()`` gives it out, for
the API client.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from pty_acceptance.host import hostfs

KEY = "OPENCODE_PASSWORD"
MAX_SIZE = 64 * 1024
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__

    def __reduce__(self):  # never pickled / copied out by accident
        raise TypeError("a Secret cannot be serialised")


@dataclass(frozen=True)
class ServerEnv:
    path: str
    kind: str                    # "regular file", "symlink", "absent", ...
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    assignments: int = 0         # how many OPENCODE_PASSWORD= lines
    has_password: bool = False   # the last one has a non-empty value
    problem: str | None = None   # why the content could not be judged
    password: Secret | None = field(default=None, repr=False, compare=False)
    content: Secret | None = field(default=None, repr=False, compare=False)  # the whole file

    def describe(self) -> str:
        """Evidence: never the password, never any line's value."""
        if self.mode is None:
            head = f"{self.path}: {self.kind}"
        else:
            head = (f"{self.path}: {self.kind} uid={self.uid} gid={self.gid} "
                    f"mode={self.mode:04o} size={self.size}")
        tail = (f", {KEY}= lines: {self.assignments}, "
                f"non-empty value: {'yes' if self.has_password else 'no'}")
        if self.problem:
            tail += f", content not judged: {self.problem}"
        return head + tail


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISREG, "regular file"),
                       (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def parse(data: bytes) -> tuple[int, Secret | None, str | None]:
    """(number of KEY= assignments, the last value or None, problem)."""
    count, last, problem = 0, None, None
    for raw in data.split(b"\n"):
        line = raw.rstrip(b"\r").lstrip(b" \t")
        if not line.startswith(KEY.encode() + b"="):
            continue
        count += 1
        value = line[len(KEY) + 1:].rstrip(b" \t")
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            last, problem = None, f"the last {KEY}= value is not UTF-8"
            continue
        if "\0" in text:
            last, problem = None, f"the last {KEY}= value holds a NUL byte"
            continue
        last, problem = Secret(_unquote(text)), None
    return count, last, problem


def read(path: str) -> ServerEnv:
    """Its directory walked from / (no link followed), then lstat of the file
    and an O_NOFOLLOW read of the same regular file, bounded."""
    parent, name = os.path.split(path)
    try:
        dfd = hostfs.open_dir(parent or "/")
    except FileNotFoundError:
        return ServerEnv(path, "absent")
    except hostfs.PathRefused as e:
        return ServerEnv(path, "unreadable", problem=f"{e} (not followed)")
    except OSError as e:
        return ServerEnv(path, "unreadable", problem=f"{parent}: {e.strerror or e}")
    try:
        return _read_at(dfd, name, path)
    finally:
        os.close(dfd)


def _read_at(dfd: int, name: str, path: str) -> ServerEnv:
    try:
        lst = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return ServerEnv(path, "absent")
    except OSError as e:
        return ServerEnv(path, "unreadable", problem=f"lstat: {e.strerror}")
    base: dict[str, Any] = dict(path=path, kind=_kind(lst.st_mode), mode=stat.S_IMODE(lst.st_mode),
                uid=lst.st_uid, gid=lst.st_gid, size=lst.st_size)
    if not stat.S_ISREG(lst.st_mode):
        return ServerEnv(**base, problem="not a regular file, not opened")
    if lst.st_nlink > 1:  # the service user's tree: its other names may be root's (hostfs.one_link)
        return ServerEnv(**base, problem=f"a hard link ({lst.st_nlink} links), not opened")
    if lst.st_size > MAX_SIZE:
        return ServerEnv(**base, problem=f"larger than {MAX_SIZE} bytes, not read")
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)
    except OSError as e:
        why = "a symlink appeared" if e.errno == errno.ELOOP else e.strerror
        return ServerEnv(**base, problem=f"open: {why}")
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino) or not stat.S_ISREG(st.st_mode):
            return ServerEnv(**base, problem="the file changed between lstat and open")
        if st.st_nlink > 1:
            return ServerEnv(**base, problem=f"a hard link ({st.st_nlink} links) since lstat, not read")
        chunks, total = [], 0
        while total <= MAX_SIZE:
            chunk = os.read(fd, MAX_SIZE + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        return ServerEnv(**base, problem=f"read: {e.strerror}")
    finally:
        os.close(fd)
    if total > MAX_SIZE:
        return ServerEnv(**base, problem=f"grew past {MAX_SIZE} bytes while read")
    data = b"".join(chunks)
    # The descriptor's view is what was read: report its metadata.
    base.update(mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid, size=len(data))
    count, secret, problem = parse(data)
    return ServerEnv(**base, assignments=count, has_password=bool(secret), problem=problem,
                     password=secret if secret else None,
                     content=Secret(data.decode("utf-8", "surrogateescape")))


def problems(env: ServerEnv, uid: int, gid: int | None = None, who: str = "") -> list[str]:
    """CUT-3's findings on server.env (never its content): a regular file, mode
    exactly 0600, owned by `uid` (and group `gid` when given), holding a
    non-empty OPENCODE_PASSWORD=."""
    if env.kind != "regular file":
        kind = env.kind if env.kind in ("absent", "unreadable") else "a " + env.kind
        why = f" ({env.problem})" if env.kind == "unreadable" and env.problem else ""
        return [f"it is {kind}{why}, expected a regular file"]
    out = []
    if env.mode != 0o600:
        out.append(f"mode {env.mode:04o}, expected exactly 0600")
    if env.uid != uid:
        out.append(f"owned by uid {env.uid}, expected {uid}{who}")
    if gid is not None and env.gid != gid:
        out.append(f"group gid {env.gid}, expected {gid}")
    if env.problem:
        out.append(f"content not read: {env.problem}")
    elif not env.assignments:
        out.append("no OPENCODE_PASSWORD= line")
    elif not env.has_password:
        out.append("OPENCODE_PASSWORD= has an empty value")
    return out
