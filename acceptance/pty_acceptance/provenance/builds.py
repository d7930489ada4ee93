"""BUILD-1..3: build the three binaries twice, as an unprivileged user, each
time in its own private temporary directory with its own Go caches; the two
builds of a binary run at the same time (nothing is shared between them).

The source tree belongs to the service user (SUITE-4). Root copies it by
descriptor walk: openat with O_NOFOLLOW on every component, only directories
and regular files (a link, FIFO, socket or device is a BuildError naming the
path and its kind, and so is a hard link: a file with more than one link),
each copy created O_EXCL and handed to the build user by descriptor; the
copy is bounded (the inventory's limits.file_bytes per file, tree_bytes and
tree_entries per copy, each file's size taken from fstat before it is
read), so a tree of huge or sparse files cannot fill /tmp as
root. The build directories are made in the run's scratch area (scratch.py:
the build user cannot rename them or put a FIFO in their place) and removed
by descriptor. Go runs with an environment built here, never inherited, and with
GOWORK=off and GOENV=off: a go.work in a parent directory (/tmp) or a go env
file cannot steer either build. The artifacts are read back the same way.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pty_acceptance.errors import Finding
from pty_acceptance.host import hostfs, scratch
from pty_acceptance.spec.inventory import Inventory

BUILD_ENV = {"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": "amd64"}
BUILD_ARGS = ["build", "-trimpath", "-ldflags=-buildid="]
# What the seed's exact command line is, for the evidence.
SEED_COMMAND = "CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags=-buildid="
# GOFLAGS is empty: no -mod mode is forced. The seed's command has no -mod
# flag, so go picks its own default, as the operator's build did: -mod=vendor
# when the tree has vendor/modules.txt and go.mod says go >= 1.14, readonly
# otherwise. Forcing -mod=readonly would make a vendored tree (its
# dependencies reviewed with it) look for them in a module cache that
# GOPROXY=off cannot fill, and fail to build.
DEFAULT_ENV = {"GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "",
               "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
# Set last, over the inventory's build.env: nothing outside the copied source
# (a go.work above it, a go env file) takes part in a build.
ISOLATION_ENV = {"GOWORK": "off", "GOENV": "off"}
TIMEOUT_S = 600


class BuildError(Finding):
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


def _give(fd: int, acct, mode: int) -> None:
    os.fchown(fd, acct.pw_uid, acct.pw_gid)
    os.fchmod(fd, mode)


def _copy_file(src_fd: int, dst_dir: int, name: str, where: str, acct, mode: int,
               tally: hostfs.Tally) -> None:
    data = hostfs.read_fd(tally.checked(src_fd, where), tally.bounds.file, where)
    hostfs.create_at(dst_dir, name, data, mode, owner=(acct.pw_uid, acct.pw_gid))


def _new_dir(parent: int, name: str) -> int:
    """A new private directory in `parent` (root's until it is given away)."""
    os.mkdir(name, 0o700, dir_fd=parent)
    return hostfs.open_dir_at(parent, name, name)


def _copy_tree(src: int, dst: int, where: str, acct, tally: hostfs.Tally) -> None:
    """Copy directory `src` into `dst`: directories and regular files only."""
    for name in sorted(tally.names(src, where)):
        here = os.path.join(where, name)
        st = os.stat(name, dir_fd=src, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            _copy_file(hostfs.open_file_at(src, name, here, user_writable=True), dst, name, here, acct,
                       stat.S_IMODE(st.st_mode) & 0o755, tally)
        elif stat.S_ISDIR(st.st_mode):
            sub = hostfs.open_dir_at(src, name, here)
            try:
                _copy_dir(sub, dst, name, here, acct, tally)
            finally:
                os.close(sub)
        else:
            raise BuildError(f"{here} is a {hostfs.kind_of(st.st_mode)}: the build source is "
                             "copied only as directories and regular files")


def _copy_dir(src: int, parent: int, name: str, where: str, acct, tally: hostfs.Tally) -> None:
    out = _new_dir(parent, name)
    try:
        _copy_tree(src, out, where, acct, tally)
        _give(out, acct, 0o755)
    finally:
        os.close(out)


def copy_source(source_dir: str, work: str, acct,
                bounds: hostfs.TreeBounds = hostfs.TREE_BOUNDS) -> str:
    """`work`/src: a copy of `source_dir` owned by the build user, within
    `bounds` (the inventory's tree_bounds()); returns its path."""
    wfd = hostfs.open_dir(work)
    try:
        sfd = hostfs.open_dir(source_dir)
        try:
            _copy_dir(sfd, wfd, "src", source_dir, acct, hostfs.Tally(bounds, f"the build source {source_dir}"))
        finally:
            os.close(sfd)
        for sub in ("gocache", "gopath", "tmp", "out"):
            fd = _new_dir(wfd, sub)
            try:
                _give(fd, acct, 0o700)
            finally:
                os.close(fd)
        _give(wfd, acct, 0o700)
    except hostfs.Refused as e:
        raise BuildError(f"the build source cannot be copied safely: {e}") from None
    finally:
        os.close(wfd)
    return os.path.join(work, "src")


def _env(inv: Inventory, home: str) -> dict[str, str]:
    """Built from nothing: root's own environment (GOFLAGS, GOWORK, ...) never reaches go."""
    env = dict(DEFAULT_ENV)
    env.update(inv.build.env)
    env.update({"HOME": home, "GOCACHE": f"{home}/gocache", "GOPATH": f"{home}/gopath",
                "GOTMPDIR": f"{home}/tmp"})
    env.update(ISOLATION_ENV)
    env.update(BUILD_ENV)
    return env


def _artifact(path: str, limit: hostfs.Limit) -> bytes:
    """A build output, read as root from the build user's directory: no link
    followed, at most `limit` (limits.artifact_bytes)."""
    try:
        return hostfs.read_file(path, limit, user_writable=True)
    except OSError as e:
        raise BuildError(f"the built artifact cannot be read safely: {e.strerror or e}") from None


def _spawn_as(acct, argv, cwd, env, err) -> subprocess.Popen:
    try:
        return subprocess.Popen(argv, cwd=cwd, env=env, user=acct.pw_uid, group=acct.pw_gid,
                                extra_groups=[], umask=0o022, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
    except FileNotFoundError:
        raise BuildError(f"{argv[0]} not found") from None


def _wait_all(jobs: list[tuple[BuildSet, str, subprocess.Popen, IO[bytes]]], role: str) -> None:
    """Wait for the builds of `role` running side by side, against one deadline;
    on any way out but success every one still running is killed and reaped."""
    end = time.monotonic() + TIMEOUT_S
    try:
        for bs, _out, proc, _err in jobs:
            try:
                proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BuildError(f"build {bs.label} of {role} did not finish within {TIMEOUT_S} s") from None
    finally:
        for _bs, _out, proc, _err in jobs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for bs, _out, proc, err in jobs:
        if proc.returncode != 0:
            err.seek(0)
            text = err.read(1 << 20).decode(errors="replace").strip()[-2000:]
            raise BuildError(f"build {bs.label} of {role} failed ({proc.returncode}): {text}")


def build_sets(inv: Inventory, acct, labels) -> list[BuildSet]:
    """One build per label, each in its own private temporary directory with its
    own source copy, GOCACHE, GOPATH, GOTMPDIR and output directory; the builds
    of one binary run side by side (two cores: two builds for the time of one).
    On failure every directory made here is removed."""
    sets: list[BuildSet] = []
    try:
        for label in labels:
            sets.append(BuildSet(label, scratch.make(f"pty-acceptance-build-{label}-")))
            copy_source(inv.build.source_dir, sets[-1].directory, acct, inv.tree_bounds())
        isolation = " ".join(f"{k}={v}" for k, v in ISOLATION_ENV.items())
        for b in inv.binaries_list:
            jobs: list[tuple[BuildSet, str, subprocess.Popen, IO[bytes]]] = []
            try:
                for bs in sets:
                    src = os.path.join(bs.directory, "src")
                    out = os.path.join(bs.directory, "out", b.name)
                    argv = [inv.build.go, *BUILD_ARGS, "-o", out, b.package]
                    bs.commands.append(f"(cd {src} && {isolation} {SEED_COMMAND} -o {out} {b.package})")
                    err = tempfile.TemporaryFile()  # root's, unnamed: the build only inherits the descriptor
                    try:
                        jobs.append((bs, out, _spawn_as(acct, argv, src, _env(inv, bs.directory), err), err))
                    except BaseException:
                        err.close()
                        raise
                _wait_all(jobs, b.role)
            finally:
                for job in jobs:
                    if job[2].poll() is None:
                        job[2].kill()
                        job[2].wait()
                    job[3].close()
            for bs, out, _proc, _err in jobs:
                bs.artifacts[b.role] = _artifact(out, inv.limit("artifact_bytes"))
    except BaseException:
        for bs in sets:
            scratch.remove(bs.directory)
        raise
    return sets


def build_once(inv: Inventory, acct, label: str) -> BuildSet:
    return build_sets(inv, acct, (label,))[0]


def reproduce(inv: Inventory) -> Reproduction:
    acct = _account(inv.build.user)
    go_sum = str(Path(inv.build.source_dir) / "go.sum")
    try:
        go_sum_sha = hostfs.sha256_file(go_sum, inv.limit("file_bytes"), user_writable=True)
    except hostfs.Refused as e:
        raise BuildError(str(e)) from None
    except OSError as e:
        raise BuildError(f"{go_sum}: {e.strerror or e}") from None
    ver = _run_as(acct, [inv.build.go, "version"], "/", _env(inv, "/nonexistent"), timeout=60)
    if ver.returncode != 0:
        raise BuildError(f"{inv.build.go} version failed: {ver.stderr.decode(errors='replace')}")
    sets = build_sets(inv, acct, ("a", "b"))
    for s in sets:
        scratch.remove(s.directory)
    return Reproduction(acct.pw_name, ver.stdout.decode().strip(), go_sum_sha, sets)
