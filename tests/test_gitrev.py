"""SCOPE-3: gitrev gives the revision git itself resolves, or refuses.

Real repositories are built with the real git (root's own, in root-owned
scratch directories under /run) and, for each layout, gitrev's answer is
compared with `git rev-parse HEAD` run in the checkout: where gitrev answers,
git gives the same commit; every indirection the suite does not read
(`.git` a `gitdir:` file, commondir, alternates, grafts, replace refs, a
repository format other than files refs with SHA-1) is refused, also where
git happens to give the claimed commit, and layouts where git resolves
another commit than a naive reading of .git/refs are refused (the commondir
attack, a leading space in a loose ref, packed-refs listing a name twice,
a .git/objects its owner cannot search: git runs as the owner, and is run so
here too, with setpriv, where modes matter).
Two properties over generated ref layouts (loose, packed, peeled, symbolic
chains and cycles, detached): the ones git writes are read exactly as git
reads them; noisy ones (bytes git tolerates or stumbles on) are refused or
read as git does, never otherwise.

And SUITE-4: the checkout's HEAD is read by a descriptor walk that follows
no link in any component, and no error message carries a byte of what was
read."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from pty_acceptance.provenance import gitconfig, gitpacked, gitrev

SECRET = "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2"  # a commit-shaped secret: the worst case
TOKEN = "TOPSECRET-root-only-bytes"
GIT = "/usr/bin/git"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C", "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid",
       "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00"}


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run([GIT, *args], cwd=cwd, env={**ENV, **(env or {})}, capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()


def truth(checkout: Path) -> str | None:
    """`git rev-parse HEAD` in `checkout`, looking no higher than its parent:
    None when git resolves nothing (or hangs)."""
    try:
        p = subprocess.run([GIT, "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True,
                           env={**ENV, "GIT_CEILING_DIRECTORIES": str(checkout.parent)}, timeout=10)
    except subprocess.TimeoutExpired:
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def ours(checkout: Path) -> str | None:
    try:
        return gitrev.head(str(checkout))
    except gitrev.GitError:
        return None


def refusal(checkout: Path) -> str:
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(checkout))
    assert e.value.requirements == ("SCOPE-3",)
    return str(e.value)


@dataclass
class Repo:
    path: Path  # the checkout
    a: str  # main~1
    b: str  # main: HEAD
    c: str  # other
    tag: str  # annotated tag v1 (an object of its own), peels to a

    @property
    def git(self) -> Path:
        return self.path / ".git"


@pytest.fixture(scope="module")
def base():
    d = Path(tempfile.mkdtemp(prefix="pty-acc-gitrev-", dir="/run"))
    os.chmod(d, 0o755)
    r = d / "base"
    try:
        git(d, "init", "-q", "-b", "main", str(r))
        (r / "file").write_text("one\n")
        git(r, "add", "file")
        git(r, "commit", "-q", "-m", "a")
        a = git(r, "rev-parse", "HEAD")
        (r / "file").write_text("two\n")
        git(r, "commit", "-q", "-am", "b")
        b = git(r, "rev-parse", "HEAD")
        git(r, "checkout", "-q", "-b", "other", a)
        git(r, "commit", "-q", "--allow-empty", "-m", "c")
        c = git(r, "rev-parse", "HEAD")
        git(r, "checkout", "-q", "main")
        git(r, "tag", "-a", "-m", "v1", "v1", a)
        tag = git(r, "rev-parse", "v1")
        yield Repo(r, a, b, c, tag)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def repo(base, safe_dir) -> Repo:
    """A copy of the base repository of its own: HEAD -> refs/heads/main = b."""
    path = safe_dir / "checkout"
    shutil.copytree(base.path, path, symlinks=True)
    return Repo(path, base.a, base.b, base.c, base.tag)


def agree(repo: Repo, want: str) -> None:
    """git resolves `want`, and gitrev answers the same."""
    assert truth(repo.path) == want
    assert gitrev.head(str(repo.path)) == want


# -- layouts git writes: read exactly as git reads them ----------------------

def test_a_branch_checked_out(repo):
    agree(repo, repo.b)


def test_packed_refs_with_peeled_tags(repo):
    git(repo.path, "pack-refs", "--all")
    assert not (repo.git / "refs/heads/main").exists()
    assert f"^{repo.a}" in (repo.git / "packed-refs").read_text()  # v1's peel line
    agree(repo, repo.b)


def test_a_loose_ref_wins_over_its_packed_entry(repo):
    git(repo.path, "pack-refs", "--all")
    git(repo.path, "update-ref", "refs/heads/main", repo.c)  # loose again, packed-refs still says b
    assert repo.b in (repo.git / "packed-refs").read_text()
    agree(repo, repo.c)


def test_detached_head(repo):
    git(repo.path, "checkout", "-q", "--detach", repo.a)
    agree(repo, repo.a)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_symbolic_refs_chained(repo, depth):
    """HEAD -> s1 -> ... -> main: git follows up to 5 reads, HEAD's included."""
    names = [f"refs/heads/s{i}" for i in range(1, depth + 1)] + ["refs/heads/main"]
    for name, target in zip(names, names[1:], strict=False):
        git(repo.path, "symbolic-ref", name, target)
    git(repo.path, "symbolic-ref", "HEAD", names[0])
    agree(repo, repo.b)


def test_a_chain_longer_than_git_follows_is_refused(repo):
    names = [f"refs/heads/s{i}" for i in range(1, 5)] + ["refs/heads/main"]
    for name, target in zip(names, names[1:], strict=False):
        git(repo.path, "symbolic-ref", name, target)
    git(repo.path, "symbolic-ref", "HEAD", names[0])
    assert truth(repo.path) is None
    assert "chain of more than 4 symbolic refs" in refusal(repo.path)


def test_a_per_worktree_ref(repo):
    """refs/worktree/ lives in the repository's own .git when there is no commondir."""
    git(repo.path, "update-ref", "refs/worktree/cur", repo.c)
    git(repo.path, "symbolic-ref", "HEAD", "refs/worktree/cur")
    agree(repo, repo.c)


def test_the_main_checkout_of_linked_worktrees_and_the_linked_one(repo, safe_dir):
    linked = safe_dir / "linked"
    git(repo.path, "worktree", "add", "-q", str(linked), "other")
    agree(repo, repo.b)
    assert truth(linked) == repo.c
    assert "a `gitdir:` file" in refusal(linked)  # its .git names the main repository's worktrees/linked


def test_a_shallow_clone(repo, safe_dir):
    clone = safe_dir / "shallow"
    git(safe_dir, "clone", "-q", "--depth", "1", f"file://{repo.path}", str(clone))
    assert (clone / ".git/shallow").is_file()
    assert truth(clone) == repo.b == gitrev.head(str(clone))


def test_a_missing_config_is_format_0(repo):
    (repo.git / "config").unlink()
    agree(repo, repo.b)


@pytest.mark.parametrize("config", [
    "[core]\n\trepositoryformatversion = 0\n[extensions]\n\tpreciousObjects = true\n\tworktreeConfig\n",
    "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha1\n\tnoop-v1\n"
    "\tpartialClone = origin\n",
    "\ufeff[core] repositoryformatversion = \"0\" ; a comment\r\n# [extensions]\n\tbare = false\n",
    "[remote \"origin\\\"x\"]\n\turl = \"a;b\" \\\n\t  [extensions] refStorage = reftable\n[core]\n"
    "\tRepositoryFormatVersion=0\n",
    "[core \"x\"]\n\trepositoryformatversion = 7\n[extensions \"a\"]\n[core]\n\tfilemode = true\n",
])
def test_a_config_git_reads_as_format_0_or_1_with_files_refs(repo, config):
    (repo.git / "config").write_bytes(config.encode())
    agree(repo, repo.b)


# -- indirections: refused, whatever git makes of them ------------------------

def _commit_in(gitdir: Path, worktree: Path) -> str:
    env = {"GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(worktree)}
    git(worktree, "commit", "-q", "--allow-empty", "-m", "moved", env=env)
    return git(worktree, "rev-parse", "HEAD", env=env)


def test_commondir_naming_a_copy_that_holds_another_commit(repo, safe_dir):
    """The red team's attack: `.git/refs` still says b, git says the copy's commit."""
    shadow = safe_dir / "shadow.git"
    shutil.copytree(repo.git, shadow, symlinks=True)
    moved = _commit_in(shadow, repo.path)
    (repo.git / "commondir").write_text(f"{shadow}\n")
    assert (repo.git / "refs/heads/main").read_text().strip() == repo.b
    assert truth(repo.path) == moved != repo.b
    msg = refusal(repo.path)
    assert ".git/commondir exists" in msg and "refused, never read past" in msg
    assert moved not in msg and str(shadow) not in msg


def test_commondir_naming_a_faithful_copy_is_refused_too(repo, safe_dir):
    shadow = safe_dir / "shadow.git"
    shutil.copytree(repo.git, shadow, symlinks=True)
    (repo.git / "commondir").write_text("../../shadow.git\n")
    assert truth(repo.path) == repo.b
    assert ".git/commondir exists" in refusal(repo.path)


@pytest.mark.parametrize("moved", [True, False], ids=["another-commit", "same-commit"])
def test_a_gitdir_file(repo, safe_dir, moved):
    elsewhere = safe_dir / "elsewhere.git"
    repo.git.rename(elsewhere)
    (repo.path / ".git").write_text(f"gitdir: {elsewhere}\n")
    want = _commit_in(elsewhere, repo.path) if moved else repo.b
    assert truth(repo.path) == want
    msg = refusal(repo.path)
    assert "is a file, not a directory: a `gitdir:` file" in msg and str(elsewhere) not in msg


def test_replace_refs_loose_and_packed(repo):
    """rev-parse still prints b, but git shows c's tree in its place."""
    tree_b = git(repo.path, "show", "-s", "--format=%T", "HEAD")
    git(repo.path, "replace", repo.b, repo.a)
    assert truth(repo.path) == repo.b
    assert git(repo.path, "show", "-s", "--format=%T", "HEAD") != tree_b
    assert "refs/replace holds replace refs" in refusal(repo.path)
    git(repo.path, "pack-refs", "--all")
    assert not (repo.git / "refs/replace").exists() or not any((repo.git / "refs/replace").iterdir())
    assert "packed-refs holds replace refs" in refusal(repo.path)


def test_an_empty_refs_replace_directory_replaces_nothing(repo):
    (repo.git / "refs/replace").mkdir()
    agree(repo, repo.b)


def test_alternates(repo, safe_dir):
    other = safe_dir / "other.git"
    shutil.copytree(repo.git, other, symlinks=True)
    (repo.git / "objects/info/alternates").write_text(f"{other}/objects\n")
    assert truth(repo.path) == repo.b
    msg = refusal(repo.path)
    assert "objects/info/alternates exists" in msg and str(other) not in msg


def test_grafts(repo):
    (repo.git / "info").mkdir(exist_ok=True)
    (repo.git / "info/grafts").write_text(f"{repo.b} {repo.c}\n")
    assert truth(repo.path) == repo.b
    assert "info/grafts exists" in refusal(repo.path)


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_an_indirection_of_any_kind_is_refused(repo, safe_dir, kind):
    """git's file_exists() follows a link; a directory named commondir stops git."""
    target = repo.git / "commondir"
    if kind == "symlink":
        (safe_dir / "real").write_text("../../shadow.git\n")
        target.symlink_to(safe_dir / "real")
    elif kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)
    assert f"commondir exists (a {'FIFO' if kind == 'fifo' else kind})" in refusal(repo.path)


# -- the repository format: refused unless git reads files refs with SHA-1 ----

@pytest.mark.parametrize("config, says", [
    ("[core]\n\trepositoryformatversion = 2\n", "core.repositoryformatversion is not 0 or 1"),
    ("[core]\n\trepositoryformatversion = 1\n[extensions]\n\trefStorage = reftable\n",
     "extensions.refStorage"),
    ("[core]\n\trepositoryformatversion = 0\n[extensions]\n\trefstorage = reftable\n",
     "extensions.refStorage"),
    ("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tweird = 1\n",
     "an extension git 2.39 does not know (5 bytes)"),
    ("[core]\n\trepositoryformatversion = 0\n[extensions]\n\tobjectFormat = sha1\n",
     "extensions.objectFormat"),
    ("[extensions \"refStorage\"]\n\tx = 1\n", "an extension git 2.39 does not know"),
    ("[core]\n\trepositoryformatversion = 0\n[extensions]\n\tpreciousObjects = maybe\n",
     "extensions.preciousObjects with a value git does not take for a boolean"),
    ("[core]\n\trepositoryformatversion\n", "(no value)"),
    ("[core\n\trepositoryformatversion = 0\n", "not config git can parse (line 1)"),
    ("[core]\n\tbare = \"false\n", "not config git can parse (line 2)"),
    ("[core]\n\tbare = \\q\n", "not config git can parse"),
    ("[core]\n\t1bare = false\n", "not config git can parse"),
    ("\xef[core]\n", "part of a byte order mark"),
    ("[core]\n\tbare = false\x00\n", "a NUL byte"),
])
def test_a_repository_format_the_suite_does_not_read_is_refused(repo, config, says):
    (repo.git / "config").write_bytes(config.encode("latin-1"))
    assert says in refusal(repo.path)


def test_git_refuses_what_it_does_not_know_and_so_does_gitrev(repo):
    (repo.git / "config").write_text("[core]\n\trepositoryformatversion = 1\n[extensions]\n"
                                     "\trefStorage = reftable\n")
    assert truth(repo.path) is None  # git 2.39: an unknown extension
    refusal(repo.path)


def test_a_sha256_repository(safe_dir):
    r = safe_dir / "sha256"
    git(safe_dir, "init", "-q", "--object-format=sha256", str(r))
    git(r, "commit", "-q", "--allow-empty", "-m", "a")
    assert len(truth(r) or "") == 64
    assert "extensions.objectFormat" in refusal(r)


def test_the_config_parser_hands_on_what_git_config_lists(repo):
    """The grammar against git's own: `git config --list --file` of a tricky file."""
    text = ("\ufeff; lead\n[Core] RepositoryFormatVersion = 0 # c\n\tbare\n"
            "[remote \"o\\\"r\\\\g\"]\n\turl = \" a;b \" c\\\n d\\t\n[x.Y]\n\tk=\n[Sub \"CaSe\"] z = 1\n")
    (repo.git / "config").write_bytes(text.encode())
    listed = subprocess.run([GIT, "config", "--list", "--null", "--file", str(repo.git / "config")],
                            env=ENV, capture_output=True, check=True).stdout
    want = []
    for item in listed.split(b"\0")[:-1]:
        name, _, value = item.partition(b"\n")
        want.append((name, value if b"\n" in item else None))
    assert gitconfig.entries(text.encode(), "config") == want


CONFIG_NOISE = ["[", "]", '"', "\\", " ", "\t", "\n", "\r\n", "\r", ";", "#", "=", "-", ".", "1", "\\n", "\\t",
                "\\\n", '\\"', "\ufeff"]
VALUE_PARTS = ["0", "1", "x y", ' "q;#" ', "\\t", "\\n", "\\\\", '\\"', " ", "\t", "; c", "# c", "\\\n  z", "a=b"]


def _config_line(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        name = rng.choice(["core", "Extensions", "x.Y", "remote", "a-b"])
        sub = rng.choice(["", ' "o"', ' "a\\"b"', ' "c\\\\d"', '\t"s p"'])
        return f"[{name}{sub}]" + rng.choice(["", " ", " k = v", "\tRepositoryFormatVersion"])
    if kind == 1:
        key = rng.choice(["repositoryformatversion", "refStorage", "bare", "k-1", "url"])
        value = "".join(rng.choice(VALUE_PARTS) for _ in range(rng.randint(0, 4)))
        return rng.choice(["\t", "", "  "]) + key + rng.choice([" = ", "=", " =", ""]) + value
    return rng.choice(["", "# comment", "; c", "\t"])


def _config_text(rng: random.Random) -> str:
    lines = [_config_line(rng) for _ in range(rng.randint(1, 6))]
    text = rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])
    for _ in range(rng.choice([0, 0, 1, 2])):
        at = rng.randint(0, len(text))
        text = text[:at] + rng.choice(CONFIG_NOISE) + text[at:]
    return text


def _git_lists(path: Path) -> list[tuple[bytes, bytes | None]] | None:
    done = subprocess.run([GIT, "config", "--list", "--null", "--file", str(path)], env=ENV,
                          capture_output=True, timeout=10)
    if done.returncode != 0:
        return None
    out = []
    for item in done.stdout.split(b"\0")[:-1]:
        name, nl, value = item.partition(b"\n")
        out.append((name, value if nl else None))
    return out


def test_generated_configs_parse_as_git_parses_them(safe_dir):
    """Config lines as git writes them, some with a token of noise: where
    git's parser accepts the file, the same keys and values in the same
    order; where git stops, a refusal."""
    rng = random.Random(20261210)
    path = safe_dir / "config"
    accepted = 0
    for i in range(600):
        text = _config_text(rng)
        path.write_bytes(text.encode())
        want = _git_lists(path)
        if want is None:
            with pytest.raises(gitrev.GitError):
                gitconfig.entries(text.encode(), "config")
        else:
            assert gitconfig.entries(text.encode(), "config") == want, (i, text)
            accepted += 1
    assert 100 < accepted < 500  # both sides of git's grammar were tried


# -- refs git reads otherwise than a naive reading ----------------------------

def test_a_leading_space_in_a_loose_ref_makes_git_take_refs_head(repo):
    """git finds ' <b>' broken and takes refs/HEAD's commit; a strip() would say b."""
    (repo.git / "refs/heads/main").write_text(f" {repo.b}\n")
    (repo.git / "refs/HEAD").write_text(f"{repo.c}\n")
    assert truth(repo.path) == repo.c
    refusal(repo.path)
    (repo.git / "refs/HEAD").unlink()
    assert truth(repo.path) is None
    assert "refs/heads/main is malformed (42 bytes)" in refusal(repo.path)


@pytest.mark.parametrize("name", gitrev.AMBIGUOUS)
def test_a_ref_that_makes_head_ambiguous_is_refused(repo, name):
    git(repo.path, "update-ref", name, repo.c)
    assert truth(repo.path) == repo.b
    assert f"{name} exists" in refusal(repo.path)


def test_a_fifo_among_the_names_rev_parse_also_reads_hangs_git(repo):
    os.mkfifo(repo.git / "refs/heads/HEAD")
    assert truth(repo.path) is None  # timed out
    assert "refs/heads/HEAD exists (a FIFO)" in refusal(repo.path)


@pytest.mark.parametrize("header", ["# pack-refs with: peeled fully-peeled sorted \n", ""])
def test_packed_refs_listing_a_name_twice(repo, header):
    """git's binary search takes the second entry; a reading from the top, the first."""
    (repo.git / "refs/heads/main").unlink()
    (repo.git / "packed-refs").write_text(f"{header}{repo.b} refs/heads/main\n{repo.c} refs/heads/main\n")
    assert truth(repo.path) == repo.c
    assert "a ref name repeated" in refusal(repo.path)


def test_packed_refs_out_of_order_under_the_sorted_trait(repo):
    (repo.git / "refs/heads/main").unlink()
    (repo.git / "packed-refs").write_text(f"# pack-refs with: sorted \n{repo.c} refs/heads/zz\n"
                                          f"{repo.a} refs/heads/yy\n{repo.b} refs/heads/main\n")
    assert truth(repo.path) is None  # not found by the binary search
    assert "out of order" in refusal(repo.path)


def test_malformed_packed_refs_stop_git_even_with_a_loose_head(repo):
    (repo.git / "packed-refs").write_text(f"{repo.c} refs/heads/x\ngarbage\n")
    assert truth(repo.path) is None
    assert "packed-refs line 2 is malformed" in refusal(repo.path)


@pytest.mark.parametrize("head", [" ref: refs/heads/main\n", "ref: refs/heads/main\n\n", "ref:refs/heads/main\n"])
def test_head_other_than_git_writes_it(repo, head):
    """A leading space: git does not take .git for a repository at all."""
    (repo.git / "HEAD").write_text(head)
    assert truth(repo.path) in (None, repo.b)
    assert "HEAD is malformed" in refusal(repo.path)


@pytest.mark.parametrize("what", ["objects", "refs"])
def test_git_would_not_take_it_for_a_repository(repo, what):
    """Without objects/ (or refs/) git takes the checkout itself for a bare
    repository: here one holding another commit."""
    shutil.rmtree(repo.git / what)
    git(repo.path, "init", "-q", "--bare", "-b", "main", str(repo.path))
    (repo.path / "refs/heads/main").write_text(f"{repo.c}\n")
    assert (repo.git / "refs/heads/main" if what == "objects" else repo.git / "HEAD").exists()
    assert truth(repo.path) == repo.c
    assert f"{what} is absent, not a directory: git would not take" in refusal(repo.path)


@pytest.mark.parametrize("where", ["HEAD", "refs/heads/main"])
def test_a_ref_that_is_a_symlink_naming_a_ref(repo, where):
    """git reads a `refs/...` symlink as the symbolic ref it names, not as a path."""
    (repo.git / where).unlink()
    (repo.git / where).symlink_to("refs/heads/other")
    assert truth(repo.path) in (None, repo.c)
    assert f"{where} is a symlink" in refusal(repo.path)


# -- git runs as the repository's owner: what the owner cannot read -----------

NOBODY = 65534


def truth_as_owner(checkout: Path, uid: int = NOBODY) -> str | None:
    """`git rev-parse HEAD` run as `uid`, as the service user runs it in its checkout."""
    try:
        p = subprocess.run(["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", GIT,
                            "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True, timeout=10,
                           env={**ENV, "GIT_CEILING_DIRECTORIES": str(checkout.parent)})
    except subprocess.TimeoutExpired:
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _give(path: Path, uid: int = NOBODY) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, uid, follow_symlinks=False)


@pytest.fixture
def owned(repo) -> Repo:
    """The repository and its checkout belong to an unprivileged user."""
    _give(repo.path)
    return repo


def test_a_repository_its_owner_reads_as_the_suite_does(owned):
    assert truth_as_owner(owned.path) == owned.b == gitrev.head(str(owned.path))


def _plant_bare_checkout(repo: Repo) -> None:
    """The checkout itself a bare repository whose main is c (files beside the source)."""
    git(repo.path, "init", "-q", "--bare", "-b", "main", str(repo.path))
    (repo.path / "refs/heads/main").write_text(f"{repo.c}\n")
    _give(repo.path)


@pytest.mark.parametrize("what", ["objects", "refs", "HEAD", ""])
def test_what_its_owner_cannot_reach_makes_git_take_the_checkout_for_a_bare_repository(owned, what):
    """root reads .git whatever its modes; git, run as the owner, finds no
    repository there and takes the one planted in the checkout: another commit."""
    _plant_bare_checkout(owned)
    (owned.git / what).chmod(0)
    assert (owned.git / "refs/heads/main").read_text().strip() == owned.b  # what root reads in .git
    assert truth_as_owner(owned.path) == owned.c
    msg = refusal(owned.path)
    assert "has mode 0000: its owner cannot" in msg and (what or ".git") in msg


def test_a_directory_its_owner_cannot_search_on_the_way_to_a_ref(owned):
    (owned.git / "refs/heads").chmod(0o644)
    assert truth_as_owner(owned.path) is None
    assert "refs/heads has mode 0644: its owner cannot search it" in refusal(owned.path)


def test_a_file_of_another_user_in_the_owners_repository(owned):
    main = owned.git / "refs/heads/main"
    os.chown(main, 0, 0)
    main.chmod(0o600)
    assert truth_as_owner(owned.path) is None
    assert f"belongs to uid 0, not to uid {NOBODY}" in refusal(owned.path)


def test_a_checkout_and_a_dot_git_of_different_owners(repo):
    _give(repo.git)
    assert truth_as_owner(repo.path) is None  # dubious ownership
    assert "belong to different users" in refusal(repo.path)


# -- properties over generated ref layouts ----------------------------------

BRANCHES = ["main", "dev", "feature/x", "rel-1.0", "a.b", "zz"]


def _generate(rng: random.Random, repo: Repo) -> None:
    """A ref layout as git writes one: loose, packed (sorted, peeled tags),
    both, symbolic refs (chains, cycles, dangling), HEAD on any of them or detached."""
    g = repo.git
    for d in ("refs/heads", "refs/tags"):
        shutil.rmtree(g / d)
        (g / d).mkdir()
    (g / "packed-refs").unlink(missing_ok=True)
    commits = [repo.a, repo.b, repo.c]
    names = rng.sample(BRANCHES, rng.randint(1, len(BRANCHES)))
    packed: dict[str, str] = {}
    for n in names:
        ref, how = f"refs/heads/{n}", rng.choice(["loose", "packed", "both", "symref", "symref"])
        if how == "symref":
            target = rng.choice([*names, "missing"])
            (g / ref).parent.mkdir(parents=True, exist_ok=True)
            (g / ref).write_text(f"ref: refs/heads/{target}\n")
            continue
        if how in ("packed", "both"):
            packed[ref] = rng.choice(commits)
        if how in ("loose", "both"):
            (g / ref).parent.mkdir(parents=True, exist_ok=True)
            (g / ref).write_text(rng.choice(commits) + "\n")
    if rng.random() < 0.5:
        packed["refs/tags/v1"] = repo.tag
    if packed:
        lines = [rng.choice(["# pack-refs with: peeled fully-peeled sorted \n", "# pack-refs with: peeled \n", ""])]
        for ref in sorted(packed):
            lines.append(f"{packed[ref]} {ref}\n")
            if packed[ref] == repo.tag:
                lines.append(f"^{repo.a}\n")
        (g / "packed-refs").write_text("".join(lines))
    if rng.random() < 0.2:
        (g / "HEAD").write_text(rng.choice(commits) + "\n")
    else:
        (g / "HEAD").write_text(f"ref: refs/heads/{rng.choice([*names, 'missing'])}\n")


NOISE = [
    ("a leading space", lambda b: b" " + b),
    ("CR LF", lambda b: b.replace(b"\n", b"\r\n")),
    ("uppercase hex", lambda b: b.upper() if not b.startswith(b"ref:") else b),
    ("junk after a space", lambda b: b.rstrip(b"\n") + b" junk\n"),
    ("no space after ref:", lambda b: b.replace(b"ref: ", b"ref:")),
    ("a tab after ref:", lambda b: b.replace(b"ref: ", b"ref:\t")),
    ("two newlines", lambda b: b + b"\n"),
    ("a vertical tab", lambda b: b.rstrip(b"\n") + b"\x0b\n"),
]


def _noisy(rng: random.Random, repo: Repo) -> str:
    """Bytes git tolerates (or stumbles on) in one ref file or packed-refs."""
    files = [p for p in (repo.git / "refs/heads").rglob("*") if p.is_file()] + [repo.git / "HEAD"]
    packed = repo.git / "packed-refs"
    if packed.exists() and rng.random() < 0.3:
        lines = packed.read_bytes().splitlines(keepends=True)
        i = rng.randrange(len(lines))
        how = rng.choice(["repeat", "swap", "tab"])
        if how == "repeat":
            lines.insert(i, lines[i])
        elif how == "swap" and len(lines) > 1:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = lines[i].replace(b" ", b"\t", 1)
        packed.write_bytes(b"".join(lines))
        return f"packed-refs: {how}"
    f = rng.choice(files)
    name, change = rng.choice(NOISE)
    f.write_bytes(change(f.read_bytes()))
    return f"{f.relative_to(repo.git)}: {name}"


def test_generated_ref_layouts_are_read_exactly_as_git_reads_them(repo):
    rng = random.Random(20261208)
    answered = 0
    for i in range(150):
        _generate(rng, repo)
        want, got = truth(repo.path), ours(repo.path)
        assert got == want, (i, (repo.git / "HEAD").read_text(), want, got)
        answered += got is not None
    assert answered > 50  # most layouts resolve: the property is not "both refuse"


def test_noisy_ref_layouts_are_refused_or_read_as_git_reads_them(repo):
    rng = random.Random(20261209)
    differs = 0
    for i in range(150):
        _generate(rng, repo)
        naive = ours(repo.path)
        noise = _noisy(rng, repo)
        want, got = truth(repo.path), ours(repo.path)
        assert got is None or got == want, (i, noise, want, got)
        differs += want != naive
    assert differs > 10  # the noise changed git's answer (mostly to none) often enough to matter


# -- SUITE-4: hostile bytes and links -----------------------------------------

@pytest.fixture
def rootonly(safe_dir):
    """A root-only directory holding refs/heads/main = SECRET."""
    d = safe_dir / "rootonly"
    (d / "heads").mkdir(parents=True)
    (d / "heads/main").write_text(SECRET + "\n")
    os.chmod(d, 0o700)
    return d


def test_head_of_a_plain_checkout(target):
    assert gitrev.head(str(target.code)) == target.revision


def test_detached_head_and_packed_refs(target):
    git_ = target.code / ".git"
    (git_ / "refs/heads/main").unlink()
    (git_ / "packed-refs").write_text(f"# pack-refs with: peeled\n{target.revision} refs/heads/main\n")
    assert gitrev.head(str(target.code)) == target.revision
    (git_ / "HEAD").write_text(target.revision + "\n")
    assert gitrev.head(str(target.code)) == target.revision


def test_a_refs_link_into_a_root_only_directory_is_not_followed(target, rootonly):
    refs = target.code / ".git/refs"
    for p in sorted(refs.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    refs.rmdir()
    refs.symlink_to(rootonly)
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    assert "refs is a symlink" in str(e.value)
    assert SECRET not in str(e.value)


def test_a_link_above_the_checkout_is_not_followed(target, safe_dir):
    hop = safe_dir / "hop"
    hop.symlink_to(target.code.parent)
    with pytest.raises(gitrev.GitError, match="hop is a symlink"):
        gitrev.head(str(hop / target.code.name))


@pytest.mark.parametrize("where, length", [("HEAD", 26), ("refs/heads/main", 26), ("packed-refs", 41),
                                           ("config", 25)])
def test_a_malformed_file_is_described_never_echoed(target, where, length):
    git_ = target.code / ".git"
    if where == "packed-refs":
        (git_ / "refs/heads/main").unlink()
        (git_ / "packed-refs").write_text(f"{TOKEN} refs/heads/main\n")
    elif where == "config":
        (git_ / "config").write_text(f"[core]\n\trepositoryformatversion = {TOKEN}\n")
    else:
        (git_ / where).write_text(f"{TOKEN}\n")
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    msg = str(e.value)
    assert TOKEN not in msg and "TOPSECRET" not in msg, msg
    assert re.search(rf"\b{length} bytes", msg), msg  # its length, not its bytes


def test_an_odd_ref_name_is_not_echoed(target):
    (target.code / ".git/HEAD").write_text(f"ref: refs/heads/{TOKEN}\x1b[2K\n")
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    assert TOKEN not in str(e.value) and "\x1b" not in str(e.value)


def test_an_unknown_extension_is_not_echoed(target):
    (target.code / ".git/config").write_text(f"[extensions]\n\t{TOKEN.replace('-', '')}\n")
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    assert "TOPSECRET" not in str(e.value).upper() and "does not know (22 bytes)" in str(e.value)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_head_that_is_not_a_regular_file_is_refused(target, rootonly, kind):
    head = target.code / ".git/HEAD"
    head.unlink()
    if kind == "fifo":
        os.mkfifo(head)
    elif kind == "symlink":
        head.symlink_to(rootonly / "heads/main")
    else:
        head.mkdir()
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    assert "HEAD is a" in str(e.value) and SECRET not in str(e.value)


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_dot_git_that_is_not_a_directory_is_not_followed(target, rootonly, kind):
    dotgit = target.code / ".git"
    shutil.rmtree(dotgit)
    if kind == "symlink":
        dotgit.symlink_to(rootonly)
    else:
        os.mkfifo(dotgit)
    msg = refusal(target.code)
    assert f".git is a {'symlink' if kind == 'symlink' else 'FIFO'}, not a directory" in msg


def test_packed_refs_parser_rejects_what_git_would_not_write():
    rec = "a" * 40
    assert gitpacked.parse(f"{rec} refs/heads/a\n^{'b' * 40}\n{rec} refs/heads/b\n".encode(), "p") == {
        b"refs/heads/a": rec, b"refs/heads/b": rec}
    for bad in [f"{rec} refs/heads/a", f"^{rec}\n", f"{rec} refs/heads/a\n^{rec}\n^{rec}\n",
                f"{rec} refs/heads/a\n# comment\n", f"{rec}  refs/heads/a\n", f"{rec} refs/heads/a\r\n",
                f"{rec.upper()} refs/heads/a\n", "# not the header\n"]:
        with pytest.raises(gitrev.GitError):
            gitpacked.parse(bad.encode(), "p")
