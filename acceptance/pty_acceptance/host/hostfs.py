"""Files and directories on the host, read (and written) without following links.

Ownership is judged on lstat results only; a symlink anywhere in a chain is
itself the finding. Contents are read through O_NOFOLLOW descriptors.
Not Testinfra's `host.file`: it stats through links and opens by path, so an
ownership chain the service user can relink would be judged on the link's target.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Callable

from pty_acceptance import errors

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = READ_FLAGS | os.O_NOCTTY


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

    @classmethod
    def walked(cls, path: str) -> "Node":
        """`path` (absolute) judged by fstatat in its directory, which is
        reached by the walk from / (open_dir): a link in any component above
        is PathRefused, never followed; the last one is not followed either."""
        parent, name = os.path.split(path)
        try:
            dfd = open_dir(parent or "/")
        except FileNotFoundError:
            return cls(path, None)
        try:
            return cls(path, os.stat(name, dir_fd=dfd, follow_symlinks=False))
        except FileNotFoundError:
            return cls(path, None)
        finally:
            os.close(dfd)

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


def sha256_nofollow(path: str, limit: "int | Limit | None" = None) -> str:
    """SHA-256 of a regular file opened without following a final symlink."""
    fd = os.open(path, READ_FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return sha256_fd(fd, limit, path)


def read_nofollow(path: str, limit: int) -> bytes:
    """At most limit+1 bytes (a caller that must refuse more compares)."""
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
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


# ------------------------------------------------ walking by descriptor
# A path is opened one component at a time from "/" (openat with O_NOFOLLOW):
# no component may be a link, so a link planted anywhere in a user-writable
# tree (.git/refs, a source directory, a report directory) is itself the
# finding, never followed. A file is judged by fstatat before it is opened
# (a FIFO or a device is never opened) and again by fstat after.
#
# A hard link is no symlink: it is the file itself, under a second name. With
# fs.protected_hardlinks=0 the service user can give any file, a root-only
# one included, a name in its own tree. So a caller that reads a tree the
# user can write says so (`user_writable`), and there a regular file with
# more than one link is refused (HardLink), never read: the suite cannot tell
# where its other names are. Root's own trees (the checkout, the
# virtualenv: a local git clone or an installer may hard-link files there
# legitimately) are read without that rule.


class PathRefused(errors.Refused, OSError):
    """A path that is not read: a component is a link or not a directory, or
    the file is not a regular file. The message names the path and the kind."""


class HardLink(PathRefused):
    """A regular file with more than one link, in a tree the service user can
    write (SUITE-4): not read, whatever its other names are."""


def one_link(st: os.stat_result, where: str) -> None:
    """HardLink when `st` (a regular file's) has more than one link."""
    if st.st_nlink > 1:
        raise HardLink(f"{where} is a hard link (a regular file with {st.st_nlink} links, in a tree "
                       "the service user can write: its other names may be outside the tree, a "
                       "root-only file's among them): not read")


def unread(e: OSError, path: str) -> str:
    """Why `path` was not read, in words: the refusal as it is (it names the
    path and the kind), a missing file, or the system's error."""
    if isinstance(e, NotText):
        return str(e)
    if isinstance(e, PathRefused):
        return f"{e} (not read)"
    if isinstance(e, FileNotFoundError):
        return f"{path} does not exist (or a directory above it does not)"
    return f"{path}: {e.strerror or e}"


def changed_after(st: os.stat_result, started_ns: int, steady_s: float) -> str | None:
    """'changed (ctime) +N s from the candidate's start' when `st`'s ctime (which
    only the kernel sets: every write, rename, link, chmod moves it) is not at
    least `steady_s` older than `started_ns` (realtime, nanoseconds); else None."""
    if st.st_ctime_ns > started_ns - int(steady_s * 1e9):
        return f"changed (ctime) {(st.st_ctime_ns - started_ns) / 1e9:+.3f} s from the candidate's start"
    return None


EXEC_STEADY_S = 0.05  # a ctime's coarse clock (a jiffy) and a start time's tick (10 ms), with room


def relinked_since(path: str, started_ns: int, steady_s: float, leaf: bool = True) -> list[str]:
    """The components of `path` (every directory below / down to it, then the
    file unless not `leaf`; judged by lstat through a walk that follows no
    link) whose ctime is not at least `steady_s` older than `started_ns`
    (realtime, nanoseconds: a process's start), or that cannot be read: empty
    when none changed.

    Each component's own ctime is enough: whatever was linked at a name since
    (renamed there, linked, put back, exchanged) had its ctime moved then, so
    components all older than the start are the very ones the path went
    through when the process started (server.env as systemd read it, the
    runtime as systemd exec'd it), and the file's bytes (a write moves ctime
    too) the ones read then. A directory whose name no one but root can relink
    is not judged (its own ctime moves with every entry made in it, which the
    next component's answers for): one in a directory root owns that no one
    else may write (mode and no POSIX ACL), or a root-owned one in a sticky
    directory root owns. So the service user's home in a root-owned /home is
    not judged; what the user may relink below it is."""
    out, parent, parent_path = [], None, ""
    for where in [*ancestors(path), path]:
        try:
            node = Node(where, os.lstat(where)) if where == "/" else Node.walked(where)
        except (PathRefused, OSError) as e:
            out.append(f"{where}: {e} (not followed)")
            break
        st = node.st
        if st is None:
            out.append(f"{where}: absent")
            break
        pinned = where != path and (parent is None or roots_alone(parent_path, parent, st))
        parent, parent_path = st, where
        if pinned or (where == path and not leaf):
            continue
        if late := changed_after(st, started_ns, steady_s):
            out.append(f"{where} {late}")
    return out


def roots_alone(parent_path: str, parent: os.stat_result, child: os.stat_result) -> bool:
    """No one but root can relink a name in the directory `parent` that holds `child`."""
    if parent.st_uid != 0:
        return False
    try:
        if any(a.startswith("system.posix_acl") for a in os.listxattr(parent_path, follow_symlinks=False)):
            return False
    except OSError:
        return False  # unreadable: judged
    return not parent.st_mode & 0o022 or bool(parent.st_mode & stat.S_ISVTX and child.st_uid == 0)


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISREG, "regular file"),
                       (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def parts_of(path: str, relative: bool = False) -> tuple[str, ...]:
    """The components of `path`; no "..", absolute unless `relative`."""
    p = PurePosixPath(path)
    if p.is_absolute() == relative:
        raise PathRefused(f"{path}: expected {'a relative' if relative else 'an absolute'} path")
    parts = p.parts if relative else p.parts[1:]
    if ".." in parts:
        raise PathRefused(f"{path}: a '..' component")
    return parts


def _lkind(dfd: int, name: str) -> str | None:
    try:
        return kind_of(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return None


def open_dir_at(dfd: int, name: str, where: str, create: bool = False) -> int:
    """Directory `name` in `dfd`, never through a link. With `create` a missing
    directory is made (0755, and root:root when root makes it).
    FileNotFoundError passes through."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathRefused(f"{where} is a {_lkind(dfd, name) or 'symlink'}, not a directory") from None
        raise
    try:
        os.mkdir(name, 0o755, dir_fd=dfd)
    except FileExistsError:
        pass
    fd = open_dir_at(dfd, name, where)
    try:
        if os.geteuid() == 0:
            os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o755)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir_beneath(dfd: int, rel: str | tuple[str, ...], where: str,
                     each: Callable[[int, str], None] | None = None, create: bool = False) -> int:
    """Walk `rel` (components) down from `dfd`; `where` names `dfd` in messages.
    `each(fd, path)` is called on every directory opened. The caller's `dfd`
    stays open; the returned descriptor is new."""
    parts = parts_of(rel, relative=True) if isinstance(rel, str) else rel
    fd = os.dup(dfd)
    try:
        for part in parts:
            where = os.path.join(where, part)
            nfd = open_dir_at(fd, part, where, create)
            os.close(fd)
            fd = nfd
            if each:
                each(fd, where)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_dir(path: str, each: Callable[[int, str], None] | None = None, create: bool = False) -> int:
    """Directory `path` walked from "/" without following a link in any component."""
    parts = parts_of(path)
    root = os.open("/", DIR_FLAGS)
    try:
        if each:
            each(root, "/")
        return open_dir_beneath(root, parts, "/", each, create)
    finally:
        os.close(root)


def open_file_at(dfd: int, name: str, where: str, user_writable: bool = False) -> int:
    """Regular file `name` in `dfd`: never a link, FIFO, socket or device (those
    are refused before they are opened, and the open itself is O_NOFOLLOW and
    O_NONBLOCK in case one is swapped in). `user_writable`: `dfd` is in a tree
    the service user can write, where a file with more than one link is
    refused too (HardLink), judged before the open and again after."""
    before = os.stat(name, dir_fd=dfd, follow_symlinks=False)  # FileNotFoundError passes through
    if not stat.S_ISREG(before.st_mode):
        raise PathRefused(f"{where} is a {kind_of(before.st_mode)}, not a regular file")
    if user_writable:
        one_link(before, where)
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathRefused(f"{where} is a symlink, not a regular file") from None
        raise
    st = os.fstat(fd)
    try:
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise PathRefused(f"{where} is a {kind_of(st.st_mode)} that changed while it was opened")
        if user_writable:
            one_link(st, where)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file_beneath(dfd: int, rel: str, where: str, user_writable: bool = False) -> int:
    parts = parts_of(rel, relative=True)
    parent = open_dir_beneath(dfd, parts[:-1], where)
    try:
        return open_file_at(parent, parts[-1], os.path.join(where, *parts), user_writable)
    finally:
        os.close(parent)


def open_file(path: str, user_writable: bool = False) -> int:
    """Regular file `path`, walked from "/" without following a link anywhere
    (`user_writable`: see open_file_at)."""
    parts = parts_of(path)
    if not parts:
        raise PathRefused(f"{path} is a directory, not a regular file")
    parent = open_dir("/" + "/".join(parts[:-1]))
    try:
        return open_file_at(parent, parts[-1], path, user_writable)
    finally:
        os.close(parent)


# ------------------------------------------------ bounded reads (SUITE-4)
# Every read of a file the service user may write is bounded: its size is
# taken from fstat before a byte is read (a sparse 8 TiB file is refused at
# once, never read), then at most limit+1 bytes are read (it may grow
# meanwhile). A refusal names the limit (an inventory key an operator may
# raise deliberately) and the size, never the bytes.
DEFAULT_LIMIT = 1 << 30
CHUNK = 1 << 20


@dataclass(frozen=True)
class Limit:
    """A bound and the name it is set by (an inventory key)."""
    value: int
    name: str = "the suite's built-in limit"
    unit: str = "bytes"

    def __str__(self) -> str:
        return f"{self.name} = {self.value} {self.unit}"


@dataclass(frozen=True)
class TreeBounds:
    """What a walk over a user-writable tree may read: each file, all files
    together, entries walked, directories below its top (treewalk.py)."""
    file: Limit = Limit(32 << 20)
    total: Limit = Limit(256 << 20)
    entries: Limit = Limit(50_000, unit="entries")
    depth: Limit = Limit(32, unit="levels")


TREE_BOUNDS = TreeBounds()  # the defaults, for a parameter's default


class Tally:
    """A walk's running totals against its TreeBounds; TooLarge at a bound."""

    def __init__(self, bounds: TreeBounds, top: str):
        self.bounds, self.top, self.entries, self.bytes = bounds, top, 0, 0

    def entry(self, where: str) -> None:
        self.entries += 1
        if self.entries > self.bounds.entries.value:
            raise TooLarge(f"{self.top} holds more than {self.bounds.entries} (at {where}): not walked further")

    def size(self, st: os.stat_result, where: str) -> None:
        """A file about to be read: its own bound, then the total's."""
        if st.st_size > self.bounds.file.value:
            raise TooLarge(f"{where} is {st.st_size} bytes, over {self.bounds.file}: not read")
        self.bytes += st.st_size
        if self.bytes > self.bounds.total.value:
            raise TooLarge(f"{self.top}: its files come to more than {self.bounds.total} "
                           f"(at {where}): not read further")

    def level(self, depth: int, where: str) -> None:
        """A directory `depth` levels below the top, about to be entered."""
        if depth > self.bounds.depth.value:
            raise TooLarge(f"{self.top}: {where} lies {depth} directories deep, past "
                           f"{self.bounds.depth}: not walked further")

    def checked(self, fd: int, where: str) -> int:
        """`fd` once its file fits (size from fstat, nothing read); closed on TooLarge."""
        try:
            self.size(os.fstat(fd), where)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def names(self, fd: int, where: str) -> list[str]:
        """Directory `fd`'s names, each counted; at most one past the bound is listed."""
        names = list_at(fd, self.bounds.entries.value - self.entries + 1)
        for n in names:
            self.entry(os.path.join(where, n))
        return names


def as_limit(limit: "int | Limit | None") -> Limit:
    if limit is None:
        return Limit(DEFAULT_LIMIT)
    return limit if isinstance(limit, Limit) else Limit(int(limit))


class TooLarge(PathRefused):
    """A file over its size bound: not read. The message names the bound."""


def check_size(fd: int, limit: "int | Limit | None", where: str) -> os.stat_result:
    """fstat of `fd`; TooLarge (before anything is read) when it is over `limit`."""
    lim = as_limit(limit)
    st = os.fstat(fd)
    if st.st_size > lim.value:
        raise TooLarge(f"{where} is {st.st_size} bytes, over {lim}: not read")
    return st


def _grew(where: str, lim: Limit) -> TooLarge:
    return TooLarge(f"{where} grew past {lim} while it was read")


def read_fd(fd: int, limit: "int | Limit", where: str) -> bytes:
    """At most `limit` bytes of `fd` (closed here); more is an error that says
    the size and the limit, never the bytes."""
    lim = as_limit(limit)
    try:
        check_size(fd, lim, where)
        data = b""
        while len(data) <= lim.value and (chunk := os.read(fd, min(CHUNK, lim.value + 1 - len(data)))):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > lim.value:
        raise _grew(where, lim)
    return data


def read_file(path: str, limit: "int | Limit", user_writable: bool = False) -> bytes:
    return read_fd(open_file(path, user_writable), limit, path)


class NotText(PathRefused):
    """A file read whole that is not UTF-8: the message says where, never what."""


def read_text(path: str, limit: "int | Limit", user_writable: bool = False) -> str:
    """read_file, decoded as UTF-8 (NotText names the first bad byte's offset)."""
    data = read_file(path, limit, user_writable)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotText(f"{path} is not UTF-8 (byte {e.start})") from None


def sha256_fd(fd: int, limit: "int | Limit | None" = None, where: str = "the file") -> str:
    """SHA-256 of what `fd` holds (closed here), at most `limit` bytes of it."""
    lim = as_limit(limit)
    try:
        check_size(fd, lim, where)
        h = hashlib.sha256()
        seen = 0
        while chunk := os.read(fd, CHUNK):
            seen += len(chunk)
            if seen > lim.value:
                raise _grew(where, lim)
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def sha256_file(path: str, limit: "int | Limit | None" = None, user_writable: bool = False) -> str:
    return sha256_fd(open_file(path, user_writable), limit, path)


def sha256_fd_bounded(fd: int, limit: "int | Limit", where: str) -> str:
    """SHA-256 of what `fd` holds from offset 0, at most `limit` bytes (over it
    by fstat, or grown past it while read, is TooLarge, naming the bound).
    pread: the descriptor stays open, its offset unmoved, so the caller can
    keep it and hash the very same file again."""
    lim = as_limit(limit)
    check_size(fd, lim, where)
    h = hashlib.sha256()
    done = 0
    while chunk := os.pread(fd, min(CHUNK, lim.value + 1 - done), done):
        done += len(chunk)
        if done > lim.value:
            raise _grew(where, lim)
        h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------ writing by descriptor
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_at(dfd: int, name: str, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    """A new file `name` in `dfd` (O_EXCL|O_NOFOLLOW: never an existing file or
    a link), owner and mode set by descriptor, written and fsynced."""
    fd = os.open(name, CREATE_FLAGS, 0o600, dir_fd=dfd)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_at(dfd: int, name: str, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    """`name` in `dfd` atomically replaced: a new temporary file beside it
    (create_at), renamed over it, the directory fsynced."""
    tmp = f".{name}.tmp-{os.getpid()}"
    try:
        create_at(dfd, tmp, data, mode, owner)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except FileNotFoundError:
            pass
        raise


# ------------------------------------------------ removing by descriptor (SUITE-4)
# What the suite handed to the service user is removed without ever opening an
# entry by a name the user may have swapped: each directory is opened
# O_DIRECTORY|O_NOFOLLOW|O_NONBLOCK relative to its parent's descriptor (a
# FIFO, link or device there fails the open, it never blocks or is followed),
# listed by its descriptor, every entry judged by fstatat without following;
# what is not a directory is unlinked, never opened; a directory on another
# filesystem (a mount point) is not entered. Bounded: depth, entries and passes
# over a directory the user keeps filling; at a bound it stops and says what
# is left.
REMOVE_FLAGS = DIR_FLAGS | os.O_NONBLOCK
REMOVE_ENTRIES = 500_000
REMOVE_DEPTH = 64
REMOVE_PASSES = 8


@dataclass
class Removal:
    """What a removal did: entries removed, and what it left (empty: all gone)."""
    where: str
    removed: int = 0
    left: list[str] = field(default_factory=list)
    budget: int = REMOVE_ENTRIES

    @property
    def complete(self) -> bool:
        return not self.left

    def describe(self) -> str:
        if not self.left:
            return f"{self.where}: removed"
        return f"{self.where}: not completely removed ({self.removed} entries were): " + "; ".join(self.left[:5]) \
            + (f"; and {len(self.left) - 5} more" if len(self.left) > 5 else "")


def list_at(fd: int, limit: int) -> list[str]:
    """At most `limit` names of directory `fd` (never '.' or '..'), by descriptor."""
    names: list[str] = []
    if limit <= 0:
        return names
    with os.scandir(fd) as it:  # a dup of fd, rewound when closed
        for entry in it:
            names.append(entry.name)
            if len(names) >= limit:
                break
    return names


def remove_tree_at(parent: int, name: str, where: str, ident: tuple[int, int] | None = None,
                   entries: int = REMOVE_ENTRIES, depth: int = REMOVE_DEPTH,
                   passes: int = REMOVE_PASSES) -> Removal:
    """Remove `name` in directory `parent` (a directory and all it holds, or
    whatever else is there) by descriptor; `where` names it in messages. With
    `ident` (st_dev, st_ino) only that very directory is removed: anything else
    at that name is left alone. Never raises OSError: the Removal says what
    was left. KeyboardInterrupt passes through."""
    r = Removal(where, budget=entries)
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return r
    except OSError as e:
        r.left.append(f"{where}: not looked at ({e.strerror or e})")
        return r
    if ident is not None and (not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != tuple(ident)):
        r.left.append(f"{where}: left alone, a {kind_of(st.st_mode)} of uid {st.st_uid} that is not "
                      "the directory that was made there")
        return r
    if stat.S_ISDIR(st.st_mode):
        _remove_dir(parent, name, where, st.st_dev, depth, passes, r)
    else:
        _unlink(parent, name, where, r)
    return r


def _unlink(parent: int, name: str, where: str, r: Removal) -> None:
    r.budget -= 1
    try:
        os.unlink(name, dir_fd=parent)
        r.removed += 1
    except (FileNotFoundError, IsADirectoryError):
        pass  # gone, or swapped for a directory since: the next pass sees it
    except OSError as e:
        r.left.append(f"{where}: {e.strerror or e}")


def _remove_dir(parent: int, name: str, where: str, dev: int, depth: int, passes: int,
                r: Removal) -> None:
    if depth < 0:
        r.left.append(f"{where}: past the depth bound of the removal, not entered")
        return
    try:
        fd = os.open(name, REMOVE_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link, FIFO, ... since
            _unlink(parent, name, where, r)
        else:
            r.left.append(f"{where}: not opened ({e.strerror or e})")
        return
    try:
        if os.fstat(fd).st_dev != dev:
            r.left.append(f"{where}: another filesystem is mounted there, not entered")
            return
        for _ in range(passes):
            try:
                names = list_at(fd, r.budget)
            except OSError as e:
                r.left.append(f"{where}: not listed ({e.strerror or e})")
                return
            if not names:
                if r.budget <= 0:
                    r.left.append(f"{where}: the bound of {REMOVE_ENTRIES} entries was reached")
                    return
                try:
                    os.rmdir(name, dir_fd=parent)
                    r.removed += 1
                    return
                except FileNotFoundError:
                    return
                except OSError as e:
                    if e.errno != errno.ENOTEMPTY:
                        r.left.append(f"{where}: {e.strerror or e}")
                        return
                    continue  # filled again meanwhile: one more pass
            before = (r.removed, len(r.left))
            for n in names:
                _remove_entry(fd, n, os.path.join(where, n), dev, depth, passes, r)
            if r.removed == before[0] and len(r.left) > before[1]:
                return  # nothing could be removed this pass: what is left was said
        r.left.append(f"{where}: still not empty after {passes} passes (something keeps adding entries)")
    finally:
        os.close(fd)


def _remove_entry(fd: int, n: str, where: str, dev: int, depth: int, passes: int, r: Removal) -> None:
    try:
        st = os.stat(n, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as e:
        r.left.append(f"{where}: not looked at ({e.strerror or e})")
        return
    if stat.S_ISDIR(st.st_mode):
        r.budget -= 1
        _remove_dir(fd, n, where, dev, depth - 1, passes, r)
    else:
        _unlink(fd, n, where, r)
