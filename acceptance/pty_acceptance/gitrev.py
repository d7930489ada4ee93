"""`git rev-parse HEAD` of a checkout, read from .git without running git.

Running the host's git as root inside a user-owned repository would execute
that repository's configuration (core.fsmonitor and friends); reading HEAD and
the refs needs no program at all.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import hostfs

HEX40 = re.compile(r"^[0-9a-f]{40}$")


class GitError(Exception):
    pass


def _read(path: Path) -> str:
    try:
        return hostfs.read_nofollow(str(path), 1 << 20).decode("utf-8", "replace")
    except FileNotFoundError:
        raise
    except OSError as e:
        raise GitError(f"{path}: {e}") from None


def head(checkout: str) -> str:
    git = Path(checkout) / ".git"
    node = hostfs.Node.at(str(git))
    if node.kind != "directory":
        raise GitError(f"{git} is {node.kind}, expected the repository directory")
    try:
        text = _read(git / "HEAD").strip()
    except FileNotFoundError:
        raise GitError(f"{git}/HEAD does not exist") from None
    if HEX40.match(text):
        return text  # detached HEAD
    if not text.startswith("ref: refs/"):
        raise GitError(f"{git}/HEAD holds {text[:80]!r}")
    ref = text[5:]
    if ".." in ref.split("/"):
        raise GitError(f"{git}/HEAD names an odd ref {ref!r}")
    try:
        value = _read(git / ref).strip()
    except FileNotFoundError:
        value = ""
        try:
            for line in _read(git / "packed-refs").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    value = parts[0]
        except FileNotFoundError:
            pass
    if not HEX40.match(value):
        raise GitError(f"{ref} in {git} does not resolve to a commit (read {value[:80]!r})")
    return value
