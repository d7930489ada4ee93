"""`git rev-parse HEAD` of a checkout: the revision git itself resolves,
read from .git without running git (SCOPE-3).

Running the host's git as root inside a user-owned repository would execute
that repository's configuration (core.fsmonitor and friends); reading HEAD and
the refs needs no program at all. The reading is git's own (git 2.39: setup.c,
refs.c, refs/files-backend.c, refs/packed-backend.c), narrowed: every layout
it accepts, git resolves to the same commit; every layout git would resolve
some other way, or through an indirection the suite does not read, is
refused (a GitError naming SCOPE-3 and the indirection), never read past.

Refused (git would read elsewhere, or read something else, than the suite):

- `.git` a file (`gitdir: <path>`: git reads the repository it names), or a
  link, or anything but a directory;
- `.git/commondir` (of any kind: git reads every ref but HEAD, packed-refs,
  the config and the objects from the directory it names: a copy holding
  another commit gives git that commit while `.git/refs` says the claimed one);
- `objects/info/alternates`, `info/grafts`, replace refs (`refs/replace/`
  holding anything, or a `refs/replace/` entry in packed-refs): they leave
  the id `rev-parse` prints alone but change what git shows under it (another
  commit's tree in its place, other parents, objects from another
  repository). SCOPE-3 refuses them so that the revision means what it says;
- a repository format other than the one read here (gitconfig: a version
  above 1, `extensions.refStorage`, `objectFormat = sha256`, an extension git
  does not know), and a config git cannot parse;
- `.git` that git would not take for a repository (no `objects` or `refs`
  directory, a HEAD that is neither a commit id nor `ref: refs/...`): git would
  look for a repository in the checkout itself and the directories above it;
- anything the suite reads (every directory on the way, every file) that git
  could not read as it runs: as the repository's owner (git refuses a
  repository that is not its runner's, safe.directory). The suite reads as
  root; a `.git/objects` its owner made mode 0 is no repository to git, which
  then takes a bare repository planted in the checkout itself. A node owned by
  another user, or without its owner's search or read bit, is refused, and
  so are a checkout and a `.git` of different owners;
- a ref that is not a regular file (a link: git reads a `refs/...` symlink as
  the symbolic ref it names, HEAD included; a directory: git falls back to
  packed-refs; a FIFO would hang git), or a hard link;
- ref contents other than exactly what git writes: `<40 lowercase hex>` or
  `ref: refs/...` (a safe name, no `.lock` component), each with at most one
  final newline. git itself is looser (leading `ref:` without the space,
  uppercase hex, trailing junk after whitespace), but a loose parse invites
  disagreement: a leading space, which a `strip()` forgives, makes git find
  the ref broken and take `refs/HEAD` instead;
- a packed-refs file other than what git writes (gitpacked: malformed lines
  stop git; a name twice or out of order lets git's binary search find
  another entry than a reading from the top);
- a ref that makes `HEAD` ambiguous (`refs/HEAD`, `refs/tags/HEAD`,
  `refs/heads/HEAD`, `refs/remotes/HEAD`, `refs/remotes/HEAD/HEAD`, loose or
  packed): `rev-parse` resolves each of them too (ref_rev_parse_rules) and
  a FIFO there hangs it;
- a chain of symbolic refs longer than git follows (5 reads, HEAD's included).

Read as git reads them: a detached HEAD, HEAD naming a branch, loose or
packed (a loose ref wins over its packed entry), symbolic refs chained within
git's depth, per-worktree refs (`refs/worktree/`, `refs/bisect/`: without a
commondir they are in .git like any other), `shallow` (it cuts history, not
the commit or its tree), linked worktrees' `worktrees/` (not the checkout's
HEAD), a missing config (git: format 0); `core.worktree` and `core.bare` say
where the work tree is, not where the refs are, and `include.path` is not read
for the repository format (gitconfig). `GIT_DIR`, `GIT_COMMON_DIR` and the
like are the environment of whoever runs git, not the repository's.

The checkout belongs to the service user, so everything in it is hostile
(SUITE-4): every file is reached by a descriptor walk from "/" that follows no
link in any component (a `.git/refs` link into a root-only directory is
refused, not read), and no error message carries a byte of what was read,
only its length.
"""

from __future__ import annotations

import os
import re
import stat

from pty_acceptance.host import hostfs
from pty_acceptance.provenance import gitconfig, gitdir, gitpacked
from pty_acceptance.provenance.gitdir import GitError

__all__ = ["GitError", "head"]

_COMPONENT = rb"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*"
# A ref name check_refname_format accepts, narrowed to a safe alphabet: a name
# that passes may be shown; anything else is "malformed".
REF = re.compile(rb"refs/(?:%s/)*%s" % (_COMPONENT, _COMPONENT))
# what git writes in HEAD and in a loose ref
LOOSE = re.compile(rb"(?:ref: (?P<ref>[^\n]*)|(?P<oid>[0-9a-f]{40}))\n?")
SYMREF_MAXDEPTH = 5  # refs/refs-internal.h: reads of one resolution, HEAD's included
# what `git rev-parse HEAD` resolves besides HEAD (refs.c ref_rev_parse_rules)
AMBIGUOUS = ("refs/HEAD", "refs/tags/HEAD", "refs/heads/HEAD", "refs/remotes/HEAD", "refs/remotes/HEAD/HEAD")
# (path below .git, what git does with it): present in any form, refused
INDIRECTIONS = (
    ("commondir", "git reads every ref but HEAD, packed-refs, the config and the objects "
                  "from the directory it names"),
    ("objects/info/alternates", "git takes objects from the repositories it names"),
    ("info/grafts", "git gives commits the parents it lists"),
)
REFUSED = "an indirection the suite does not read: refused, never read past"


def head(checkout: str) -> str:
    """The commit id `git rev-parse HEAD` gives in `checkout`; GitError when
    the repository is one git could resolve otherwise (the module docstring)."""
    try:
        cfd = hostfs.open_dir(checkout)
    except FileNotFoundError:
        raise GitError(f"{checkout} does not exist (or a directory above it does not)") from None
    except hostfs.PathRefused as e:
        raise GitError(f"{e}: expected the checkout directory, reached without links") from None
    except OSError as e:
        raise GitError(f"{checkout}: {e.strerror or type(e).__name__}") from None
    git = os.path.join(checkout, ".git")
    try:
        gfd = _open_git(cfd, git)
        try:
            uid = _runner(cfd, gfd, checkout, git)
        except BaseException:
            os.close(gfd)
            raise
    finally:
        os.close(cfd)
    try:
        _refuse_indirections(gfd, git)
        _git_takes_it(gfd, git, uid)
        try:
            gitconfig.check_format(gitdir.read(gfd, git, "config", uid), f"{git}/config")
        except FileNotFoundError:
            pass  # git: no config is format 0
        packed = _packed(gfd, git, uid)
        _unambiguous(gfd, git, packed)
        return _resolve(gfd, git, packed, uid)
    finally:
        os.close(gfd)


def _runner(cfd: int, gfd: int, checkout: str, git: str) -> int:
    """Whom git runs as: the owner of the checkout and of .git (git refuses a
    repository whose worktree or .git is not its runner's: safe.directory)."""
    cst, gst = os.fstat(cfd), os.fstat(gfd)
    if cst.st_uid != gst.st_uid:
        raise GitError(f"{checkout} (uid {cst.st_uid}) and {git} (uid {gst.st_uid}) belong to different "
                       "users: git refuses such a repository to either (safe.directory)")
    gitdir.owner_can(gst, git, gst.st_uid, stat.S_IXUSR)
    return gst.st_uid


def _open_git(cfd: int, git: str) -> int:
    try:
        mode = os.stat(".git", dir_fd=cfd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        raise GitError(f"{git} does not exist (or a directory above it does not)") from None
    except OSError as e:
        raise GitError(f"{git}: {e.strerror or type(e).__name__}") from None
    if stat.S_ISREG(mode):
        raise GitError(f"{git} is a file, not a directory: a `gitdir:` file (git reads the "
                       f"repository it names), {REFUSED}")
    if not stat.S_ISDIR(mode):
        raise GitError(f"{git} is a {hostfs.kind_of(mode)}, not a directory: not followed")
    try:
        return hostfs.open_dir_at(cfd, ".git", git)
    except hostfs.PathRefused as e:
        raise GitError(f"{e}: expected the repository directory, reached without links") from None
    except OSError as e:
        raise GitError(f"{git}: {e.strerror or type(e).__name__}") from None


def _refuse_indirections(gfd: int, git: str) -> None:
    for rel, what in INDIRECTIONS:
        kind = gitdir.kind(gfd, git, rel)
        if kind is not None:
            raise GitError(f"{git}/{rel} exists (a {kind}): {what}; {REFUSED}")
    kind = gitdir.kind(gfd, git, "refs/replace")
    if kind is not None and (kind != "directory" or gitdir.has_entries(gfd, git, "refs/replace")):
        raise GitError(f"{git}/refs/replace holds replace refs (a {kind}): git shows another "
                       f"object in place of the one a commit id names; {REFUSED}")


def _git_takes_it(gfd: int, git: str, uid: int) -> None:
    """setup.c is_git_directory: objects/ and refs/, directories git run as
    `uid` can search (HEAD's form, and that it can read HEAD: _resolve)."""
    for rel in ("objects", "refs"):
        kind = gitdir.kind(gfd, git, rel)
        if kind == "directory":
            gitdir.searchable(gfd, git, rel, uid)
            continue
        if kind == "symlink":
            raise GitError(f"{git}/{rel} is a symlink, not a directory: not followed")
        raise GitError(f"{git}/{rel} is {'absent' if kind is None else 'a ' + kind}, not a directory: "
                       f"git would not take {git} for a repository and would look for one in the "
                       "checkout itself and the directories above it")


def _packed(gfd: int, git: str, uid: int) -> dict[bytes, str]:
    where = f"{git}/packed-refs"
    try:
        packed = gitpacked.parse(gitdir.read(gfd, git, "packed-refs", uid), where)
    except FileNotFoundError:
        return {}
    if any(name.startswith(b"refs/replace/") for name in packed):
        raise GitError(f"{where} holds replace refs (refs/replace/): git shows another object in "
                       f"place of the one a commit id names; {REFUSED}")
    return packed


def _unambiguous(gfd: int, git: str, packed: dict[bytes, str]) -> None:
    for name in AMBIGUOUS:
        kind = gitdir.kind(gfd, git, name)
        # a directory there resolves to nothing (git looks in packed-refs instead)
        if kind not in (None, "directory") or name.encode() in packed:
            raise GitError(f"{git}: {name} exists ({'a ' + kind if kind else 'in packed-refs'}): "
                           "'HEAD' is ambiguous, `git rev-parse HEAD` reads that ref too "
                           "(a broken HEAD would give its commit; a FIFO there hangs git)")


def _resolve(gfd: int, git: str, packed: dict[bytes, str], uid: int) -> str:
    name = "HEAD"
    for _ in range(SYMREF_MAXDEPTH):
        try:
            raw = gitdir.read(gfd, git, name, uid)
        except FileNotFoundError:
            if name == "HEAD":
                raise GitError(f"{git}/HEAD does not exist: git would not take {git} for a "
                               "repository") from None
            oid = packed.get(name.encode())
            if oid is None:
                raise GitError(f"{name} in {git} does not resolve to a commit: "
                               "no loose ref and no packed-refs entry") from None
            return oid
        m = LOOSE.fullmatch(raw)
        if m is None:
            raise GitError(f"{git}/{name} is malformed ({len(raw)} bytes): neither a commit id "
                           "nor 'ref: refs/...' as git writes them")
        if m.group("oid"):
            return m.group("oid").decode()
        target = m.group("ref")
        if not REF.fullmatch(target) or any(c.endswith(b".lock") for c in target.split(b"/")):
            raise GitError(f"{git}/{name} names a malformed ref ({len(target)} bytes)")
        name = target.decode()
    raise GitError(f"{git}: HEAD is a chain of more than {SYMREF_MAXDEPTH - 1} symbolic refs: "
                   f"git gives up after {SYMREF_MAXDEPTH} reads")
