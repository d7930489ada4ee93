"""Walking a tree the service user can write, by descriptor (SUITE-4).

Depth first and iterative: a stack of open directories, one per level, never
recursion, so that a chain of directories as deep as the user cares to make
meets the walk's depth bound (hostfs.TreeBounds.depth: the inventory's
limits.tree_depth), never Python's recursion limit or the process's
descriptor limit, and is refused naming that bound. Every name listed counts
against the entries bound (hostfs.Tally.names); every entry is judged by
fstatat without following a link, and a directory is entered only by
hostfs.open_dir_at (O_NOFOLLOW), so a link or FIFO put in a directory's
place is refused, never followed or opened.
"""

from __future__ import annotations

import os
import stat
from typing import Callable

from pty_acceptance.host import hostfs

# visit(directory's descriptor, name, path, lstat) -> enter it (a directory only)
Visit = Callable[[int, str, str, os.stat_result], bool]


def walk(top: int, where: str, tally: hostfs.Tally, visit: Visit,
         leave: Callable[[str], None] | None = None) -> None:
    """Every entry below directory `top` (open; not closed here; `where` its
    path), in name order: `visit` each; a directory it returns True for is
    entered, and `leave(path)` is called once all below it was visited.
    Raises hostfs.TooLarge at a bound, hostfs.PathRefused for an entry swapped
    for a link since it was listed, OSError as the reads raise it."""
    frames: list[tuple[int, str, int, list[str]]] = [(top, where, 0, sorted(tally.names(top, where), reverse=True))]
    try:
        while frames:
            fd, here, depth, names = frames[-1]
            if not names:
                frames.pop()
                if frames:  # a directory it entered, not the top
                    os.close(fd)
                    if leave is not None:
                        leave(here)
                continue
            name = names.pop()
            path = os.path.join(here, name)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if visit(fd, name, path, st) and stat.S_ISDIR(st.st_mode):
                tally.level(depth + 1, path)
                sub = hostfs.open_dir_at(fd, name, path)
                try:
                    listed = sorted(tally.names(sub, path), reverse=True)
                except BaseException:
                    os.close(sub)
                    raise
                frames.append((sub, path, depth + 1, listed))
    finally:
        for fd, *_ in frames[1:]:
            os.close(fd)
