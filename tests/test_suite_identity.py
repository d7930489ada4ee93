"""Which suite judged (issue 38 item 2): the version, the checkout's commit
and whether its tracked files differ from it (read from .git, not by running
git: gitobjects.py, gitindex.py), the digest of what the suite is made of,
and the virtualenv's distribution set (provenance/suite_identity.py); each
checked here against git itself on repositories made for the purpose."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pty_acceptance.provenance import gitindex, gitobjects, suite_identity
from pty_acceptance.provenance.gitrev import GitError

from conftest import REPO

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(GIT + ["-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def make_suite(root: Path) -> Path:
    """A checkout shaped like the suite's: acceptance/, the checklist, the pins."""
    (root / "acceptance/pty_acceptance").mkdir(parents=True)
    (root / "acceptance/test_x.py").write_text("def test_x():\n    pass\n")
    (root / "acceptance/node-ids.txt").write_text("acceptance/test_x.py::test_x\tOWN-1\n")
    (root / "acceptance/pty_acceptance/__init__.py").write_text("")
    (root / "ROOT-ACCEPTANCE.md").write_text("# checklist\n")
    (root / "conftest.py").write_text("")
    (root / "pyproject.toml").write_text('[project]\nname = "opencode-pty-acceptance"\nversion = "7.1.0"\n')
    (root / "requirements").mkdir()
    (root / "requirements/target.txt").write_text("pytest==9.2.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    return root


def committed(root: Path) -> str:
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the reviewed suite")
    return git(root, "rev-parse", "HEAD").strip()


def test_a_clean_checkout_names_its_commit(tmp_path):
    root = make_suite(tmp_path / "suite")
    head = committed(root)
    commit, modified = suite_identity.commit_and_state(root)
    assert (commit, modified) == (head, "no")


@pytest.mark.parametrize("change", ["edited", "staged", "removed", "mode", "link"])
def test_a_changed_tracked_file_is_said(tmp_path, change):
    root = make_suite(tmp_path / "suite")
    (root / "acceptance/helper.py").write_text("X = 1\n")
    committed(root)
    target = root / "acceptance/helper.py"
    if change == "edited":
        target.write_text("X = 2\n")
    elif change == "staged":
        target.write_text("X = 2\n")
        git(root, "add", "acceptance/helper.py")
    elif change == "removed":
        target.unlink()
    elif change == "mode":
        target.chmod(0o755)
    else:
        target.unlink()
        target.symlink_to("test_x.py")
    assert suite_identity.commit_and_state(root)[1] == \
        "yes: 1 tracked files differ from the commit: acceptance/helper.py"


def test_packed_objects_and_deltas_are_read_as_git_reads_them(tmp_path):
    """After `git gc` every object is in a pack, most files as deltas: the
    tree read from it is the one git lists."""
    root = make_suite(tmp_path / "suite")
    committed(root)
    big = root / "acceptance/big.py"
    for n in range(4):  # versions of one file: deltas against each other once packed
        big.write_text("".join(f"LINE_{i} = {i * (n + 1)}\n" for i in range(400)))
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"v{n}")
    git(root, "gc", "-q", "--aggressive")
    assert not list((root / ".git/objects").glob("??/*")), "objects left loose"
    objects = gitobjects.Objects(str(root / ".git"))
    files = objects.files(objects.tree_of_head())
    listed = {}
    for line in git(root, "ls-tree", "-r", "HEAD").splitlines():
        meta, path = line.split("\t")
        mode, _, oid = meta.split()
        listed[path] = (int(mode, 8), oid)
    assert files == listed
    kind, body = objects.read(files["acceptance/big.py"][1])
    assert (kind, body) == (b"blob", big.read_bytes())
    assert suite_identity.commit_and_state(root)[1] == "no"


@pytest.mark.parametrize("version", [2, 3, 4])
def test_every_index_version_is_read(tmp_path, version):
    root = make_suite(tmp_path / "suite")
    for n in range(3):
        (root / f"acceptance/pty_acceptance/module_with_a_long_name_{n}.py").write_text(f"N = {n}\n")
    committed(root)
    git(root, "update-index", "--index-version", str(version))
    entries = gitindex.entries(str(root / ".git"))
    assert set(entries) == set(git(root, "ls-files").split())
    assert suite_identity.commit_and_state(root)[1] == "no"


def test_no_git_directory_is_said_not_judged(tmp_path):
    root = make_suite(tmp_path / "suite")
    commit, modified = suite_identity.commit_and_state(root)
    assert commit.startswith("not read: ") and ".git does not exist" in commit
    assert modified == "not read: no commit"


def test_a_malformed_object_is_an_error_not_a_guess(tmp_path):
    root = make_suite(tmp_path / "suite")
    committed(root)
    objects = gitobjects.Objects(str(root / ".git"))
    tree = objects.tree_of_head()
    loose = root / ".git/objects" / tree[:2] / tree[2:]
    os.chmod(loose, 0o644)
    loose.write_bytes(b"not zlib")
    with pytest.raises(GitError, match="not a zlib stream"):
        objects.files(tree)
    assert suite_identity.commit_and_state(root)[1].startswith("not read: ")


def test_the_tree_digest_is_sha256sum_over_the_suites_files(tmp_path):
    """The listing is `sha256sum`'s lines over the suite's files, sorted by
    path, caches and install records left out; its digest the SHA-256 of them."""
    root = make_suite(tmp_path / "suite")
    (root / "acceptance/__pycache__").mkdir()
    (root / "acceptance/__pycache__/x.cpython-311.pyc").write_bytes(b"cache")
    (root / "acceptance/opencode_pty_acceptance.egg-info").mkdir()
    (root / "acceptance/opencode_pty_acceptance.egg-info/PKG-INFO").write_text("x")
    (root / "tests").mkdir()
    (root / "tests/test_not_the_suite.py").write_text("")
    (root / "acceptance/linked.py").symlink_to("test_x.py")
    files = ["ROOT-ACCEPTANCE.md", "acceptance/node-ids.txt", "acceptance/pty_acceptance/__init__.py",
             "acceptance/test_x.py", "conftest.py", "pyproject.toml", "requirements/target.txt"]
    want = sorted([f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}" for f in files]
                  + ["symlink  acceptance/linked.py -> test_x.py"], key=lambda l: l.split("  ", 1)[1])
    listing = suite_identity.tree_listing(root)
    assert listing == want
    lines = "".join(f"{line}\n" for line in want)
    assert suite_identity.digest(listing) == hashlib.sha256(lines.encode()).hexdigest()
    (root / "acceptance/test_x.py").write_text("def test_x():\n    assert True\n")
    assert suite_identity.digest(suite_identity.tree_listing(root)) != suite_identity.digest(listing)


def test_the_version_is_the_checkouts_and_the_installed_distributions(tmp_path):
    from pty_acceptance.provenance.distributions import Distribution
    root = make_suite(tmp_path / "suite")
    own = Distribution("opencode-pty-acceptance", "7.1.0", "/x", {}, True)
    assert suite_identity.version(root, [own]) == "7.1.0"
    other = Distribution("opencode_pty_acceptance", "6.0", "/x", {}, True)
    assert suite_identity.version(root, [other]) == \
        "7.1.0 (pyproject.toml; the virtualenv's installed opencode-pty-acceptance is 6.0)"
    (root / "pyproject.toml").unlink()
    assert suite_identity.version(root, [other]) == "6.0"
    assert suite_identity.version(root, []) == "not read: no pyproject.toml and no installed distribution"


def test_this_checkout_reads_as_git_says(tmp_path):
    """The lab's own checkout: the commit and state git itself reports."""
    head = git(REPO, "rev-parse", "HEAD").strip()
    dirty = bool(git(REPO, "status", "--porcelain", "--untracked-files=no").strip())
    commit, modified = suite_identity.commit_and_state(REPO)
    assert commit == head
    assert modified.startswith("yes: ") == dirty, modified
    ident = suite_identity.read(REPO, [str(Path(sys.prefix) / f"lib/python{sys.version_info[0]}."
                                           f"{sys.version_info[1]}/site-packages")])
    assert "pytest==9.2.0" in ident.distributions
