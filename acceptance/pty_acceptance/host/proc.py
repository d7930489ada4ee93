"""Processes read from /proc as root: what a pid executes, judged by the
inode it runs, never by the name a link gives."""
from __future__ import annotations

import os


def exe_identity(pid: int) -> tuple[str, tuple[int, int] | None]:
    """(readlink of /proc/<pid>/exe, (st_dev, st_ino) of what it executes)."""
    try:
        link = os.readlink(f"/proc/{pid}/exe")
        st = os.stat(f"/proc/{pid}/exe")
    except OSError as e:
        return f"? ({e.strerror})", None
    return link, (st.st_dev, st.st_ino)
