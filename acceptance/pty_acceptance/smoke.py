"""PLUGIN-1: running the review's plugin smoke harness under the host's bun.

The harness and bun are the host's (inventory ``plugin.*``). They run as the
service user, never root: ``preflight`` refuses before anything is started
when the user is uid 0, or when bun (or the harness) would run with other
privileges than the user's (set-user-ID or set-group-ID bit, file
capabilities). Environment fixed (PATH, HOME = the working directory, LANG,
TERM), stdin /dev/null, its own session and process group, umask 077; each
run has a deadline, after which the whole process group is killed and what
was still running is named. Its output is hostile: only its size and its
last line (escaped by the caller) are kept. The files it leaves in its
working directory are read by descriptor, regular files only, size-bounded.
"""

from __future__ import annotations

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

from . import hostfs

DEFAULT_DEADLINE_S = 120
OUTPUT_KEPT = 64 * 1024
RESULT_LIMIT = 256 * 1024
RESULT_FILES = 64
TERM = "dumb"
PATH = "/usr/bin:/bin"
PLACEHOLDER = re.compile(r"\{(helper|workdir)\}")


class Refused(Exception):
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


def preflight(inv) -> pwd.struct_passwd:
    """The account the harness runs as; Refused (never a run) when it cannot run
    safely: no bun, no harness, root, or elevated bun."""
    p = inv.plugin
    try:
        acct = pwd.getpwnam(inv.service_user)
    except KeyError:
        raise Refused(f"the service user {inv.service_user!r} does not exist") from None
    if acct.pw_uid == 0 or acct.pw_gid == 0:
        raise Refused(f"the service user {inv.service_user!r} is uid {acct.pw_uid} gid "
                      f"{acct.pw_gid}: the harness is never run as root")
    for path, what in ((p["bun"], "bun"), (p["harness"], "the harness")):
        problem = _privilege_problem(path, what)
        if problem:
            raise Refused(problem)
    return acct


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
    proc.stdout.close()
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
        for name in sorted(os.listdir(dfd))[:RESULT_FILES]:
            where = os.path.join(workdir, name)
            try:
                out[name] = hostfs.read_fd(hostfs.open_file_at(dfd, name, where), RESULT_LIMIT, where)
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
        return set(os.listdir(dfd))
    finally:
        os.close(dfd)


def inside(path: str, directory: str) -> bool:
    a, b = os.path.normpath(path), os.path.normpath(directory)
    return a == b or a.startswith(b.rstrip("/") + "/")
