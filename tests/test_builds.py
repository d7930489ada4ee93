"""BUILD-1 safely (SUITE-4): the source tree is copied by descriptor walk
(no link, FIFO or device), go runs with an environment built from nothing and
GOWORK=off, and the artifacts are read back without following a link.

A stand-in `go` (a shell script, run as the build user like the real one)
writes its environment and working directory where `-o` points."""

import hashlib
import os
import pwd
import stat
from pathlib import Path

import pytest
import yaml

from pty_acceptance.host import scratch
from pty_acceptance.provenance import builds
from pty_acceptance.spec import inventory

FAKE_GO = """#!/bin/sh
if [ "$1" = version ]; then echo "go version go1.0-standin linux/amd64"; exit 0; fi
out=""
while [ $# -gt 0 ]; do
    if [ "$1" = -o ]; then out=$2; fi
    shift
done
{ env | LC_ALL=C sort; echo "cwd=$(pwd)"; } > "$out"
if [ -n "$STANDIN_LINK_OUTPUT" ]; then rm -f "$out"; ln -s "$STANDIN_LINK_OUTPUT" "$out"; fi
if [ -n "$STANDIN_SECOND_NAME" ]; then ln "$out" "$out.second"; fi
"""


@pytest.fixture
def build(target, safe_dir):
    """build() -> BuildSet of one build of the target's source with the stand-in go."""
    go = safe_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    doc = yaml.safe_load(target.inventory.read_text())
    host = doc["all"]["hosts"]["fake"]
    host["build"]["go"] = str(go)
    made = []

    def run(env=None, source=None, both=False, go_path=None):
        host["build"]["go"] = str(go_path or go)
        host["build"]["env"] = env or {}
        host["build"]["source_dir"] = str(source or target.pilot / "supervisor")
        target.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        inv = inventory.load(target.inventory)
        if both:
            return builds.reproduce(inv)
        bs = builds.build_once(inv, builds._account("nobody"), "a")
        made.append(bs.directory)
        return bs

    yield run
    for d in made:
        scratch.remove(d)


@pytest.fixture
def secret(safe_dir):
    d = safe_dir / "rootonly"
    d.mkdir()
    d.chmod(0o700)
    (d / "shadow").write_text("root:$y$secret-hash:19000::::::\n")
    return d / "shadow"


def _env_of(artifact: bytes) -> dict[str, str]:
    lines = artifact.decode().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_go_runs_with_a_fixed_environment_and_gowork_off(build, monkeypatch):
    for k, v in {"GOFLAGS": "-toolexec=/tmp/evil", "GOWORK": "/tmp/go.work", "GOENV": "/tmp/env",
                 "PATH": "/tmp/bin:/usr/bin", "LD_PRELOAD": "/tmp/x.so"}.items():
        monkeypatch.setenv(k, v)
    bs = build()
    for role in ("supervisor", "launcher", "client"):
        env = _env_of(bs.artifacts[role])
        assert env["GOWORK"] == "off" and env["GOENV"] == "off", env
        assert env["GOFLAGS"] == "" and env["PATH"] == "/usr/local/bin:/usr/bin:/bin", env
        assert "LD_PRELOAD" not in env and "/tmp/" not in "".join(env.values()).replace(bs.directory, "")
        assert (env["CGO_ENABLED"], env["GOOS"], env["GOARCH"]) == ("0", "linux", "amd64")
        assert env["cwd"] == os.path.join(bs.directory, "src")
    assert all("GOWORK=off" in c and builds.SEED_COMMAND in c for c in bs.commands)


VENDORED = {  # a module whose one dependency is vendored: built from vendor/ or not at all (GOPROXY=off)
    "go.mod": "module opencode-pty\n\ngo 1.19\n\nrequire example.com/dep v1.0.0\n",
    "vendor/modules.txt": "# example.com/dep v1.0.0\n## explicit; go 1.19\nexample.com/dep\n",
    "vendor/example.com/dep/dep.go": "package dep\n\nconst Word = \"vendored\"\n",
    **{f"cmd/{r}/main.go": "package main\n\nimport \"example.com/dep\"\n\nfunc main() { println(dep.Word) }\n"
       for r in ("supervisor", "launcher", "client")},
}


def test_no_mod_mode_is_forced():
    """The seed's command has no -mod flag: go's own default decides (vendor
    when vendor/modules.txt exists, readonly otherwise), as for the operator."""
    assert builds.DEFAULT_ENV["GOFLAGS"] == ""
    assert "-mod" not in builds.SEED_COMMAND


@pytest.mark.skipif(not os.path.exists("/usr/bin/go"), reason="needs the real go (bookworm golang-go)")
def test_a_vendored_tree_builds_with_the_real_go_and_not_under_mod_readonly(build, safe_dir):
    src = safe_dir / "vendored"
    for rel, text in VENDORED.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    for p in [src, *src.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    bs = build(source=src, go_path="/usr/bin/go")
    assert all(bs.artifacts[r].startswith(b"\x7fELF") for r in ("supervisor", "launcher", "client"))
    # what the old default, -mod=readonly, did to it
    with pytest.raises(builds.BuildError, match="readonly|vendor|example.com/dep"):
        build(source=src, go_path="/usr/bin/go", env={"GOFLAGS": "-mod=readonly"})


def test_the_inventory_cannot_turn_gowork_back_on(build):
    env = _env_of(build(env={"GOWORK": "/tmp/go.work", "GOENV": "/tmp/env"}).artifacts["client"])
    assert (env["GOWORK"], env["GOENV"]) == ("off", "off")


def test_the_copy_is_the_source_tree_owned_by_the_build_user(build, target):
    bs = build()
    src, copy = target.pilot / "supervisor", Path(bs.directory) / "src"
    nobody = pwd.getpwnam("nobody").pw_uid
    theirs = sorted(p.relative_to(src) for p in src.rglob("*"))
    assert theirs == sorted(p.relative_to(copy) for p in copy.rglob("*"))
    for rel in theirs:
        st = os.lstat(copy / rel)
        assert st.st_uid == nobody and not stat.S_ISLNK(st.st_mode)
        if (src / rel).is_file():
            assert (copy / rel).read_bytes() == (src / rel).read_bytes()


@pytest.mark.parametrize("kind", ["symlink to a root-only file", "symlink to a directory", "FIFO",
                                  "character device"])
def test_the_copy_refuses_what_is_not_a_directory_or_a_regular_file(build, target, secret, kind):
    p = target.pilot / "supervisor/internal/planted.go"
    if kind == "symlink to a root-only file":
        p.symlink_to(secret)
    elif kind == "symlink to a directory":
        p.symlink_to(secret.parent)
    elif kind == "FIFO":
        os.mkfifo(p)
    else:
        os.mknod(p, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    with pytest.raises(builds.BuildError) as e:
        build()
    word = kind.split(" to ")[0]
    assert f"{p} is a {word}" in str(e.value), str(e.value)
    assert "secret-hash" not in str(e.value)


def test_the_copy_refuses_a_hard_link(build, target, secret):
    """SUITE-4: the copy is handed to the build user: a hard link to a
    root-only file would hand over the file itself."""
    p = target.pilot / "supervisor/internal/planted.go"
    os.link(secret, p)
    with pytest.raises(builds.BuildError) as e:
        build()
    assert f"{p} is a hard link" in str(e.value), str(e.value)
    assert "secret-hash" not in str(e.value)
    p.unlink()
    os.link(secret, target.pilot / "supervisor/go.sum.tmp")
    os.replace(target.pilot / "supervisor/go.sum.tmp", target.pilot / "supervisor/go.sum")
    with pytest.raises(builds.BuildError, match="go.sum is a hard link"):
        build(both=True)


def test_an_artifact_with_a_second_name_is_not_read(build):
    """The build user's output with two links: its other name could be anyone's file."""
    with pytest.raises(builds.BuildError, match="is a hard link"):
        build(env={"STANDIN_SECOND_NAME": "1"})


def test_a_link_above_the_source_is_refused(build, target, safe_dir):
    (safe_dir / "hop").symlink_to(target.pilot)
    with pytest.raises(builds.BuildError, match="hop is a symlink"):
        build(source=safe_dir / "hop/supervisor")


def test_an_artifact_that_is_a_link_is_not_read_through(build, secret):
    with pytest.raises(builds.BuildError, match="is a symlink") as e:
        build(env={"STANDIN_LINK_OUTPUT": str(secret)})
    assert "secret-hash" not in str(e.value)


def test_go_sum_is_hashed_only_as_a_regular_file(build, target, secret):
    rep = build(both=True)
    assert rep.go_sum_sha256 == hashlib.sha256((target.pilot / "supervisor/go.sum").read_bytes()).hexdigest()
    assert [s.label for s in rep.sets] == ["a", "b"] and not any(os.path.exists(s.directory) for s in rep.sets)
    (target.pilot / "supervisor/go.sum").unlink()
    (target.pilot / "supervisor/go.sum").symlink_to(secret)
    with pytest.raises(builds.BuildError, match="go.sum is a symlink"):
        build(both=True)


RENDEZVOUS_GO = """#!/bin/sh
if [ "$1" = version ]; then echo "go version go1.0-standin linux/amd64"; exit 0; fi
out=""
while [ $# -gt 0 ]; do
    if [ "$1" = -o ]; then out=$2; fi
    shift
done
case "$out" in */pty-acceptance-build-a-*) me=a; other=b ;; *) me=b; other=a ;; esac
role=$(basename "$out")
touch "$STANDIN_RDV/$me-$role"
i=0
while [ ! -e "$STANDIN_RDV/$other-$role" ]; do  # poll with a deadline: about 10 s
    i=$((i + 1)); [ $i -gt 200 ] && { echo "build $other of $role never ran beside $me" >&2; exit 7; }
    sleep 0.05
done
[ -z "$STANDIN_FAIL" ] || [ "$STANDIN_FAIL" != "$me" ] || { echo "stand-in failure of $me" >&2; exit 9; }
echo "$role" > "$out"
"""


@pytest.fixture
def rendezvous(safe_dir):
    """The stand-in go waits (bounded) until the other build of the same binary
    has begun: serial builds fail with exit 7 and "never ran beside"."""
    rdv = safe_dir / "rdv"
    rdv.mkdir()
    rdv.chmod(0o777)
    return rdv, safe_dir / "go"


def test_the_two_builds_of_each_binary_run_side_by_side(build, rendezvous):
    rdv, go = rendezvous
    go.write_text(RENDEZVOUS_GO)
    rep = build(env={"STANDIN_RDV": str(rdv)}, both=True)
    a, b = rep.sets
    assert sorted(os.listdir(rdv)) == sorted(f"{x}-{r}" for x in "ab" for r in (
        "opencode-pty-supervisor", "opencode-pty-launcher", "opencode-pty-client"))
    assert a.artifacts == b.artifacts and a.directory != b.directory
    assert not any(os.path.exists(s.directory) for s in rep.sets)


def test_a_failing_build_fails_both_and_leaves_no_directory(build, rendezvous):
    rdv, go = rendezvous
    go.write_text(RENDEZVOUS_GO)
    tmp = scratch.root().path  # where the build directories are made
    before = set(os.listdir(tmp))
    with pytest.raises(builds.BuildError, match=r"build b of \w+ failed \(exit 9\): stand-in failure of b"):
        build(env={"STANDIN_RDV": str(rdv), "STANDIN_FAIL": "b"}, both=True)
    assert not [d for d in set(os.listdir(tmp)) - before if d.startswith("pty-acceptance-build-")]
