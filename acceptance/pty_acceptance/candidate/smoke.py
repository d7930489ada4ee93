"""PLUGIN-1: running the review's plugin smoke harness under the host's bun.

bun and the harness are the reviewed ones (inventory ``plugin.*``): each is
pinned by SHA-256 (``plugin.bun_sha256``, ``plugin.harness_sha256``, from the
review, never from the host). bun must be root-controlled (OWN-1's chain
check: a root-owned regular file no group or other may write, every directory
from / down to it likewise), because it is run by path after it was hashed;
it is hashed by descriptor (bounded) before every run. The harness is read
once by descriptor (a no-follow walk from /, bounded) and must hash to its
pin; those exact bytes are written root-owned 0444 into a fresh root-owned
0755 directory of the suite's own, and bun runs that copy, so that whoever
owns the original (it may lie in /tmp) cannot change what runs. The copy is
hashed again before every run.

They run as the service user, never root: ``preflight`` refuses before
anything is started when the user is uid 0, or when bun would run with other
privileges than the user's (set-user-ID or set-group-ID bit, file
capabilities). Environment fixed (PATH, HOME = the working directory, LANG,
TERM), stdin /dev/null, its own session and process group, umask 077; each
run has a deadline, after which the whole process group is killed and what
was still running is named. Its output is hostile: only its size and its
last line (escaped by the caller) are kept. The files it leaves in its
working directory are read by descriptor, regular files only, size-bounded.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field

import psutil

from pty_acceptance import errors
from pty_acceptance.host import hostfs, scratch
from pty_acceptance.spec.inventory import Plugin

OUTPUT_KEPT = 64 * 1024
RESULT_LIMIT = 256 * 1024
RESULT_FILES = 64
NAMES_LISTED = 10_000  # names read from a directory the user can fill (its workspace, the plugin directory)
TERM = "dumb"
PATH = "/usr/bin:/bin"
PLACEHOLDER = re.compile(r"\{(helper|workdir)\}")
# bounds of the reads below: the inventory's limits.artifact_bytes (bun, ~100 MB)
# and limits.file_bytes (the harness); these where no inventory is at hand
BUN_LIMIT = hostfs.Limit(256 << 20, "limits.artifact_bytes")
HARNESS_LIMIT = hostfs.Limit(32 << 20, "limits.file_bytes")
COPY_MODE, COPY_DIR_MODE = 0o444, 0o755


class Refused(errors.Refused):
    """PLUGIN-1 cannot run the harness safely on this host; the message says why."""


@dataclass
class Run:
    label: str
    argv: list[str]
    exit_status: int | None = None  # None: killed at the deadline
    duration_s: float = 0.0
    last_line: bytes = b""
    output_bytes: int = 0
    deadline_s: float = 0.0
    still_running: list[str] = field(default_factory=list)  # at the deadline
    left_behind: list[str] = field(default_factory=list)    # after a normal exit
    files: dict[str, bytes | str] = field(default_factory=dict)  # name -> bytes, or why not read

    @property
    def passed(self) -> bool:
        return self.exit_status == 0 and not self.still_running and not self.left_behind


def _privilege_problem(path: str, what: str) -> str | None:
    """Why running `path` as the user could run with other privileges (or None)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{what} {path} does not exist"
    except OSError as e:
        return f"{what} {path} cannot be read: {e.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{what} {path} is a {hostfs.kind_of(st.st_mode)}, not a regular file"
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        bit = "set-user-ID" if st.st_mode & stat.S_ISUID else "set-group-ID"
        return (f"{what} {path} is {bit} (owner uid {st.st_uid}, group {st.st_gid}, mode "
                f"{stat.S_IMODE(st.st_mode):04o}): the harness would not run as the service user")
    try:
        os.getxattr(path, "security.capability", follow_symlinks=False)
        return f"{what} {path} carries file capabilities: the harness would run with them"
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Checked:
    """What preflight proved: the account, and the pinned harness's bytes."""
    account: pwd.struct_passwd
    bun: str      # evidence: "<sha256>  <path> (...)"
    harness: str  # evidence: the original's hash, owner and mode
    harness_bytes: bytes = field(repr=False)


def preflight(inv) -> Checked:
    """Refused (never a run) when the harness cannot run safely or is not the
    reviewed one: no bun, no harness, a root service user, an elevated bun, a
    bun that is not root-controlled, or either one not hashing to its pin."""
    p = inv.plugin
    try:
        acct = pwd.getpwnam(inv.service_user)
    except KeyError:
        raise Refused(f"the service user {inv.service_user!r} does not exist") from None
    if acct.pw_uid == 0 or acct.pw_gid == 0:
        raise Refused(f"the service user {inv.service_user!r} is uid {acct.pw_uid} gid "
                      f"{acct.pw_gid}: the harness is never run as root")
    bun_limit, harness_limit = limits(inv)
    bun = check_bun(p.bun, p.bun_sha256, bun_limit)
    data, harness = read_harness(p.harness, p.harness_sha256, harness_limit)
    return Checked(acct, bun, harness, data)


def limits(inv) -> tuple[hostfs.Limit, hostfs.Limit]:
    """(bun's bound, the harness's bound), from the inventory's limits."""
    return inv.limit("artifact_bytes"), inv.limit("file_bytes")


def _not_pinned(what: str, path: str, digest: str, key: str, pin: str) -> Refused:
    return Refused(f"{what} {path} hashes to {digest}, the inventory pins {pin} (plugin.{key}): "
                   f"not the reviewed {what}")


def _open(path: str, what: str, user_writable: bool = False) -> int:
    """`path` opened by the no-follow walk from /: a link anywhere, a FIFO or
    a device is refused, never opened (in the user's tree a hard link too)."""
    try:
        return hostfs.open_file(path, user_writable)
    except FileNotFoundError:
        raise Refused(f"{what} {path} does not exist") from None
    except hostfs.Refused as e:
        raise Refused(f"{what}: {e} (not followed)") from None
    except OSError as e:
        raise Refused(f"{what} {path} cannot be read: {e.strerror or e}") from None


def _pinned(path: str, what: str, key: str, pin: str, limit: hostfs.Limit, judge) -> os.stat_result:
    """`path` opened by the walk, its fstat judged (`judge` raises Refused), hashed
    by that descriptor (bounded) and compared with `pin` (plugin.<key>)."""
    fd = _open(path, what)
    try:
        st = os.fstat(fd)
        judge(st)
        digest = hostfs.sha256_fd_bounded(fd, limit, path)
    except hostfs.Refused as e:
        raise Refused(f"{what}: {e}") from None
    finally:
        os.close(fd)
    if digest != pin:
        raise _not_pinned(what, path, digest, key, pin)
    return st


def check_bun(path: str, pin: str, limit: hostfs.Limit = BUN_LIMIT) -> str:
    """bun root-controlled, not elevated, and hashing (by descriptor, bounded) to
    `pin`; evidence, or Refused. Run before every run: bun is run by path, so
    only a file no one but root can change stays what was hashed."""
    node = hostfs.Node.at(path)
    if node.st is None:
        raise Refused(f"bun {path} does not exist")
    problems = node.root_controlled_problems("regular file") + hostfs.chain_problems(path)
    if problems:
        raise Refused(f"bun {path} is not root-controlled (OWN-1's chain check: it is run by path "
                      f"after it is hashed): " + "; ".join(problems))
    problem = _privilege_problem(path, "bun")
    if problem:
        raise Refused(problem)

    pinned = (node.st.st_dev, node.st.st_ino)

    def same(st: os.stat_result) -> None:
        if (st.st_dev, st.st_ino) != pinned:
            raise Refused(f"bun {path} changed while it was checked")

    st = _pinned(path, "bun", "bun_sha256", pin, limit, same)
    return f"{pin}  {path} (root-owned, mode {stat.S_IMODE(st.st_mode):04o}, every directory root's; the pin)"


def read_harness(path: str, pin: str, limit: hostfs.Limit = HARNESS_LIMIT) -> tuple[bytes, str]:
    """The harness's bytes, read once by descriptor (bounded), hashing to `pin`;
    (bytes, evidence), or Refused. Its owner is evidence only: what runs is a
    root-owned copy of these bytes (stage_harness)."""
    fd = _open(path, "the harness", user_writable=True)  # the service user's file
    try:
        st = os.fstat(fd)
        data = hostfs.read_fd(fd, limit, path)  # closes fd
    except hostfs.Refused as e:
        raise Refused(f"the harness: {e}") from None
    except OSError as e:
        raise Refused(f"the harness {path} cannot be read: {e.strerror or e}") from None
    owner = f"uid {st.st_uid} gid {st.st_gid} mode {stat.S_IMODE(st.st_mode):04o}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != pin:
        raise _not_pinned("harness", f"{path} ({owner})", digest, "harness_sha256", pin)
    return data, f"{digest}  {path} ({owner}, read once by descriptor; the pin)"


def stage_harness(data: bytes, name: str) -> str:
    """The pinned harness bytes as `name`, root-owned 0444, in a fresh root-owned
    0755 directory of the run's scratch area (scratch.py: not the user's
    workspace, which the user owns and could swap a file in). Returns the
    directory; unstage removes it."""
    d = scratch.make("pty-acceptance-harness-", mode=COPY_DIR_MODE)
    dfd = hostfs.open_dir(d)
    try:
        hostfs.create_at(dfd, name, data, COPY_MODE, owner=(0, 0))
    finally:
        os.close(dfd)
    return d


def unstage(d: str, name: str) -> None:
    scratch.remove(d)


def check_copy(path: str, pin: str, limit: hostfs.Limit = HARNESS_LIMIT) -> str:
    """The staged copy still root-owned, read-only and the pinned bytes."""
    def roots(st: os.stat_result) -> None:
        if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != COPY_MODE:
            raise Refused(f"the harness copy {path} is uid {st.st_uid} mode "
                          f"{stat.S_IMODE(st.st_mode):04o}, not root's {COPY_MODE:04o}")

    _pinned(path, "harness", "harness_sha256", pin, limit, roots)
    return f"{pin}  {path}"


def before_run(p: Plugin, copy: str, bounds: tuple[hostfs.Limit, hostfs.Limit] = (BUN_LIMIT, HARNESS_LIMIT)) -> str:
    """PLUGIN-1 before each run: bun and the harness copy are still the pinned ones."""
    return (f"bun {check_bun(p.bun, p.bun_sha256, bounds[0])}; "
            f"harness copy {check_copy(copy, p.harness_sha256, bounds[1])}")


def fill(args: list[str], helper: str, workdir: str) -> list[str]:
    return [PLACEHOLDER.sub(lambda m: {"helper": helper, "workdir": workdir}[m.group(1)], a)
            for a in args]


def _group(pgid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                out.append(proc)
        except (ProcessLookupError, PermissionError):
            pass
    return out


def _describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"pid {p.pid} {p.name()}")
        except psutil.Error:
            out.append(f"pid {p.pid}")
    return out


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(label: str, bun: str, harness: str, args: list[str], acct: pwd.struct_passwd,
        workdir: str, deadline_s: float) -> Run:
    """One harness run in `workdir` as `acct`, bounded by `deadline_s`."""
    if acct.pw_uid == 0:  # preflight refuses first; this never runs as root either way
        raise Refused("the harness is never run as root")
    argv = [bun, harness, *args]
    r = Run(label, argv, deadline_s=deadline_s)
    env = {"PATH": PATH, "HOME": workdir, "LANG": "C.UTF-8", "TERM": TERM}
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=workdir, env=env, user=acct.pw_uid, group=acct.pw_gid,
                            extra_groups=[], umask=0o077, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, close_fds=True)
    tail = bytearray()

    def drain():
        while chunk := proc.stdout.read1(65536):
            r.output_bytes += len(chunk)
            tail.extend(chunk)
            del tail[:-OUTPUT_KEPT]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=deadline_s)  # a poll with a deadline, not a sleep
        r.exit_status = proc.returncode
    except subprocess.TimeoutExpired:
        r.still_running = _describe(_group(proc.pid))
        _kill_group(proc.pid)
        proc.wait()
    r.duration_s = time.monotonic() - t0
    if r.exit_status is not None:
        left = _group(proc.pid)
        if left:
            r.left_behind = _describe(left)
            _kill_group(proc.pid)
    reader.join(5)
    proc.stdout.close()  # type: ignore[union-attr]  # stdout=PIPE: never None
    lines = [ln for ln in bytes(tail).splitlines() if ln.strip()]
    r.last_line = lines[-1][-400:] if lines else b""
    r.files = read_results(workdir)
    return r


def read_results(workdir: str) -> dict[str, bytes | str]:
    """The files the harness left in `workdir`: regular files only, by
    descriptor, each at most RESULT_LIMIT bytes, at most RESULT_FILES names."""
    out: dict[str, bytes | str] = {}
    dfd = hostfs.open_dir(workdir)
    try:
        for name in sorted(hostfs.list_at(dfd, NAMES_LISTED))[:RESULT_FILES]:
            where = os.path.join(workdir, name)
            try:
                out[name] = hostfs.read_fd(hostfs.open_file_at(dfd, name, where, user_writable=True), RESULT_LIMIT,
                                           where)
            except hostfs.Refused as e:
                out[name] = f"not read: {e}"
            except OSError as e:
                out[name] = f"not read: {e.strerror or e}"
    finally:
        os.close(dfd)
    return out


def listing(directory: str) -> set[str] | str:
    """The names in `directory` (opened without following a link), or why not."""
    try:
        dfd = hostfs.open_dir(directory)
    except (hostfs.Refused, OSError) as e:
        return f"cannot list {directory}: {e}"
    try:
        names = hostfs.list_at(dfd, NAMES_LISTED + 1)
    finally:
        os.close(dfd)
    if len(names) > NAMES_LISTED:
        return f"{directory} holds more than {NAMES_LISTED} names: not compared"
    return set(names)


def inside(path: str, directory: str) -> bool:
    a, b = os.path.normpath(path), os.path.normpath(directory)
    return a == b or a.startswith(b.rstrip("/") + "/")
