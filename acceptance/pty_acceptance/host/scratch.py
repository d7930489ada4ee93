"""The run's one scratch area, under a root-owned parent no one else may write (SUITE-4, SUITE-5).

Every temporary directory the suite makes (the workspaces and build
directories it hands to the service user, the agent's staged copy, trace
directories, the JUnit writer's private directory, test modules' own) is made
inside one directory per run, ``<tmp>/pty-acceptance-run-XXXXXXXX``: made by
mkdtemp, reached from "/" without a link, set root:root 0755 on its
descriptor. The user may pass through it and list it but not rename, replace
or add an entry there, so a directory the suite made stays the one it made
(0755, not 0711: a session unit with PrivateTmp= sees its working directory
outside its own /tmp, and getcwd() then finds its path by reading each parent
directory, which 0711 refuses). In sticky /tmp itself the owner of a
directory (the user, once it is handed over) may rename it and put a FIFO or
a link in its place, and a cleanup by name would then block on the FIFO or
follow the link. Directories are made with mkdirat
in the scratch root's descriptor, handed over (fchown, fchmod) on their own
descriptor and removed by descriptor (hostfs.remove_tree_at), never reopened
by name.

The scratch root is recorded in the run directory the moment it exists
(``scratch-<hex>.json``: path, device, inode; rundir.py). A run removes it
and the record at its end (startup.py, before the lock is released); after a
SIGKILL the next run, holding the lock, removes it first (rundir.clean_first)
if lstat still finds that same root-owned directory there. A removal that
stops at its bound is kept: the gate blocks the marker naming it
(``unfinished``), and the record stays for the next run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import stat
import tempfile
import threading
from dataclasses import dataclass

from pty_acceptance.errors import Refused
from pty_acceptance.host import hostfs, rundir, terminal

PREFIX = "pty-acceptance-run-"
MODE = 0o755


class ScratchError(Refused, OSError):
    """The scratch area cannot be made or used safely."""


@dataclass
class Root:
    path: str
    fd: int
    ident: tuple[int, int]
    run_dir: str  # where its record is
    record: str   # the record's name there


_root: Root | None = None
_lock = threading.Lock()
_unfinished: list[str] = []


def _parent_problem(st: os.stat_result, where: str) -> str | None:
    """A temporary directory the user could rename in: not root's, or writable
    by others without the sticky bit."""
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        return f"{where} is a {hostfs.kind_of(st.st_mode)} of uid {st.st_uid}, not root's directory"
    if stat.S_IMODE(st.st_mode) & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"{where} is writable by group/other without the sticky bit"
    return None


def _make_root() -> Root:
    base = os.path.normpath(tempfile.gettempdir())
    try:
        pfd = hostfs.open_dir(base)
    except OSError as e:
        raise ScratchError(f"SUITE-4: the temporary directory {base} is not reachable without a link: "
                           f"{e.strerror or e}") from None
    try:
        if problem := _parent_problem(os.fstat(pfd), base):
            raise ScratchError(f"SUITE-4: no scratch area: {problem}")
        path = tempfile.mkdtemp(prefix=PREFIX, dir=base)  # mkdir 0700: a new name, root's
        name = os.path.basename(path)
        fd = hostfs.open_dir_at(pfd, name, path)
    finally:
        os.close(pfd)
    st = os.fstat(fd)
    root = Root(path, fd, (st.st_dev, st.st_ino), rundir.current(), "")
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, MODE)
        root.record = rundir.record_scratch(path, root.ident)
    except BaseException:
        _remove_root(root)
        raise
    return root


def _remove_root(r: Root) -> hostfs.Removal:
    """The scratch root itself removed, by its parent's descriptor (closed here)."""
    try:
        parent = hostfs.open_dir(os.path.dirname(r.path))
    except OSError as e:
        done = hostfs.Removal(r.path)
        done.left.append(f"its directory is not reachable without a link ({e.strerror or e})")
        return done
    finally:
        os.close(r.fd)
    try:
        return hostfs.remove_tree_at(parent, os.path.basename(r.path), r.path, ident=r.ident)
    finally:
        os.close(parent)


def root() -> Root:
    """The scratch root of this process, made on first use."""
    global _root
    with _lock:
        if _root is None:
            _root = _make_root()
        return _root


def _renewed(gone: Root) -> Root:
    """A scratch root that vanished replaced by a new one (its record dropped)."""
    global _root
    with _lock:
        if _root is gone:
            _root = None
            os.close(gone.fd)
            rundir.drop_record(gone.run_dir, gone.record)
    return root()


def made(prefix: str, owner: tuple[int, int] | None = None, mode: int = 0o700) -> tuple[str, tuple[int, int]]:
    """A new directory `prefix`XXXXXXXX in the scratch root, owner and mode set
    on its descriptor: (its path, (st_dev, st_ino))."""
    r = root()
    for _ in range(100):
        name = prefix + secrets.token_hex(4)
        try:
            os.mkdir(name, 0o700, dir_fd=r.fd)
            break
        except FileExistsError:
            continue
        except FileNotFoundError:  # the root itself was removed (by another process as root)
            r = _renewed(r)
    else:
        raise ScratchError(f"no free name {prefix}* in {r.path}")
    path = os.path.join(r.path, name)
    fd = hostfs.open_dir_at(r.fd, name, path)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        hostfs.remove_tree_at(r.fd, name, path)
        raise
    os.close(fd)
    return path, (st.st_dev, st.st_ino)


def make(prefix: str, owner: tuple[int, int] | None = None, mode: int = 0o700) -> str:
    return made(prefix, owner, mode)[0]


def remove(path: str | None) -> hostfs.Removal | None:
    """Remove a directory `make` returned, by the scratch root's descriptor.
    Never raises for what it finds there: a removal that stops at a bound is
    kept for the gate (`unfinished`) and returned."""
    r = _root
    if not path or r is None:  # no scratch area (any more): nothing of it is left
        return None
    parent, name = os.path.split(path)
    if parent != r.path or not name:
        raise ScratchError(f"{path} is not a directory of this run's scratch area")
    done = hostfs.remove_tree_at(r.fd, name, path)
    if not done.complete:
        _unfinished.append(terminal.escape(done.describe()))
    return done


@contextlib.contextmanager
def directory(prefix: str, owner: tuple[int, int] | None = None, mode: int = 0o700):
    """A scratch directory for the `with` block (its path), removed after it."""
    path = make(prefix, owner, mode)
    try:
        yield path
    finally:
        remove(path)


def unfinished() -> list[str]:
    """Removals of this run that stopped at a bound, in words (escaped)."""
    return list(_unfinished)


def current_ident() -> tuple[int, int] | None:
    return _root.ident if _root is not None else None


def finish() -> list[str]:
    """The scratch root removed and its record dropped (the end of a run).
    Returns what could not be removed (escaped); its record then stays, so
    that the next run removes it first."""
    global _root
    with _lock:
        r, _root = _root, None
        _unfinished.clear()
    if r is None:
        return []
    done = _remove_root(r)
    if not done.complete:
        return [terminal.escape(done.describe())]
    rundir.drop_record(r.run_dir, r.record)
    return []


def _at_exit() -> None:
    """A process that made a scratch area outside a run (a library call) removes it too."""
    try:
        finish()
    except Exception:  # noqa: BLE001 - at exit nothing may raise; the next run removes it
        pass


atexit.register(_at_exit)
