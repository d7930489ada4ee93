"""BUILD-1..3: build the three binaries twice, as an unprivileged user, each
time in its own private temporary directory with its own Go caches; the two
builds of a binary run at the same time (nothing is shared between them).

Every go process runs as the build user in a transient unit of its own
(host/userunit.py: no supplementary groups, no new privileges, its output
read from a pipe only the suite holds, its cgroup killed and gone before its
result is read), against one deadline for the builds of a binary.

The source tree belongs to the service user (SUITE-4). Root copies it by
descriptor walk: openat with O_NOFOLLOW on every component, only directories
and regular files (a link, FIFO, socket or device is a BuildError naming the
path and its kind, and so is a hard link: a file with more than one link),
each copy created O_EXCL and handed to the build user by descriptor; the
copy is bounded (the inventory's limits.file_bytes per file, tree_bytes,
tree_entries and tree_depth per copy, each file's size taken from fstat
before it is read), so a tree of huge or sparse files cannot fill /tmp as
root, and walked iteratively (treewalk.py), so a chain of directories as
deep as the user likes is refused naming its bound. The build directories
are made in the run's scratch area (scratch.py: the build user cannot rename
them or put a FIFO in their place) and removed by descriptor. Go runs with an
environment built here, never inherited, and with
GOWORK=off and GOENV=off: a go.work in a parent directory (/tmp) or a go env
file cannot steer either build. The artifacts are read back the same way.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pty_acceptance.errors import Finding
from pty_acceptance.host import hostfs, scratch, terminal, treewalk, userunit
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
ERROR_KEPT = 2000  # the end of a failed build's output, in its BuildError


class BuildError(Finding):
    pass


@dataclass
class BuildSet:
    label: str
    directory: str
    commands: list[str] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)  # role -> bytes
    cpu_s: float = 0.0  # CPU time of its go processes, as systemd counted it (0: not counted)

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


def _job(acct, argv: list[str], cwd: str, env: dict[str, str], purpose: str) -> userunit.Job:
    return userunit.Job(purpose=purpose, argv=tuple(argv), account=acct, cwd=cwd, env=env, umask=0o022,
                        output_kept=1 << 16)


def _problem(ended: userunit.Ended, what: str) -> str | None:
    """Why a go run did not end cleanly (None: it did), its output's end escaped."""
    if ended.clean:
        return None
    why = [ended.ending()]
    if ended.left_behind:
        why.append(f"left running {', '.join(ended.left_behind)}")
    if ended.held_open:
        why.append("its output held open by a process outside its unit")
    if ended.not_gone:
        why.append(ended.not_gone)
    tail = ended.output.decode("utf-8", "replace").strip()[-ERROR_KEPT:]
    return terminal.escape(f"{what} failed ({'; '.join(why)}): {tail}")


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


def _copy_dir(src: int, parent: int, name: str, where: str, acct, tally: hostfs.Tally) -> None:
    """Directory `src` copied as `name` in `parent`: directories and regular
    files only, walked iteratively within the depth bound (treewalk.py); each
    directory is given to the build user once all it holds is copied."""
    made = [_new_dir(parent, name)]  # the copy of the directory being walked, and of each above it

    def visit(fd: int, entry: str, here: str, st: os.stat_result) -> bool:
        if stat.S_ISREG(st.st_mode):
            _copy_file(hostfs.open_file_at(fd, entry, here, user_writable=True), made[-1], entry, here, acct,
                       stat.S_IMODE(st.st_mode) & 0o755, tally)
            return False
        if stat.S_ISDIR(st.st_mode):
            made.append(_new_dir(made[-1], entry))
            return True
        raise BuildError(f"{here} is a {hostfs.kind_of(st.st_mode)}: the build source is "
                         "copied only as directories and regular files")

    def leave(here: str) -> None:
        done = made.pop()
        try:
            _give(done, acct, 0o755)
        finally:
            os.close(done)

    try:
        treewalk.walk(src, where, tally, visit, leave)
        _give(made[0], acct, 0o755)
    finally:
        for fd in made:
            os.close(fd)


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
    except hostfs.PathRefused as e:
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


def _build_all(jobs: list[tuple[BuildSet, userunit.Job]], role: str) -> None:
    """The builds of `role`, side by side in units of their own, against one
    deadline; each unit is gone before its result is read."""
    try:
        ended = userunit.run_all([j for _bs, j in jobs], TIMEOUT_S, "build")
    except userunit.UnitError as e:
        raise BuildError(f"the builds of {role} could not be run: {e}") from None
    for bs, done in zip((bs for bs, _ in jobs), ended, strict=True):
        bs.cpu_s += done.cpu_s
        if done.timed_out:
            raise BuildError(f"build {bs.label} of {role} did not finish within {TIMEOUT_S} s")
        why = _problem(done, f"build {bs.label} of {role}")
        if why:
            raise BuildError(why)


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
            jobs: list[tuple[BuildSet, userunit.Job]] = []
            for bs in sets:
                src = os.path.join(bs.directory, "src")
                out = os.path.join(bs.directory, "out", b.name)
                argv = [inv.build.go, *BUILD_ARGS, "-o", out, b.package]
                bs.commands.append(f"(cd {src} && {isolation} {SEED_COMMAND} -o {out} {b.package})")
                jobs.append((bs, _job(acct, argv, src, _env(inv, bs.directory),
                                      f"BUILD-1 build {bs.label} of {b.role}")))
            _build_all(jobs, b.role)
            for bs in sets:
                bs.artifacts[b.role] = _artifact(os.path.join(bs.directory, "out", b.name),
                                                 inv.limit("artifact_bytes"))
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
    except hostfs.PathRefused as e:
        raise BuildError(str(e)) from None
    except OSError as e:
        raise BuildError(f"{go_sum}: {e.strerror or e}") from None
    try:
        ver = userunit.run(_job(acct, [inv.build.go, "version"], "/", _env(inv, "/nonexistent"),
                                "BUILD-2 go version"), 60, "build")
    except userunit.UnitError as e:
        raise BuildError(f"{inv.build.go} version could not be run: {e}") from None
    why = _problem(ver, f"{inv.build.go} version")
    if why:
        raise BuildError(why)
    sets = build_sets(inv, acct, ("a", "b"))
    for s in sets:
        scratch.remove(s.directory)
    version = terminal.escape(ver.output.decode("utf-8", "replace").strip()[-200:])
    return Reproduction(acct.pw_name, version, go_sum_sha, sets)
