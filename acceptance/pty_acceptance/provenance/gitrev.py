"""`git rev-parse HEAD` of a checkout, read from .git without running git.

Running the host's git as root inside a user-owned repository would execute
that repository's configuration (core.fsmonitor and friends); reading HEAD and
the refs needs no program at all.

The checkout belongs to the service user, so everything in it is hostile
(SUITE-4): every file is reached by a descriptor walk from "/" that follows no
link in any component (a `.git/refs` link into a root-only directory is
refused, not read), and no error message carries a byte of what was read,
only its length.
"""

from __future__ import annotations

import os
import re

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs

HEX40 = re.compile(rb"^[0-9a-f]{40}$")
# What git itself accepts as a branch or tag name, restricted to a safe alphabet:
# a name that passes may be shown; anything else is "malformed".
REF = re.compile(rb"^refs/(?:[A-Za-z0-9_-][A-Za-z0-9._-]*/)*[A-Za-z0-9_-][A-Za-z0-9._-]*$")
LIMIT = 1 << 20


class GitError(Unreadable):
    pass


def _read(gfd: int, git: str, rel: str) -> bytes:
    """A file below .git; FileNotFoundError passes through."""
    where = f"{git}/{rel}"
    try:
        return hostfs.read_fd(hostfs.open_file_beneath(gfd, rel, git, user_writable=True), LIMIT, where)
    except FileNotFoundError:
        raise
    except hostfs.PathRefused as e:
        raise GitError(str(e)) from None
    except OSError as e:
        raise GitError(f"{where}: {e.strerror or type(e).__name__}") from None


def _packed(gfd: int, git: str, ref: bytes) -> bytes | None:
    try:
        data = _read(gfd, git, "packed-refs")
    except FileNotFoundError:
        return None
    for n, line in enumerate(data.splitlines(), start=1):
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref:
            if not HEX40.match(parts[0]):
                raise GitError(f"{git}/packed-refs line {n} (the entry for {ref.decode()}) is "
                               f"malformed: {len(parts[0])} bytes where a commit id belongs")
            return parts[0]
    return None


def head(checkout: str) -> str:
    git = os.path.join(checkout, ".git")
    try:
        gfd = hostfs.open_dir(git)
    except FileNotFoundError:
        raise GitError(f"{git} does not exist (or a directory above it does not)") from None
    except hostfs.PathRefused as e:
        raise GitError(f"{e}: expected the repository directory, reached without links") from None
    except OSError as e:
        raise GitError(f"{git}: {e.strerror or type(e).__name__}") from None
    try:
        return _resolve(gfd, git)
    finally:
        os.close(gfd)


def _resolve(gfd: int, git: str) -> str:
    try:
        raw = _read(gfd, git, "HEAD")
    except FileNotFoundError:
        raise GitError(f"{git}/HEAD does not exist") from None
    text = raw.strip()
    if HEX40.match(text):
        return text.decode()  # detached HEAD
    if not text.startswith(b"ref: "):
        raise GitError(f"{git}/HEAD is malformed ({len(raw)} bytes): neither a commit id "
                       "nor 'ref: refs/...'")
    ref = text[5:]
    if not REF.match(ref) or b".." in ref or ref.endswith(b".lock"):
        raise GitError(f"{git}/HEAD names a malformed ref ({len(ref)} bytes)")
    name = ref.decode()
    value: bytes | None
    try:
        value = _read(gfd, git, name).strip()
    except FileNotFoundError:
        value = _packed(gfd, git, ref)
        if value is None:
            raise GitError(f"{name} in {git} does not resolve to a commit: "
                           "no loose ref and no packed-refs entry") from None
    if not HEX40.match(value):
        raise GitError(f"{git}/{name} is malformed ({len(value)} bytes): not a commit id")
    return value.decode()
