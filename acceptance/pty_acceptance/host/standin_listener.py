"""Stand-in listeners for sockets a host may lack (UNIT-7), made as root in
places the service user may write (SUITE-4: /run/user/<uid> is the user's).

Nothing here changes ownership or mode by path. The directory chain is walked
from "/" by descriptor, never through a link (a link anywhere is refused, not
followed); a missing directory is made with mkdirat in its parent's
descriptor and handed over with fchown/fchmod on its own descriptor. The
socket is bound by its parent's descriptor (bind never follows a link in the
last component: EADDRINUSE), then opened O_PATH|O_NOFOLLOW and set up through
that descriptor only if it is a socket the suite owns: a name the user swapped
for a link, or for a socket of its own, is refused, and no file it points to
is touched. Removal is by descriptor too, and only of the very inodes made here.
Each thing made is recorded in the run directory's ledger the moment it
exists (rundir.Ledger), so that after a SIGKILL the next run removes it first
(SUITE-5), again only if it is still that very inode.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

from pty_acceptance.errors import Refused
from pty_acceptance.host import hostfs, rundir

O_PATH = getattr(os, "O_PATH", 0o10000000)


class StandinError(Refused):
    """A stand-in could not be made safely; nothing was followed or changed."""


def _proc_fd(fd: int, name: str = "") -> str:
    """A path that reaches what `fd` holds (or `name` in it) and nothing else."""
    return f"/proc/self/fd/{fd}" + (f"/{name}" if name else "")


def _same(dfd: int, name: str, ident: tuple[int, int]) -> bool:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == ident


def _made_dir(dfd: int, name: str, where: str, owner: tuple[int, int], mode: int) -> int:
    """A new directory `name` in `dfd`: made, opened without following a link,
    owner and mode set on its descriptor."""
    os.mkdir(name, 0o700, dir_fd=dfd)
    fd = hostfs.open_dir_at(dfd, name, where)
    try:
        os.fchown(fd, *owner)
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _own_socket(dfd: int, name: str, where: str, owner: tuple[int, int], mode: int) -> tuple[int, int]:
    """Owner and mode of the socket just bound at `name`, set through an O_PATH
    descriptor that holds that socket (never a link, never the user's)."""
    try:
        fd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        raise StandinError(f"{where} vanished after bind: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise StandinError(f"{where} was swapped for a {hostfs.kind_of(st.st_mode)} of uid "
                               f"{st.st_uid} after bind; not followed, nothing changed")
        os.chown(_proc_fd(fd), *owner)   # the inode the descriptor holds, not a name
        os.chmod(_proc_fd(fd), mode)
        return st.st_dev, st.st_ino
    finally:
        os.close(fd)


@contextlib.contextmanager
def standin_listener(path: str, uid: int = 0, gid: int = 0, mode: int = 0o666,
                     dir_uid: int = 0, dir_gid: int = 0, dir_mode: int = 0o755):
    """A listening UNIX socket at `path` unless something is already there.

    Yields (path, created: bool). Directories and the socket made here are
    removed afterwards, deepest first; what existed before is never touched.
    Raises StandinError (a link in the path, a swapped socket)."""
    try:
        parts = hostfs.parts_of(path)
    except hostfs.PathRefused as e:
        raise StandinError(str(e)) from None
    if not parts:
        raise StandinError(f"{path}: no socket name")
    made: list[tuple[int, str, str, tuple[int, int]]] = []  # (parent fd, name, path, inode)
    sock = None
    bound: tuple[int, int] | None = None
    ledger = rundir.Ledger().open()
    fd = os.open("/", hostfs.DIR_FLAGS)
    where = "/"
    try:
        for part in parts[:-1]:
            where = os.path.join(where, part)
            try:
                try:
                    nfd = hostfs.open_dir_at(fd, part, where)
                except FileNotFoundError:
                    nfd = _made_dir(fd, part, where, (dir_uid, dir_gid), dir_mode)
                    st = os.fstat(nfd)
                    made.append((os.dup(fd), part, where, (st.st_dev, st.st_ino)))
                    ledger.made_dir(where, (st.st_dev, st.st_ino), dir_uid)
            except hostfs.PathRefused as e:
                raise StandinError(f"{e}; not followed") from None
            os.close(fd)
            fd = nfd
        name = parts[-1]
        if os.path.lexists(_proc_fd(fd, name)):
            yield path, False
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.bind(_proc_fd(fd, name))
        bound = _own_socket(fd, name, path, (uid, gid), mode)
        ledger.made_socket(path, bound, uid)
        sock.listen(16)
        yield path, True
    finally:
        if sock is not None:
            sock.close()
        if bound is not None and _same(fd, parts[-1], bound):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(parts[-1], dir_fd=fd)
        os.close(fd)
        for parent, name, where, ident in reversed(made):
            hostfs.remove_tree_at(parent, name, where, ident=ident)  # only that very directory
            os.close(parent)
        ledger.close()
