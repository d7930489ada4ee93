"""BUILD-1..3: build the three binaries twice, as an unprivileged user, each
time in its own private temporary directory with its own Go caches."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .inventory import Inventory

BUILD_ENV = {"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": "amd64"}
BUILD_ARGS = ["build", "-trimpath", "-ldflags=-buildid="]
# What the seed's exact command line is, for the evidence.
SEED_COMMAND = "CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags=-buildid="
DEFAULT_ENV = {"GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly",
               "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
TIMEOUT_S = 600


class BuildError(Exception):
    pass


@dataclass
class BuildSet:
    label: str
    directory: str
    commands: list[str] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)  # role -> bytes

    def sha256(self, role: str) -> str:
        return hashlib.sha256(self.artifacts[role]).hexdigest()


@dataclass
class Reproduction:
    user: str
    go_version: str
    go_sum_sha256: str
    sets: list[BuildSet]


def _account(name: str) -> pwd.struct_passwd:
    try:
        acct = pwd.getpwnam(name)
    except KeyError:
        raise BuildError(f"build user {name!r} does not exist on this host") from None
    if acct.pw_uid == 0:
        raise BuildError(f"build user {name!r} is uid 0: builds must not run as root")
    return acct


def _run_as(acct, argv, cwd, env, timeout=TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, env=env, user=acct.pw_uid, group=acct.pw_gid,
                              extra_groups=[], umask=0o022, capture_output=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise BuildError(f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{' '.join(argv)} did not finish within {timeout} s") from None


def _chown_tree(top: str, uid: int, gid: int) -> None:
    os.chown(top, uid, gid, follow_symlinks=False)
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            os.chown(os.path.join(dirpath, n), uid, gid, follow_symlinks=False)


def _env(inv: Inventory, home: str) -> dict[str, str]:
    env = dict(DEFAULT_ENV)
    env.update(inv.build.get("env", {}))
    env.update({"HOME": home, "GOCACHE": f"{home}/gocache", "GOPATH": f"{home}/gopath",
                "GOTMPDIR": f"{home}/tmp"})
    env.update(BUILD_ENV)
    return env


def build_once(inv: Inventory, acct, label: str) -> BuildSet:
    work = tempfile.mkdtemp(prefix=f"pty-acceptance-build-{label}-")
    try:
        return _build_in(inv, acct, label, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _build_in(inv: Inventory, acct, label: str, work: str) -> BuildSet:
    bs = BuildSet(label, work)
    src = os.path.join(work, "src")
    shutil.copytree(inv.build["source_dir"], src, symlinks=True)
    for sub in ("gocache", "gopath", "tmp", "out"):
        os.mkdir(os.path.join(work, sub), 0o700)
    _chown_tree(work, acct.pw_uid, acct.pw_gid)
    env = _env(inv, work)
    for b in inv.binaries_list:
        out = os.path.join(work, "out", b.name)
        argv = [inv.build["go"], *BUILD_ARGS, "-o", out, b.package]
        bs.commands.append(f"(cd {src} && {SEED_COMMAND} -o {out} {b.package})")
        done = _run_as(acct, argv, src, env)
        if done.returncode != 0:
            raise BuildError(f"build {label} of {b.role} failed ({done.returncode}): "
                             f"{done.stderr.decode(errors='replace').strip()[-2000:]}")
        bs.artifacts[b.role] = Path(out).read_bytes()
    return bs


def reproduce(inv: Inventory) -> Reproduction:
    acct = _account(inv.build["user"])
    go_sum = Path(inv.build["source_dir"]) / "go.sum"
    try:
        go_sum_sha = hashlib.sha256(go_sum.read_bytes()).hexdigest()
    except OSError as e:
        raise BuildError(f"{go_sum}: {e.strerror}") from None
    ver = _run_as(acct, [inv.build["go"], "version"], "/", _env(inv, "/nonexistent"), timeout=60)
    if ver.returncode != 0:
        raise BuildError(f"{inv.build['go']} version failed: {ver.stderr.decode(errors='replace')}")
    sets = []
    try:
        for label in ("a", "b"):
            sets.append(build_once(inv, acct, label))
    finally:
        for s in sets:
            shutil.rmtree(s.directory, ignore_errors=True)
    return Reproduction(acct.pw_name, ver.stdout.decode().strip(), go_sum_sha, sets)
