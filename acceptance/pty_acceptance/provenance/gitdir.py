"""The candidate checkout's `.git` directory, read by descriptor (SCOPE-3, SUITE-4).

The service user owns the checkout, so every name below `.git` is hostile:
a file is reached from the directory descriptor without following a link in
any component, a hard-linked file is refused (its other names may be
root-only), and a refusal names the path and its kind, never a byte of
what was there. The suite reads as root, git runs as the repository's
owner: what that owner could not read the suite does not read either
(owner_can), or git would resolve HEAD otherwise. GitError is the one error of gitrev, gitconfig and
gitpacked: it names SCOPE-3.
"""

from __future__ import annotations

import os
import stat

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs

LIMIT = 1 << 20  # git's own files in .git are bytes to kilobytes; a larger one is refused


class GitError(Unreadable):
    """The candidate's revision cannot be read as git itself would resolve it."""

    requirements = ("SCOPE-3",)


def owner_can(st: os.stat_result, where: str, uid: int, bit: int) -> None:
    """GitError unless git, run as `uid` (the owner of .git: git refuses a
    repository that is not its runner's), may do with this node what the
    suite does: search a directory (`bit` S_IXUSR), read a file (S_IRUSR).
    Where it may not, git reads otherwise: a .git whose HEAD, objects/ or
    refs/ it cannot reach is no repository to it, and it takes the checkout
    itself, or a directory above it, for one. Root (uid 0) may do anything."""
    if uid == 0:
        return
    verb = "search" if bit == stat.S_IXUSR else "read"
    if st.st_uid != uid:
        raise GitError(f"{where} belongs to uid {st.st_uid}, not to uid {uid} who owns the repository "
                       f"and runs git in it: git may not {verb} it as the suite does (refused)")
    if not st.st_mode & bit:
        raise GitError(f"{where} has mode {stat.S_IMODE(st.st_mode):04o}: its owner cannot {verb} it, "
                       "so git, run as the owner, reads the repository otherwise than the suite "
                       "(refused)")


def read(gfd: int, git: str, rel: str, uid: int) -> bytes:
    """Regular file `rel` below .git (at most LIMIT bytes), which git run as
    `uid` could read too (owner_can: every directory on the way, the file);
    FileNotFoundError (the file or a directory above it is missing) passes through."""
    where = f"{git}/{rel}"
    parts = hostfs.parts_of(rel, relative=True)

    def searchable(fd: int, path: str) -> None:
        owner_can(os.fstat(fd), path, uid, stat.S_IXUSR)

    try:
        parent = hostfs.open_dir_beneath(gfd, parts[:-1], git, each=searchable)
        try:
            fd = hostfs.open_file_at(parent, parts[-1], where, user_writable=True)
        finally:
            os.close(parent)
    except FileNotFoundError:
        raise
    except hostfs.PathRefused as e:
        raise GitError(str(e)) from None
    except OSError as e:
        raise GitError(f"{where}: {e.strerror or type(e).__name__}") from None
    try:
        owner_can(os.fstat(fd), where, uid, stat.S_IRUSR)
    except BaseException:
        os.close(fd)
        raise
    try:
        return hostfs.read_fd(fd, LIMIT, where)
    except hostfs.PathRefused as e:
        raise GitError(str(e)) from None
    except OSError as e:
        raise GitError(f"{where}: {e.strerror or type(e).__name__}") from None


def _dir_beneath(gfd: int, git: str, rel: str) -> int:
    """Directory `rel` below .git opened without following a link; GitError otherwise."""
    try:
        return hostfs.open_dir_beneath(gfd, rel, git)
    except hostfs.PathRefused as e:
        raise GitError(str(e)) from None
    except OSError as e:
        raise GitError(f"{git}/{rel}: {e.strerror or type(e).__name__}") from None


def searchable(gfd: int, git: str, rel: str, uid: int) -> None:
    """Directory `rel` below .git, reached without links, is one git run as
    `uid` can search (owner_can); GitError otherwise."""
    fd = _dir_beneath(gfd, git, rel)
    try:
        owner_can(os.fstat(fd), f"{git}/{rel}", uid, stat.S_IXUSR)
    finally:
        os.close(fd)


def kind(gfd: int, git: str, rel: str) -> str | None:
    """What `rel` below .git is ("regular file", "directory", "symlink", ...)
    without following it, or None when it (or a directory above it) is
    absent. A link among the directories above it is refused: git would
    follow it."""
    parts = hostfs.parts_of(rel, relative=True)
    try:
        parent = hostfs.open_dir_beneath(gfd, parts[:-1], git)
    except FileNotFoundError:
        return None
    except hostfs.PathRefused as e:
        raise GitError(str(e)) from None
    except OSError as e:
        raise GitError(f"{git}/{rel}: {e.strerror or type(e).__name__}") from None
    try:
        return hostfs.kind_of(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise GitError(f"{git}/{rel}: {e.strerror or type(e).__name__}") from None
    finally:
        os.close(parent)


def has_entries(gfd: int, git: str, rel: str) -> bool:
    """Whether directory `rel` below .git (reached without links) holds anything."""
    fd = _dir_beneath(gfd, git, rel)
    try:
        return bool(hostfs.list_at(fd, 1))
    finally:
        os.close(fd)
