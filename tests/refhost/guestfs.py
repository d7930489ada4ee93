"""Copy files out of a guest through /proc/PID/root without following any symlink."""
from __future__ import annotations

import os
import pathlib
import shutil
import stat

from .common import MachineError


def open_parent_nofollow(root_fd: int, guest_path: str) -> tuple[int, str]:
    """Open guest_path below root_fd without following any symlink.

    Returns (fd of the parent directory, last component). Raises MachineError
    when a directory component is a symlink."""
    parts = [p for p in guest_path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise MachineError(f"refusing guest path {guest_path!r}")
    fd = os.dup(root_fd)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                raise MachineError(f"cannot enter {'/' + '/'.join(parts[:i + 1])} in the guest "
                                   f"(symlinks are not followed): {e.strerror}") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def copy_entry(dir_fd: int, name: str, dest: pathlib.Path, guest_path: str) -> list[str]:
    """Copy one entry (file, or dir recursively). Returns notes on what was not copied (symlinks)."""
    st = os.lstat(name, dir_fd=dir_fd)
    notes: list[str] = []
    if stat.S_ISLNK(st.st_mode):
        # Never recreate it on the host: a later reader of dest would follow it there.
        target = os.readlink(name, dir_fd=dir_fd)
        notes.append(f"{guest_path} is a symlink to {target!r}: not followed, not copied")
    elif stat.S_ISREG(st.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(dest, stat.S_IMODE(st.st_mode))
    elif stat.S_ISDIR(st.st_mode):
        dest.mkdir(parents=True, exist_ok=True)
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            for child in sorted(os.listdir(sub)):
                notes += copy_entry(sub, child, dest / child, f"{guest_path}/{child}")
        finally:
            os.close(sub)
    else:
        notes.append(f"{guest_path} is not a regular file, directory or symlink: skipped")
    return notes
