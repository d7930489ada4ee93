"""SCOPE-1: the content-bound source manifest, as review-source-hash builds it.

The listing is every path below, sorted and made unique bytewise
(`LC_ALL=C sort -u`), each line as `sha256sum` prints it; the manifest hash is
the SHA-256 of that listing.
"""

from __future__ import annotations

import glob
import hashlib
import os
from pathlib import Path

PILOT_FILES = (
    "supervisor/go.mod",
    "supervisor/go.sum",
    "supervisor/opencode-pty.slice",
    "supervisor/opencode-pty-supervisor.service",
    "config/opencode/plugins/pty.ts",
    "config/opencode/plugins/pty-transport.ts",
    "config/opencode/tsconfig.json",
    "config/opencode/package.json",
    "config/opencode/bun.lock",
    "opencode-v2.service",
)
CODE_FILES = ("packages/plugin/package.json", "bun.lock")


class ManifestError(Exception):
    pass


def paths(pilot_root: str, code_root: str) -> list[str]:
    pilot, code = Path(pilot_root), Path(code_root)
    found: list[str] = []
    sup = pilot / "supervisor"
    if not sup.is_dir():
        raise ManifestError(f"{sup}: no such directory")
    for dirpath, _dirs, files in os.walk(sup):  # find does not follow links either
        found += [os.path.join(dirpath, f) for f in files if f.endswith(".go")]
    found += glob.glob(glob.escape(str(code / "packages/plugin/src")) + "/*.ts")
    found += [str(pilot / f) for f in PILOT_FILES] + [str(code / f) for f in CODE_FILES]
    return sorted(set(found), key=os.fsencode)


def _sha256sum_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as e:
        raise ManifestError(f"{path}: {e.strerror or e}") from None
    if "\\" in path or "\n" in path:  # sha256sum's escaping of odd names
        return "\\" + digest + "  " + path.replace("\\", "\\\\").replace("\n", "\\n") + "\n"
    return f"{digest}  {path}\n"


def listing(pilot_root: str, code_root: str) -> str:
    return "".join(_sha256sum_line(p) for p in paths(pilot_root, code_root))


def compute(pilot_root: str, code_root: str) -> tuple[str, str]:
    """Return (manifest hash, listing)."""
    text = listing(pilot_root, code_root)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(), text
