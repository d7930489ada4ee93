"""Which suite judged (SUITE-3): what the JUnit report, the HTML report and
the in-toto Statement name as the suite that ran.

- its version: the checkout's package metadata (pyproject.toml's
  [project] version), and the installed distribution's when the virtualenv
  holds one (the two must agree to be said as one);
- the checkout's commit and whether its tracked files differ from it: read
  from .git (gitrev.py, gitobjects.py, gitindex.py), never by running git
  (git as root would run the repository's configuration; the checkout is
  root's own tree here, and reading needs no program at all). A checkout
  brought without .git says so;
- a digest of what the suite is made of: every file below acceptance/ (the
  tests, the library, node-ids.txt), the root conftest.py, the checklist
  (ROOT-ACCEPTANCE.md), pyproject.toml and requirements/target.txt, each as
  a `sha256sum` line `<sha256>  <path>` (a link as `symlink  <path> ->
  <target>`), sorted by path, the digest the SHA-256 of those lines;
  `__pycache__` and `*.egg-info` (what running and installing leave) are
  not the suite's and are left out. `pty-acceptance suite-identity` prints
  the same for any checkout, so a reviewer can compare the reviewed one;
- the virtualenv's distribution set: every `name==version` its
  site-packages holds, sorted, and the SHA-256 of those lines.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pty_acceptance.host import hostfs
from pty_acceptance.provenance import distributions, gitindex, gitobjects, gitrev
from pty_acceptance.spec import pins

TOP_FILES = ("conftest.py", "ROOT-ACCEPTANCE.md", "pyproject.toml", pins.FILE)
TREE = "acceptance"
LEFT_OUT = ("__pycache__",)
MAX_FILES = 20000
FILE_LIMIT = 1 << 28
SHOWN = 5  # differing paths named


@dataclass(frozen=True)
class Identity:
    version: str  # "0.1.0", or why it could not be read
    commit: str  # 40 hex, or why there is none
    modified: str  # "no", "yes: <n> tracked files differ from the commit: ...", or why it was not read
    tree_digest: str  # SHA-256 of `listing`
    listing: tuple[str, ...]  # the sha256sum lines the digest is over
    distributions: tuple[str, ...]  # name==version, sorted
    distributions_digest: str

    def lines(self) -> list[tuple[str, str]]:
        """(name, value) as the report's suite-level properties carry them."""
        return [("suite-version", self.version), ("suite-commit", self.commit),
                ("suite-modified", self.modified),
                ("suite-tree", tree_value(self.tree_digest, self.listing)),
                ("suite-distributions", f"{self.distributions_digest}  " + " ".join(self.distributions))]


def version(root: Path, dists: Iterable[distributions.Distribution]) -> str:
    """The checkout's version (pyproject.toml), and the installed
    distribution's where there is one: both when they differ."""
    said = None
    try:
        data = tomllib.loads(hostfs.read_file(str(root / "pyproject.toml"), 1 << 20).decode("utf-8"))
        said = str(data["project"]["version"])
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"not read: {root / 'pyproject.toml'}: {type(e).__name__}: {e}"
    installed = sorted({d.version for d in dists if d.key == pins.DISTRIBUTION})
    if said is None:
        return installed[0] if len(installed) == 1 else \
            ("not read: no pyproject.toml and no installed distribution" if not installed
             else f"installed distributions {' '.join(installed)}")
    if installed and installed != [said]:
        return f"{said} (pyproject.toml; the virtualenv's installed {pins.DISTRIBUTION} is {' '.join(installed)})"
    return said


def commit_and_state(root: Path) -> tuple[str, str]:
    git = str(root / ".git")
    try:
        commit = gitrev.head(str(root))
    except gitrev.GitError as e:
        return f"not read: {e}", "not read: no commit"
    try:
        objects = gitobjects.Objects(git)
        head = objects.files(objects.tree_of_head())
        index = gitindex.entries(git)
    except (gitrev.GitError, OSError) as e:
        return commit, f"not read: {e}"
    differ = sorted(p for p in set(head) | set(index)
                    if p not in index or index[p][2] != 0 or head.get(p) != index[p][:2])
    for p, (mode, oid, _stage) in index.items():
        if p in differ or mode == 0o160000:  # a submodule: its own commit, not a file
            continue
        try:
            now = gitindex.blob_id(str(root / p))
        except FileNotFoundError:
            now = (0, "")
        except OSError as e:
            return commit, f"not read: {root / p}: {e.strerror or e}"
        if now != (mode, oid):
            differ.append(p)
    if not differ:
        return commit, "no"
    differ.sort()
    shown = ", ".join(differ[:SHOWN]) + (", ..." if len(differ) > SHOWN else "")
    return commit, f"yes: {len(differ)} tracked files differ from the commit: {shown}"


def tree_listing(root: Path) -> list[str]:
    """The sha256sum lines of every file the suite is made of (see above)."""
    out: list[tuple[str, str]] = []

    def one(rel: str) -> None:
        path = str(root / rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            out.append((rel, f"symlink  {rel} -> {os.readlink(path)}"))
        elif stat.S_ISREG(st.st_mode):
            out.append((rel, f"{hostfs.sha256_nofollow(path, FILE_LIMIT)}  {rel}"))
        elif not stat.S_ISDIR(st.st_mode):
            out.append((rel, f"{hostfs.kind_of(st.st_mode)}  {rel}"))
        if len(out) > MAX_FILES:
            raise OSError(f"{root} holds more than {MAX_FILES} files of the suite")

    for rel in TOP_FILES:
        one(rel)
    for here, dirs, files in os.walk(root / TREE):
        dirs[:] = sorted(d for d in dirs if d not in LEFT_OUT and not d.endswith(".egg-info"))
        for name in sorted(files + [d for d in os.listdir(here) if os.path.islink(os.path.join(here, d))
                                    and d in dirs]):
            one(os.path.relpath(os.path.join(here, name), root))
    return [line for _, line in sorted(dict(out).items(), key=lambda kv: kv[0].encode())]


def digest(lines: Iterable[str]) -> str:
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape")).hexdigest()


def tree_value(tree_digest: str, listing: tuple[str, ...] | list[str]) -> str:
    """The `suite-tree` property's value: `<sha256>  <n> files`."""
    return f"{tree_digest}  {len(listing)} files"


def tree_of(root: Path) -> str:
    """The `suite-tree` value of the checkout at `root` (what a run of it
    records); a tree that cannot be listed raises OSError."""
    listing = tree_listing(root)
    return tree_value(digest(listing), listing)


def read(root: Path, site_dirs: Iterable[str]) -> Identity:
    """The identity of the suite at `root`, run from the virtualenv whose
    site-packages are `site_dirs`. What cannot be read is said in its field;
    a tree that cannot be listed raises OSError."""
    dists = distributions.installed(site_dirs)
    listing = tuple(tree_listing(root))
    commit, modified = commit_and_state(root)
    said = tuple(sorted({d.said() for d in dists}, key=str.lower))
    return Identity(version(root, dists), commit, modified, digest(listing), listing, said, digest(said))
