"""SCOPE-1: the content-bound source manifest, as review-source-hash builds it.

The listing is every path below, sorted and made unique bytewise
(`LC_ALL=C sort -u`), each line as `sha256sum` prints it; the manifest hash is
the SHA-256 of that listing.

The trees belong to the service user (SUITE-4): every directory and file is
reached by a descriptor walk from "/" that follows no link in any component,
and only regular files are hashed. A link, FIFO, socket or device among the
inputs is a ManifestError naming the path and its kind, and so is a hard
link (a file with more than one link): its target's hash never reaches the
evidence, and a FIFO never hangs the gate. The walk and the
reads are bounded (hostfs.TreeBounds: the inventory's limits.file_bytes,
tree_bytes, tree_entries and tree_depth): a file's size is taken from fstat
before it is read, so a sparse 8 TiB file is refused at once, naming the
limit, and the walk is iterative (treewalk.py), so a chain of directories
1,200 deep is refused naming limits.tree_depth, never a RecursionError.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs, treewalk

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


class ManifestError(Unreadable):
    pass


def _open_dir(path: str) -> int:
    try:
        return hostfs.open_dir(path)
    except hostfs.PathRefused as e:
        raise ManifestError(str(e)) from None
    except OSError as e:
        raise ManifestError(f"{path}: {e.strerror or e}") from None


def _entries(fd: int, where: str, tally: hostfs.Tally) -> list[tuple[str, str, bool]]:
    """(name, path, is a directory) of every entry, links not followed."""
    out = []
    for name in tally.names(fd, where):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        out.append((name, os.path.join(where, name), stat.S_ISDIR(st.st_mode)))
    return out


def _go_files(fd: int, where: str, tally: hostfs.Tally) -> list[str]:
    """What `find <where> -name '*.go'` lists (find follows no link either),
    walked iteratively within the depth bound (treewalk.py)."""
    found: list[str] = []

    def visit(parent: int, name: str, path: str, st: os.stat_result) -> bool:
        if name.endswith(".go"):
            found.append(path)
        return True

    try:
        treewalk.walk(fd, where, tally, visit)
    except hostfs.PathRefused as e:  # at a bound, or swapped for a link since it was listed
        raise ManifestError(str(e)) from None
    return found


def _ts_sources(src: str, tally: hostfs.Tally) -> list[str]:
    """What the shell glob `src/*.ts` lists: no hidden names, no recursion."""
    try:
        fd = _open_dir(src)
    except ManifestError:
        if not os.path.lexists(src):
            return []
        raise
    try:
        return [p for n, p, _ in _entries(fd, src, tally) if n.endswith(".ts") and not n.startswith(".")]
    finally:
        os.close(fd)


def paths(pilot_root: str, code_root: str, bounds: hostfs.TreeBounds = hostfs.TREE_BOUNDS) -> list[str]:
    pilot, code = Path(pilot_root), Path(code_root)
    sup = str(pilot / "supervisor")
    tally = hostfs.Tally(bounds, f"the source trees {pilot_root} and {code_root}")
    fd = _open_dir(sup)
    try:
        found = _go_files(fd, sup, tally)
        found += _ts_sources(str(code / "packages/plugin/src"), tally)
    except hostfs.TooLarge as e:
        raise ManifestError(str(e)) from None
    except OSError as e:  # an entry that vanished or cannot be read while listed
        raise ManifestError(f"{e.filename or sup}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    found += [str(pilot / f) for f in PILOT_FILES] + [str(code / f) for f in CODE_FILES]
    return sorted(set(found), key=os.fsencode)


def line(path: str, digest: str) -> str:
    """`path`'s line as `sha256sum` prints it (its escaping of odd names included)."""
    if "\\" in path or "\n" in path:
        return "\\" + digest + "  " + path.replace("\\", "\\\\").replace("\n", "\\n") + "\n"
    return f"{digest}  {path}\n"


def open_input(path: str, tally: hostfs.Tally) -> int:
    """One of the manifest's files opened by the no-follow walk from "/" (a
    link, FIFO, socket, device or hard link refused, never opened) once its
    size fits the bounds: ManifestError naming the path otherwise."""
    try:
        return tally.checked(hostfs.open_file(path, user_writable=True), path)
    except hostfs.PathRefused as e:
        raise ManifestError(str(e)) from None
    except OSError as e:
        raise ManifestError(f"{path}: {e.strerror or e}") from None


def _sha256sum_line(path: str, tally: hostfs.Tally) -> str:
    fd = open_input(path, tally)
    try:
        digest = hostfs.sha256_fd(fd, tally.bounds.file, path)
    except hostfs.PathRefused as e:
        raise ManifestError(str(e)) from None
    except OSError as e:
        raise ManifestError(f"{path}: {e.strerror or e}") from None
    return line(path, digest)


def listing(pilot_root: str, code_root: str, bounds: hostfs.TreeBounds = hostfs.TREE_BOUNDS) -> str:
    tally = hostfs.Tally(bounds, f"the source manifest's files of {pilot_root} and {code_root}")
    return "".join(_sha256sum_line(p, tally) for p in paths(pilot_root, code_root, bounds))


def compute(pilot_root: str, code_root: str,
            bounds: hostfs.TreeBounds = hostfs.TREE_BOUNDS) -> tuple[str, str]:
    """Return (manifest hash, listing); `bounds`: the inventory's tree_bounds()."""
    text = listing(pilot_root, code_root, bounds)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(), text
