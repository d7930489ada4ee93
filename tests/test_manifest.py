"""SCOPE-1: the source manifest equals what find | sort -u | sha256sum computes
on a hand-built tree, and every input file changes it."""

import hashlib
import os
import stat
import subprocess
import threading

import pytest

from pty_acceptance.provenance import manifest

from conftest import REPO, coreutils_manifest


def test_manifest_equals_coreutils(target):
    digest, listing = manifest.compute(str(target.pilot), str(target.code))
    assert digest == coreutils_manifest(target.pilot, target.code) == target.manifest
    paths = [l.split("  ", 1)[1] for l in listing.splitlines()]
    assert paths == sorted(paths, key=lambda p: p.encode())
    assert str(target.code / "packages/plugin/src/nested/no.ts") not in paths  # src/*.ts only
    assert str(target.code / "packages/plugin/src/Pty Transport.ts") in paths
    assert str(target.pilot / "supervisor/internal/protocol/frame_test.go") in paths


@pytest.mark.parametrize("rel", ["pilot/supervisor/internal/protocol/frame.go", "pilot/supervisor/go.sum",
                                 "pilot/opencode-v2.service", "code/bun.lock",
                                 "code/packages/plugin/src/index.ts"])
def test_each_input_changes_the_manifest(target, rel):
    before, _ = manifest.compute(str(target.pilot), str(target.code))
    with open(target.base / rel, "a") as f:
        f.write("one more line\n")
    after, _ = manifest.compute(str(target.pilot), str(target.code))
    assert before != after


def test_a_new_go_file_changes_the_manifest(target):
    before, _ = manifest.compute(str(target.pilot), str(target.code))
    (target.pilot / "supervisor/internal/extra.go").write_text("package x\n")
    assert manifest.compute(str(target.pilot), str(target.code))[0] != before


def test_missing_input_is_an_error(target):
    (target.pilot / "config/opencode/bun.lock").unlink()
    with pytest.raises(manifest.ManifestError, match="bun.lock"):
        manifest.compute(str(target.pilot), str(target.code))


def test_command_line(target):
    exe = REPO / ".venv/bin/pty-acceptance"
    done = subprocess.run([str(exe), "source-manifest", "--pilot-root", str(target.pilot),
                           "--code-root", str(target.code), "--list"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == target.manifest
    assert len(lines) == 1 + 10 + 3 + 2 + 2  # fixed + go + ts + code files


# ---------------------------------------------------------------- SUITE-4
# The pilot and code trees belong to the service user: a link, FIFO or device
# among the inputs is refused by name and kind, never hashed through.
def _secret(safe_dir):
    d = safe_dir / "rootonly"
    d.mkdir()
    os.chmod(d, 0o700)
    (d / "shadow").write_text("root:$y$secret:19000:0:99999:7:::\n")
    return d / "shadow"


def _refused(target, *words):
    with pytest.raises(manifest.ManifestError) as e:
        manifest.compute(str(target.pilot), str(target.code))
    for w in words:
        assert w in str(e.value), str(e.value)
    return str(e.value)


def test_a_linked_go_file_is_refused_not_hashed(target, safe_dir):
    secret = _secret(safe_dir)
    (target.pilot / "supervisor/internal/leak.go").symlink_to(secret)
    msg = _refused(target, "leak.go is a symlink")
    assert hashlib.sha256(secret.read_bytes()).hexdigest() not in msg


@pytest.mark.parametrize("rel", ["pilot/supervisor/go.sum", "pilot/opencode-v2.service", "code/bun.lock",
                                 "code/packages/plugin/src/index.ts"])
def test_a_linked_fixed_input_is_refused(target, safe_dir, rel):
    secret = _secret(safe_dir)
    (target.base / rel).unlink()
    (target.base / rel).symlink_to(secret)
    _refused(target, f"{target.base / rel} is a symlink")


@pytest.mark.parametrize("rel", ["code/packages/plugin/src", "pilot/supervisor", "pilot/config"])
def test_a_linked_directory_is_refused(target, safe_dir, rel):
    """A link in any component, not only the last: the files below it would be
    the link target's."""
    moved = safe_dir / "elsewhere"
    (target.base / rel).rename(moved)
    (target.base / rel).symlink_to(moved)
    _refused(target, f"{target.base / rel} is a symlink")


def test_a_linked_directory_inside_the_supervisor_is_not_descended(target, safe_dir):
    """find lists no file below a link (it does not follow one); neither do we."""
    moved = safe_dir / "elsewhere"
    (target.pilot / "supervisor/internal").rename(moved)
    (target.pilot / "supervisor/internal").symlink_to(moved)
    digest, listing = manifest.compute(str(target.pilot), str(target.code))
    assert "/internal/" not in listing and digest != target.manifest
    assert digest == coreutils_manifest(target.pilot, target.code)


def test_a_link_above_the_roots_is_refused(target, safe_dir):
    (safe_dir / "hop").symlink_to(target.base)
    with pytest.raises(manifest.ManifestError, match="hop is a symlink"):
        manifest.compute(str(safe_dir / "hop/pilot"), str(safe_dir / "hop/code"))


def test_a_fifo_is_refused_and_never_hangs(target):
    fifo = target.pilot / "supervisor/internal/hang.go"
    os.mkfifo(fifo)
    out = {}

    def run():
        try:
            manifest.compute(str(target.pilot), str(target.code))
        except manifest.ManifestError as e:
            out["error"] = str(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # release the reader the old code left blocked in open()
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("manifest.compute blocked on a FIFO")
    assert "hang.go is a FIFO" in out.get("error", ""), out


def test_a_device_is_refused_not_read(target):
    dev = target.pilot / "supervisor/internal/null.go"
    os.mknod(dev, stat.S_IFCHR | 0o644, os.makedev(1, 3))  # /dev/null
    _refused(target, "null.go is a character device")
