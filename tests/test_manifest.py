"""SCOPE-1: the source manifest equals what find | sort -u | sha256sum computes
on a hand-built tree, and every input file changes it."""

import subprocess

import pytest

from pty_acceptance import manifest

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
