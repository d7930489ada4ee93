"""SUITE-4: a user-writable tree's hard link to a file outside it (a regular
file with more than one link) is refused, never read. With
fs.protected_hardlinks=0 the service user can give a root-only file a name
in its own tree; root reads that name as the file itself. Each reader of
the user's trees asks hostfs for that rule (`user_writable`) and names the
refusal; nothing of the file reaches a message. Root's own trees keep their
hard links (a local git clone, an installer's links in the virtualenv)."""

import hashlib
import os
import types

import pytest

from pty_acceptance.candidate import runtimeunit, serverenv, smoke
from pty_acceptance.host import hostfs
from pty_acceptance.provenance import gitrev, manifest, node_runtime

SECRET = b"root:$y$hardlinked-secret:19000:0:99999:7:::\n"
SECRET_SHA = hashlib.sha256(SECRET).hexdigest()


@pytest.fixture
def secret(safe_dir):
    """A root-only file (0600 in a 0700 directory) on the same filesystem as the trees."""
    d = safe_dir / "rootonly"
    d.mkdir()
    d.chmod(0o700)
    (d / "shadow").write_bytes(SECRET)
    (d / "shadow").chmod(0o600)
    return d / "shadow"


def _plant(secret, where):
    if os.path.lexists(where):
        os.unlink(where)
    os.link(secret, where)
    return where


def _clean(text: str) -> None:
    assert "hardlinked-secret" not in text and SECRET_SHA not in text, text


def test_hostfs_refuses_a_hard_link_where_asked_and_reads_root_s_own(secret, safe_dir):
    link = _plant(secret, safe_dir / "tree-file")
    for read in (lambda: hostfs.read_file(str(link), 1 << 20, user_writable=True),
                 lambda: hostfs.sha256_file(str(link), 1 << 20, user_writable=True),
                 lambda: os.close(hostfs.open_file(str(link), user_writable=True))):
        with pytest.raises(hostfs.HardLink) as e:
            read()
        assert str(e.value).startswith(f"{link} is a hard link (a regular file with 2 links")
        _clean(str(e.value))
    assert hostfs.read_file(str(link), 1 << 20) == SECRET  # root's own tree: read as it is


def test_a_hard_link_among_the_manifest_inputs_is_refused_and_named(target, secret):
    """SCOPE-1: the source manifest's listing would carry the root-only file's hash."""
    link = _plant(secret, target.pilot / "config/opencode/tsconfig.json")
    with pytest.raises(manifest.ManifestError) as e:
        manifest.compute(str(target.pilot), str(target.code))
    assert f"{link} is a hard link" in str(e.value)
    _clean(str(e.value))
    go = _plant(secret, target.pilot / "supervisor/internal/planted.go")
    os.unlink(link)
    (target.pilot / "config/opencode/tsconfig.json").write_text("{}\n")
    with pytest.raises(manifest.ManifestError, match=f"{go} is a hard link"):
        manifest.compute(str(target.pilot), str(target.code))


def test_a_hard_link_in_the_checkouts_git_is_refused(target, secret):
    _plant(secret, target.code / ".git/refs/heads/main")
    with pytest.raises(gitrev.GitError) as e:
        gitrev.head(str(target.code))
    assert "refs/heads/main is a hard link" in str(e.value)
    _clean(str(e.value))


def test_server_env_that_is_a_hard_link_is_not_read(secret, safe_dir):
    env = serverenv.read(str(_plant(secret, safe_dir / "server.env")))
    assert env.content is None and env.password is None and "a hard link (2 links)" in env.problem
    assert "content not read: a hard link (2 links), not opened" in serverenv.problems(env, 0)


def test_the_harness_and_its_results_that_are_hard_links_are_not_read(secret, safe_dir):
    """PLUGIN-1: the harness is hashed (its hash goes to the evidence), its
    result files are read into the evidence."""
    with pytest.raises(smoke.HarnessRefused) as e:
        smoke.read_harness(str(_plant(secret, safe_dir / "harness.ts")), "0" * 64)
    assert "harness.ts is a hard link" in str(e.value)
    _clean(str(e.value))
    work = safe_dir / "work"
    work.mkdir()
    (work / "result-1.json").write_text("{}")
    _plant(secret, work / "result-2.json")
    found = smoke.read_results(str(work))
    assert found["result-1.json"] == b"{}"
    assert isinstance(found["result-2.json"], str) and "result-2.json is a hard link" in found["result-2.json"]
    _clean(repr(found))


def test_the_runtime_and_the_unit_file_that_are_hard_links_are_not_read(secret, safe_dir):
    """RUNTIME-1 hashes the runtime (the hash goes to the evidence and the
    Statement) and reads the candidate unit; RUNTIME-2 hashes the runtime again."""
    node = _plant(secret, safe_dir / "opencode2-node")
    with pytest.raises(node_runtime.RuntimeUnreadable, match="opencode2-node is a hard link") as e:
        node_runtime.identify(str(node))
    _clean(str(e.value))
    with pytest.raises(runtimeunit.HandoffError, match="opencode2-node cannot be opened") as e:
        runtimeunit.open_runtime(str(node), "0" * 64, hostfs.Limit(1 << 20))
    assert "hard link" in str(e.value)
    _clean(str(e.value))
    unit = _plant(secret, safe_dir / "opencode-v2.service")
    with pytest.raises(runtimeunit.HandoffError, match="opencode-v2.service is a hard link") as e:
        runtimeunit.runtime_unit_text(str(unit))
    _clean(str(e.value))


def test_the_runtime_digest_at_start_and_marker_time_refuses_a_hard_link(secret, safe_dir):
    from pty_acceptance.decision import hostfacts

    node = _plant(secret, safe_dir / "opencode2-node")
    inv = types.SimpleNamespace(runtime=types.SimpleNamespace(binary=str(node)),
                                limit=lambda key: hostfs.Limit(1 << 20, f"limits.{key}"))
    digest, said = hostfacts.runtime_digest(inv)
    assert digest is None and "is a hard link" in said
    _clean(said)
