"""Files and directories on the host, read without following links.

Ownership is judged on lstat results only; a symlink anywhere in a chain is
itself the finding. Contents are read through O_NOFOLLOW descriptors.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True)
class Node:
    path: str
    st: os.stat_result | None  # None: does not exist

    @classmethod
    def at(cls, path: str) -> "Node":
        try:
            return cls(path, os.lstat(path))
        except FileNotFoundError:
            return cls(path, None)

    @property
    def exists(self) -> bool:
        return self.st is not None

    @property
    def kind(self) -> str:
        if self.st is None:
            return "absent"
        m = self.st.st_mode
        for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISREG, "regular file"),
                           (stat.S_ISDIR, "directory")):
            if test(m):
                return name
        return "special file"

    def describe(self) -> str:
        if self.st is None:
            return f"{self.path}: absent"
        return (f"{self.path}: {self.kind} uid={self.st.st_uid} gid={self.st.st_gid} "
                f"mode={stat.S_IMODE(self.st.st_mode):04o} nlink={self.st.st_nlink}")

    def root_controlled_problems(self, want: str, root_group: bool = False) -> list[str]:
        """Why this node is not a root-owned `want` (root:root with `root_group`)
        that neither group nor other can write."""
        if self.st is None:
            return [f"{self.path} does not exist"]
        out = []
        if self.kind != want:
            out.append(f"{self.path} is a {self.kind}, expected a {want}")
        if self.st.st_uid != 0:
            out.append(f"{self.path} is owned by uid {self.st.st_uid}, not root")
        if root_group and self.st.st_gid != 0:
            out.append(f"{self.path} has group gid {self.st.st_gid}, not root")
        mode = stat.S_IMODE(self.st.st_mode)
        if mode & 0o022 and self.kind != "symlink":
            who = " and ".join(w for bit, w in ((0o020, "group"), (0o002, "other")) if mode & bit)
            out.append(f"{self.path} is writable by {who} (mode {mode:04o})")
        return out


def ancestors(path: str, root: str = "/") -> list[str]:
    """Every directory from `root` down to the parent of `path` (root included).
    `path` is absolute as seen on the target; results are real paths under `root`."""
    rel = PurePosixPath(path).relative_to("/")
    base = PurePosixPath(root)
    out = [str(base)]
    for part in rel.parts[:-1]:
        base = base / part
        out.append(str(base))
    return out


def chain_problems(path: str, root: str = "/") -> list[str]:
    """Problems with the directory chain above `path` (absolute as seen on the
    target, evaluated under `root`), stopping at the first symlink."""
    problems = []
    for d in ancestors(path, root):
        node = Node.at(d)
        found = node.root_controlled_problems("directory")
        problems += found
        if node.kind in ("symlink", "absent") or (node.exists and node.kind != "directory"):
            break
    return problems


def under(root: str, path: str) -> str:
    """`path` (absolute) evaluated as if `root` were /."""
    if root in ("", "/"):
        return path
    return str(PurePosixPath(root) / PurePosixPath(path).relative_to("/"))


def sha256_nofollow(path: str) -> str:
    """SHA-256 of a regular file opened without following a final symlink."""
    fd = os.open(path, READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def read_nofollow(path: str, limit: int) -> bytes:
    fd = os.open(path, READ_FLAGS)
    try:
        data = b""
        while len(data) <= limit and (chunk := os.read(fd, limit + 1 - len(data))):
            data += chunk
        return data
    finally:
        os.close(fd)


def first_difference(a: bytes, b: bytes) -> int | None:
    """Offset of the first differing byte (or the shorter length), None if equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))
