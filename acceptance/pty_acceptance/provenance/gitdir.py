"""The candidate checkout's `.git` directory, read by descriptor (SCOPE-3, SUITE-4).

The service user owns the checkout, so every name below `.git` is hostile:
a file is reached from the directory descriptor without following a link in
any component, a hard-linked file is refused (its other names may be
root-only), and a refusal names the path and its kind, never a byte of
what was there. GitError is the one error of gitrev, gitconfig and
gitpacked: it names SCOPE-3.
"""

from __future__ import annotations

import os

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs

LIMIT = 1 << 20  # git's own files in .git are bytes to kilobytes; a larger one is refused


class GitError(Unreadable):
    """The candidate's revision cannot be read as git itself would resolve it."""

    requirements = ("SCOPE-3",)


def read(gfd: int, git: str, rel: str) -> bytes:
    """Regular file `rel` below .git (at most LIMIT bytes); FileNotFoundError
    (the file or a directory above it is missing) passes through."""
    where = f"{git}/{rel}"
    try:
        return hostfs.read_fd(hostfs.open_file_beneath(gfd, rel, git, user_writable=True), LIMIT, where)
    except FileNotFoundError:
        raise
    except hostfs.PathRefused as e:
        raise GitError(str(e)) from None
    except OSError as e:
        raise GitError(f"{where}: {e.strerror or type(e).__name__}") from None


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
    try:
        fd = hostfs.open_dir_beneath(gfd, rel, git)
    except hostfs.PathRefused as e:
        raise GitError(str(e)) from None
    except OSError as e:
        raise GitError(f"{git}/{rel}: {e.strerror or type(e).__name__}") from None
    try:
        return bool(hostfs.list_at(fd, 1))
    finally:
        os.close(fd)
