"""The Python distributions installed in the suite's virtualenv, as their
records say (SUITE-3): each one's name, version and RECORD (every file it
installed, with its SHA-256), and the `.pth` files Python runs at start-up.

What the gate's process loaded from the virtualenv is judged against these
(decision/loaded_code.py): a file is the distribution's only when its
RECORD lists it and its bytes hash to the recorded digest. Read with
importlib.metadata from the virtualenv's own site-packages directories
(never the interpreter's or the user's); files are hashed by descriptor,
never through a final link.
"""

from __future__ import annotations

import base64
import importlib.metadata
import os
import site
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pty_acceptance.host import hostfs
from pty_acceptance.spec import pins

LIMIT = 1 << 30  # one recorded file (the largest wheels ship binaries of some MiB)


@dataclass(frozen=True)
class Distribution:
    name: str  # as its metadata spells it
    version: str
    where: str  # its .dist-info (or .egg-info) directory
    # every file its RECORD lists (normalized absolute path) -> (algorithm, digest as
    # RECORD writes it: urlsafe base64 without padding), or None (listed without a hash)
    files: Mapping[str, tuple[str, str] | None]
    recorded: bool  # it has a RECORD at all (an .egg-info has none)

    @property
    def key(self) -> str:
        return pins.normalize(self.name)

    def said(self) -> str:
        return f"{self.name}=={self.version}"


def site_dirs(prefix: str) -> list[str]:
    """The virtualenv's own site-packages, resolved (none when `prefix` is the
    interpreter's own: no virtualenv)."""
    top = os.path.realpath(prefix)
    if top == os.path.realpath(sys.base_prefix):
        return []
    found = [os.path.realpath(d) for d in site.getsitepackages([prefix])]
    return [d for d in dict.fromkeys(found) if d == top or d.startswith(top + "/")]


def installed(site_dirs: Iterable[str]) -> list[Distribution]:
    """Every distribution in `site_dirs`, in name order."""
    out = []
    for d in site_dirs:
        base = os.path.realpath(d)
        for dist in importlib.metadata.distributions(path=[d]):
            files: dict[str, tuple[str, str] | None] = {}
            listed = dist.files
            for f in listed or ():
                path = os.path.normpath(os.path.join(base, str(f)))
                files[path] = (f.hash.mode, f.hash.value) if f.hash is not None else None
            where = str(getattr(dist, "_path", "")) or base
            recorded = dist.read_text("RECORD") is not None
            name = str(dist.metadata["Name"] or os.path.basename(where))
            out.append(Distribution(name, str(dist.version), where, MappingProxyType(files), recorded))
    return sorted(out, key=lambda x: (x.key, x.version, x.where))


def digest_of(path: str, algorithm: str) -> str:
    """`path`'s digest as RECORD writes it (urlsafe base64, no padding)."""
    if algorithm != "sha256":
        raise ValueError(f"RECORD names {algorithm}, not sha256")
    raw = bytes.fromhex(hostfs.sha256_nofollow(path, LIMIT))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def matches(path: str, entry: tuple[str, str] | None) -> str | None:
    """None when `path` hashes to its RECORD entry; else why not."""
    if entry is None:
        return "its RECORD lists it without a hash"
    try:
        got = digest_of(path, entry[0])
    except (OSError, ValueError) as e:
        return f"not hashed: {e}"
    return None if got == entry[1] else f"hashes to sha256={got}, its RECORD says {entry[0]}={entry[1]}"


def pth_files(site_dirs: Iterable[str]) -> list[str]:
    """The `.pth` files Python's site module reads (and runs the `import` lines
    of) at start-up, in each of `site_dirs`."""
    out = []
    for d in site_dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        out += [os.path.normpath(os.path.join(os.path.realpath(d), n)) for n in names if n.endswith(".pth")]
    return out


def owners(dists: Iterable[Distribution]) -> dict[str, list[Distribution]]:
    """file -> the distributions whose RECORD lists it."""
    out: dict[str, list[Distribution]] = {}
    for dist in dists:
        for path in dist.files:
            out.setdefault(path, []).append(dist)
    return out


def editable_dirs(dist: Distribution) -> list[str]:
    """The directories an editable install's `.pth` (listed in its RECORD)
    puts on sys.path: where the suite's own package lives when it is
    installed from a checkout (`pip install -e`)."""
    out = []
    for path in dist.files:
        if not path.endswith(".pth") or os.path.dirname(path) == dist.where:
            continue
        try:
            text = hostfs.read_file(path, 1 << 16).decode("utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")) and os.path.isabs(line):
                out.append(os.path.realpath(line))
    return out


def by_name(dists: Iterable[Distribution]) -> Mapping[str, list[Distribution]]:
    out: dict[str, list[Distribution]] = {}
    for d in dists:
        out.setdefault(d.key, []).append(d)
    return out
