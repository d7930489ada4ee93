"""SCOPE-1's one read of the source manifest's files, kept: the tree PLUGIN-1's runs see.

The manifest's files (manifest.paths: in the service user's trees, hostile
input, SUITE-4) are read once each, the way manifest.py reads them (from "/"
without following a link; a link, FIFO, socket, device or hard link is
refused, never opened; bounded by the inventory's tree bounds), and copied as
they are read into a mirror in the run's scratch area: each file at its own
absolute path below the mirror's top, root:root 0444, every directory
root:root 0755. Each is hashed as it is copied, so the listing (the lines
manifest.listing prints) and its digest (SCOPE-1's) are of exactly the bytes
the mirror holds. What a harness run imports from the mirror was hashed:
nothing changed after hashing is run, and nothing beside the manifest's files
is there to be resolved (a pty.tsx the user put beside pty.ts stays in the
user's tree, which the run does not see).

PLUGIN-1 binds the mirror's copy of each tree (pilot_root and code_root; only
the outer one where one lies inside the other) read-only at the tree's own
path in each harness run (candidate/smoke.py), and before each run checks
that the mirror still holds exactly the manifest's files with the digests
they were copied with (check). The mirror is root's, so only a defect of the
suite's own could change it: the check says so rather than trusting it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass

from pty_acceptance.host import hostfs, scratch, treewalk
from pty_acceptance.provenance import manifest

FILE_MODE, DIR_MODE = 0o444, 0o755
PREFIX = "pty-acceptance-source-"
# the mirror is root's own tree, as deep as the trees lie below "/" and as the
# inventory's tree bounds let them be below their tops: check walks it within these
MIRROR_BOUNDS = hostfs.TreeBounds(entries=hostfs.Limit(1_000_000, "the mirror's walk", "entries"),
                                  depth=hostfs.Limit(1024, "the mirror's walk", "levels"))


class CopyError(manifest.ManifestError):
    """The manifest's files could not be copied, or a copy is not what was copied."""


@dataclass(frozen=True)
class SourceCopy:
    """The mirror: where it is, each file's digest as copied (manifest order),
    the listing and its digest, and the trees it holds (outermost first)."""
    top: str
    files: tuple[tuple[str, str], ...]  # (the original's path, the SHA-256 of the bytes copied)
    listing: str
    digest: str
    roots: tuple[str, ...]

    def copy_of(self, path: str) -> str:
        """Where the copy of `path` (an absolute path) is on the host."""
        return os.path.join(self.top, *hostfs.parts_of(path))

    def binds(self) -> tuple[tuple[str, str], ...]:
        """(the mirror's copy of a tree, the tree's own path): read-only binds that
        show a run the manifest's files, and nothing else, where the trees are."""
        return tuple((self.copy_of(r), r) for r in self.roots)

    def within(self, directory: str) -> list[tuple[str, str]]:
        """(name, digest) of the manifest's files directly in `directory`."""
        d = os.path.normpath(directory)
        return [(os.path.basename(p), h) for p, h in self.files if os.path.dirname(p) == d]

    def seen(self, path: str) -> bool:
        """Whether `path` lies in one of the trees the mirror shows a run."""
        return any(_inside(path, r) for r in self.roots)

    def check(self) -> list[str]:
        """What is not as it was copied (empty: all is): a file missing, changed,
        no longer root's 0444 with one link, or an entry that is not one of the
        manifest's files or the directories above them."""
        want = {self.copy_of(p): h for p, h in self.files}
        dirs = {self.copy_of(r) for r in self.roots}
        for c in [*want, *dirs]:
            d = os.path.dirname(c)
            while d.startswith(self.top + "/"):
                dirs.add(d)
                d = os.path.dirname(d)
        problems: list[str] = []
        found: set[str] = set()

        def visit(parent: int, name: str, path: str, st: os.stat_result) -> bool:
            if stat.S_ISDIR(st.st_mode) and path in dirs:
                if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != DIR_MODE:
                    problems.append(f"{path} is a directory of uid {st.st_uid} mode "
                                    f"{stat.S_IMODE(st.st_mode):04o}, not root's {DIR_MODE:04o}")
                return True
            if path not in want:
                problems.append(f"{path} ({hostfs.kind_of(st.st_mode)}) is not one of the manifest's files")
                return False
            found.add(path)
            problems.extend(_copy_problems(parent, name, path, st, want[path]))
            return False

        try:
            fd = hostfs.open_dir(self.top)
        except OSError as e:
            return [f"the mirror {self.top} cannot be opened: {e.strerror or e}"]
        try:
            tally = hostfs.Tally(MIRROR_BOUNDS, f"the mirror {self.top}")
            treewalk.walk(fd, self.top, tally, visit)
        except OSError as e:
            problems.append(f"the mirror {self.top} cannot be walked: {e}")
        finally:
            os.close(fd)
        problems += [f"{c} (the copy of a manifest file) is missing" for c in sorted(set(want) - found)]
        return problems


def _inside(path: str, directory: str) -> bool:
    a, b = os.path.normpath(path), os.path.normpath(directory)
    return a == b or a.startswith(b.rstrip("/") + "/")


def _copy_problems(parent: int, name: str, path: str, st: os.stat_result, digest: str) -> list[str]:
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) != FILE_MODE \
            or st.st_nlink != 1:
        return [f"{path} is a {hostfs.kind_of(st.st_mode)} of uid {st.st_uid} mode "
                f"{stat.S_IMODE(st.st_mode):04o} with {st.st_nlink} links, not root's {FILE_MODE:04o} "
                "regular file with one"]
    try:
        now = hostfs.sha256_fd(hostfs.open_file_at(parent, name, path), None, path)
    except OSError as e:
        return [f"{path} cannot be read: {e}"]
    return [] if now == digest else [f"{path} hashes to {now}, copied as {digest}"]


def roots(pilot_root: str, code_root: str) -> tuple[str, ...]:
    """The trees, without one that lies inside another."""
    both = sorted({os.path.normpath(pilot_root), os.path.normpath(code_root)}, key=lambda r: (len(r), r))
    out: list[str] = []
    for r in both:
        if not any(_inside(r, o) for o in out):
            out.append(r)
    return tuple(out)


def _copy_one(path: str, tally: hostfs.Tally, top: int) -> str:
    """`path` read once (manifest.open_input) and written, as it is read, to its
    place below `top`; the SHA-256 of the bytes copied."""
    parts = hostfs.parts_of(path)
    src = manifest.open_input(path, tally)
    try:
        dfd = hostfs.open_dir_beneath(top, parts[:-1], "the mirror", create=True)
        try:
            out = os.open(parts[-1], hostfs.CREATE_FLAGS, 0o600, dir_fd=dfd)
        finally:
            os.close(dfd)
        try:
            if os.geteuid() == 0:
                os.fchown(out, 0, 0)
            h, done, limit = hashlib.sha256(), 0, tally.bounds.file
            while chunk := os.read(src, hostfs.CHUNK):
                done += len(chunk)
                if done > limit.value:
                    raise hostfs.TooLarge(f"{path} grew past {limit} while it was copied")
                h.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
            os.fchmod(out, FILE_MODE)
            os.fsync(out)
        finally:
            os.close(out)
    except hostfs.PathRefused as e:
        raise CopyError(str(e)) from None
    except OSError as e:
        raise CopyError(f"{path}: {e.strerror or e}") from None
    finally:
        os.close(src)
    return h.hexdigest()


def make(pilot_root: str, code_root: str, bounds: hostfs.TreeBounds = hostfs.TREE_BOUNDS) -> SourceCopy:
    """The manifest's files read once and copied into a new mirror (module
    docstring); ManifestError (CopyError) naming the path when one cannot be;
    remove() takes the mirror away."""
    found = manifest.paths(pilot_root, code_root, bounds)
    top = scratch.make(PREFIX, mode=DIR_MODE)
    try:
        tfd = hostfs.open_dir(top)
        try:
            tally = hostfs.Tally(bounds, f"the source manifest's files of {pilot_root} and {code_root}")
            files = tuple((p, _copy_one(p, tally, tfd)) for p in found)
            trees = roots(pilot_root, code_root)
            for r in trees:  # a tree's copy exists even if the manifest had no file in it
                os.close(hostfs.open_dir_beneath(tfd, hostfs.parts_of(r), "the mirror", create=True))
        finally:
            os.close(tfd)
    except BaseException:
        scratch.remove(top)
        raise
    text = "".join(manifest.line(p, h) for p, h in files)
    return SourceCopy(top, files, text, hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(),
                      trees)


def remove(copy: SourceCopy | None) -> None:
    if copy is not None:
        scratch.remove(copy.top)
