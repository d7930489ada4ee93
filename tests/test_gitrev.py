"""SCOPE-3 read safely (SUITE-4): the checkout's HEAD is read by a descriptor
walk that follows no link in any component, and no error message carries a
byte of what was read."""

import os
import re

import pytest

from pty_acceptance.provenance import gitrev

SECRET = "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2"  # a commit-shaped secret: the worst case
TOKEN = "TOPSECRET-root-only-bytes"


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
    git = target.code / ".git"
    (git / "refs/heads/main").unlink()
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{target.revision} refs/heads/main\n")
    assert gitrev.head(str(target.code)) == target.revision
    (git / "HEAD").write_text(target.revision + "\n")
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


@pytest.mark.parametrize("where", ["HEAD", "refs/heads/main", "packed-refs"])
def test_a_malformed_file_is_described_never_echoed(target, where):
    git = target.code / ".git"
    if where == "packed-refs":
        (git / "refs/heads/main").unlink()
        (git / "packed-refs").write_text(f"{TOKEN} refs/heads/main\n")
    else:
        (git / where).write_text(f"{TOKEN}\n")
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    msg = str(e.value)
    assert TOKEN not in msg and "TOPSECRET" not in msg, msg
    assert "malformed" in msg and re.search(r"\b2[56] bytes", msg), msg  # its length, not its bytes


def test_an_odd_ref_name_is_not_echoed(target):
    (target.code / ".git/HEAD").write_text(f"ref: refs/heads/{TOKEN}\x1b[2K\n")
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    assert TOKEN not in str(e.value) and "\x1b" not in str(e.value)


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
