"""A git repository's index (.git/index, versions 2 to 4), read without
running git: every tracked path with its mode and blob id, and what a
tracked file in the working tree hashes to as a blob.

With gitobjects.py this says whether a checkout differs from the commit it
names (suite_identity.py): the index against HEAD's tree (what is staged),
the tracked files against the index (what is not). Untracked files are not
git's business here: the suite's tree digest covers every file that runs.
"""

from __future__ import annotations

import hashlib
import os
import stat

from pty_acceptance.host import hostfs
from pty_acceptance.provenance.gitrev import GitError

LIMIT = 1 << 28
FILE_LIMIT = 1 << 30


def entries(git: str) -> dict[str, tuple[int, str, int]]:
    """path -> (mode, blob id, stage) of every entry of .git/index (stage 0
    unless a merge left it unresolved)."""
    path = os.path.join(git, "index")
    data = hostfs.read_file(path, LIMIT)
    if len(data) < 12 or data[:4] != b"DIRC":
        raise GitError(f"{path} is not a git index")
    version, count = int.from_bytes(data[4:8], "big"), int.from_bytes(data[8:12], "big")
    if version not in (2, 3, 4):
        raise GitError(f"{path}: index version {version}, not 2, 3 or 4")
    out: dict[str, tuple[int, str, int]] = {}
    pos, previous = 12, b""
    try:
        for _ in range(count):
            start = pos
            mode = _be(data, pos + 24, 4)
            oid = data[pos + 40:pos + 60].hex()
            flags = _be(data, pos + 60, 2)
            pos += 62
            if version >= 3 and flags & 0x4000:
                pos += 2  # extended flags
            if version == 4:  # the name: how many bytes of the previous one to drop, then the rest
                byte = data[pos]
                drop, pos = byte & 0x7F, pos + 1
                while byte & 0x80:  # git's offset encoding (as a pack's OFS_DELTA)
                    byte = data[pos]
                    drop, pos = ((drop + 1) << 7) | (byte & 0x7F), pos + 1
                end = data.index(b"\0", pos)
                name = previous[:len(previous) - drop] + data[pos:end]
                pos = end + 1
            else:
                end = data.index(b"\0", pos)
                name = data[pos:end]
                pos = start + ((end - start + 8) // 8) * 8  # NUL-padded to a multiple of 8
            previous = name
            out[name.decode("utf-8", errors="surrogateescape")] = (mode, oid, (flags >> 12) & 3)
    except (IndexError, ValueError):
        raise GitError(f"{path} is cut short or malformed at byte {pos}") from None
    return out


def _be(data: bytes, pos: int, n: int) -> int:
    """An n-byte big-endian number (git's on-disk order) at `pos`."""
    if pos + n > len(data):
        raise IndexError(pos)
    return int.from_bytes(data[pos:pos + n], "big")


def blob_id(path: str) -> tuple[int, str]:
    """(git's mode, blob id) of what is at `path` now, as `git add` would
    record it; a link is its target's text, never followed."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        data = os.fsencode(os.readlink(path))
        mode = 0o120000
    elif stat.S_ISREG(st.st_mode):
        data = hostfs.read_nofollow(path, FILE_LIMIT)
        mode = 0o100755 if st.st_mode & 0o100 else 0o100644
    else:
        return 0, ""
    return mode, hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324  # git's object id
