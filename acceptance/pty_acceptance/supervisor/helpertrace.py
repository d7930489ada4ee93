"""The fixed helper in a real session, under strace.

How the helper is started: the suite's disposable peer (its MainPID, the
agent) connects and authenticates, then hands the connected socket over
(RawSession.open); the suite starts the installed helper exactly the way the
peer does: fd 0 its stdin, fd 1 and 2 its stdout (socketpairs the suite
holds), fd 3 the authenticated connection, fd 4 an O_DIRECTORY descriptor of
the approved directory, nothing else; environment PATH and LANG only. The only
difference is strace in front of it. strace runs as root and drops to the
service user for the helper (`-u`), so a host whose ptrace policy stops the
service user from tracing still yields a trace; the helper's parent is strace
rather than the peer agent, which the protocol cannot see. strace starts
behind a gate and is moved into a transient scope of its own before it runs
(userunit.Scope, SUITE-4): the helper and whatever it starts are in that
scope's cgroup, which is killed and waited for at the end.

    strace -f -qq -v -xx -s N -o FILE -e inject=sendmsg:signal=SIGSTOP:when=1

-f every thread; -xx every string in hex (nothing to unescape, nothing
ambiguous); -s N long enough for a whole START or DATA frame; the first
sendmsg (the START) is followed by a SIGSTOP, so the suite reads
/proc/<helper>/fd at that exact point (group-stop: every thread stopped), then
sends SIGCONT. strace's own output file is close-on-exec: the helper never
holds it.

Everything read here is hostile: trace strings are decoded from hex and kept
as bytes; frames go through protocol.Decoder with its bounds.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from typing import cast

import psutil

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import observe, proc, scratch, strace, userunit
from pty_acceptance.host.strace import HEX_STRING, Syscall, parse, unhex
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.peer import DisposableUnit, open_cwd
from pty_acceptance.supervisor.session_clients import MAX_OUTPUT, RawSession

HELPER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # what agent.py gives the helper
STRING_BYTES = p.START_BOUND + p.HEADER.size + 64
FREEZE_DEADLINE_S = 30.0  # a bound for the failure, not a wait: a loaded host took over 5 s
RUN_DEADLINE_S = 20.0

# HELPER-5: Go runtime metadata the exact reference build reads at start
# (observed on the reference host, go1.19.8: osinit reads the huge page size).
# Any other path is a failure. Whether the target's list belongs in the
# inventory is an open question for the lead; until then it is this constant.
RUNTIME_METADATA = frozenset({"/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"})

# Every x86-64 system call that takes a path name.
PATH_SYSCALLS = frozenset("""
open openat openat2 creat stat lstat newfstatat statx access faccessat faccessat2
readlink readlinkat execve execveat chdir chroot mkdir mkdirat rmdir unlink unlinkat
rename renameat renameat2 link linkat symlink symlinkat truncate chmod fchmodat chown
lchown fchownat utime utimes futimesat utimensat mknod mknodat getxattr lgetxattr
setxattr lsetxattr listxattr llistxattr removexattr lremovexattr statfs
inotify_add_watch fanotify_mark mount umount2 pivot_root swapon swapoff acct uselib
name_to_handle_at open_tree move_mount fspick mount_setattr quotactl quotactl_fd
""".split())
# System calls that make a socket or reach another endpoint on their own.
SOCKET_SYSCALLS = frozenset("socket socketpair connect bind listen accept accept4".split())
# System calls that create a descriptor (besides the path and socket ones).
FD_SYSCALLS = frozenset("""
pipe pipe2 dup dup2 dup3 epoll_create epoll_create1 eventfd eventfd2 signalfd signalfd4
timerfd_create inotify_init inotify_init1 fanotify_init memfd_create memfd_secret
pidfd_open pidfd_getfd userfaultfd perf_event_open bpf io_uring_setup open_by_handle_at
fsopen fsmount mq_open
""".split()) | {"open", "openat", "openat2", "creat", "open_tree", "fspick",
                "socket", "socketpair", "accept", "accept4"}
PROCESS_SYSCALLS = frozenset("fork vfork clone clone3 execve execveat".split())
OUTPUT_SYSCALLS = frozenset("write sendmsg sendto writev pwrite64 pwritev pwritev2 sendmmsg "
                            "sendfile splice tee vmsplice copy_file_range".split())

_IOV = re.compile(r'iov_base="((?:\\x[0-9a-f]{2})*)"(\.\.\.)?')
_RIGHTS = re.compile(r"cmsg_type=SCM_RIGHTS, cmsg_data=\[([0-9, ]*)\]")
_CMSG = re.compile(r"cmsg_type=(\w+)")


class TraceError(Unreadable):
    pass


@dataclass
class TracedRun:
    """One session through the traced helper, and what was seen of it."""

    helper: str
    argv: list[str]
    runtime_s: int
    stdin: bytes
    calls: list[Syscall] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    helper_pid: int | None = None
    frozen: dict[int, str] | None = None  # /proc/<helper>/fd at the SIGSTOP after START
    frozen_flags: dict[int, int] = field(default_factory=dict)
    frozen_stat: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # (mode, dev, ino)
    frozen_problem: str | None = None
    frozen_exe: str | None = None
    sock: dict = field(default_factory=dict)  # facts about the authenticated connection
    cwd: dict = field(default_factory=dict)  # facts about the approved directory
    output: bytes = b""
    status: int | None = None
    strace_stderr: str = ""
    scope_left: str = ""  # why strace's scope could not be seen gone after the run (SUITE-4); '' gone

    # ------------------------------------------------------------ queries
    def exec_call(self) -> Syscall | None:
        return next((c for c in self.calls if c.name == "execve"), None)

    def later_calls(self) -> list[Syscall]:
        """Every call after the helper's own execve (what the helper did)."""
        first = self.exec_call()
        return [c for c in self.calls if c is not first]

    def path_calls(self) -> list[tuple[Syscall, list[str]]]:
        out = []
        for c in self.later_calls():
            if c.name in PATH_SYSCALLS:
                out.append((c, [s.decode("utf-8", "replace") for s in c.strings()]))
        return out

    def opened_paths(self) -> list[str]:
        return sorted({p for _, ps in self.path_calls() for p in ps})

    def forbidden_paths(self) -> list[str]:
        """Path system calls naming anything but the runtime metadata (or "" with AT_EMPTY_PATH)."""
        bad = []
        for c, paths in self.path_calls():
            extra = [x for x in paths if x not in RUNTIME_METADATA and x != ""]
            if extra or c.name not in ("open", "openat", "openat2", "newfstatat", "statx"):
                bad.append(c.show())
        return bad

    def socket_calls(self) -> list[Syscall]:
        return [c for c in self.later_calls() if c.name in SOCKET_SYSCALLS]

    def new_descriptors(self) -> list[Syscall]:
        """Calls that created a descriptor, other than runtime-metadata opens; plus
        fcntl F_DUPFD* and received SCM_RIGHTS."""
        out = []
        for c in self.later_calls():
            if c.name in FD_SYSCALLS:
                paths = [s.decode("utf-8", "replace") for s in c.strings()]
                if c.name in ("open", "openat", "openat2") and paths and \
                        all(x in RUNTIME_METADATA for x in paths):
                    continue
                out.append(c)
            elif c.name == "fcntl" and "F_DUPFD" in c.args:
                out.append(c)
            elif c.name in ("recvmsg", "recvmmsg") and "SCM_RIGHTS" in c.args:
                out.append(c)
        return out

    def runtime_fds_closed(self) -> list[str]:
        """Runtime-metadata descriptors the helper opened and never closed."""
        opened = {}
        for c in self.later_calls():
            if c.name in ("open", "openat", "openat2") and c.ret is not None and c.ret >= 0:
                opened[c.ret] = c.show()
            elif c.name == "close" and c.first_int() in opened and c.ret == 0:
                opened.pop(cast(int, c.first_int()))  # in opened: not None
        return list(opened.values())

    def process_calls(self) -> list[Syscall]:
        """execve after the first, and any fork/clone that is not a thread."""
        out = []
        for c in self.later_calls():
            if c.name in ("execve", "execveat", "fork", "vfork"):
                out.append(c)
            elif c.name in ("clone", "clone3") and "CLONE_THREAD" not in c.args:
                out.append(c)
        return out

    def rights(self) -> list[tuple[Syscall, list[list[int]], list[str]]]:
        """Every call carrying ancillary data: (call, SCM_RIGHTS fd lists, cmsg types)."""
        out = []
        for c in self.later_calls():
            types = _CMSG.findall(c.args)
            if types:
                lists = [[int(x) for x in m.group(1).replace(" ", "").split(",") if x]
                         for m in _RIGHTS.finditer(c.args)]
                out.append((c, lists, types))
        return out

    def stream_to_supervisor(self) -> tuple[bytes, list[str]]:
        """Bytes the helper wrote on fd 3, in order; problems if any call cannot be accounted."""
        data, problems = bytearray(), []
        for c in self.later_calls():
            if c.name not in OUTPUT_SYSCALLS or c.first_int() != 3:
                continue
            if c.ret is None or c.ret < 0:
                if c.ret is None:
                    problems.append(f"output call without a result: {c.show()}")
                continue
            if c.name in ("write", "sendto", "pwrite64"):
                found = HEX_STRING.search(c.args)
                chunks = [found] if found else []
            elif c.name in ("sendmsg", "writev", "pwritev", "pwritev2"):
                chunks = list(_IOV.finditer(c.args))
            else:
                problems.append(f"unexpected output system call on fd 3: {c.show()}")
                continue
            blob = b"".join(unhex(m.group(1)) for m in chunks)
            if len(blob) < c.ret:
                problems.append(f"trace string shorter than the bytes written: {c.show()}")
            data += blob[: c.ret]
        return bytes(data), problems

    def frames_to_supervisor(self) -> tuple[list[p.Frame], list[str]]:
        data, problems = self.stream_to_supervisor()
        dec = p.Decoder(p.TO_SUPERVISOR)
        try:
            frames = dec.feed(data)
        except p.ProtocolError as e:
            return [], problems + [f"the helper wrote a frame the format forbids: {e}"]
        if dec.buf:
            problems.append(f"{len(dec.buf)} bytes after the last whole frame")
        return frames, problems

    def stdin_reads(self) -> list[int]:
        return [c.ret for c in self.later_calls() if c.name == "read" and c.first_int() == 0
                and c.ret is not None and c.ret >= 0]


# ----------------------------------------------------------------- running
def strace_path() -> str:
    path = strace.installed()
    if path is None:
        raise TraceError("strace is not installed on this host: the helper's system calls "
                         "cannot be observed (install strace to run HELPER-1..5 and PROTO-2)")
    return path


def _arrange(fds_in_order):
    """preexec: exactly fds 0-4 (as agent.py op_spawn does) and the scope's gate
    at 5 (the gate closes it before strace runs), nothing else."""
    def child():
        high = [os.dup(fd) for fd in fds_in_order]
        moved = [os.dup2(fd, 100 + i) if fd < 100 else fd for i, fd in enumerate(high)]
        for n, fd in enumerate(moved):
            os.dup2(fd, n)
        os.closerange(len(moved), os.sysconf("SC_OPEN_MAX"))
    return child


def _socket_facts(s: socket.socket) -> dict:
    pid, uid, gid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return {"inode": os.fstat(s.fileno()).st_ino, "family": s.family.name,
            "type": socket.SocketKind(s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)).name,
            "peername": s.getpeername(), "peer_pid": pid, "peer_uid": uid}


def _helper_child(strace_pid: int) -> int | None:
    """strace's child once it has exec'd (the helper, or whatever stands at its path)."""
    found = _traced(strace_pid)
    return found[0] if found else None


def _traced(strace_pid: int) -> list[int]:
    """Every process strace traces that has exec'd (its children, and theirs),
    oldest first: the helper, and anything it started."""
    out = []
    try:
        me = psutil.Process(strace_pid)
        mine = me.exe()
        for c in me.children(recursive=True):
            try:
                if c.exe() != mine:
                    out.append(c.pid)
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return out


def _continue_all(strace_pid: int) -> None:
    """SIGCONT to every process strace traces (the helper and anything it started)."""
    try:
        kids = psutil.Process(strace_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for c in kids:
        try:
            os.kill(c.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _all_stopped(pid: int) -> bool:
    try:
        states = [proc.stat_field(proc.stat_line(pid, tid), 3) for tid in proc.threads(pid)]
        return bool(states) and all(s in b"tT" for s in states)
    except OSError:
        return False


def _freeze(run: TracedRun, strace_pid: int, trace_file: str) -> None:
    """Wait for the SIGSTOP after the first sendmsg and read the helper's descriptors."""
    end = time.monotonic() + FREEZE_DEADLINE_S
    delay = 0.002
    while True:
        pid = run.helper_pid or _helper_child(strace_pid)
        if pid and not _all_stopped(pid):  # the one stopped may be another than the first seen (CI: a
            pid = next((p for p in _traced(strace_pid) if _all_stopped(p)), pid)  # pid read gone at the end)
        run.helper_pid = pid
        if pid:
            try:
                with open(trace_file, "rb") as f:
                    seen = b"--- stopped by SIGSTOP ---" in f.read()
            except FileNotFoundError:  # strace's child runs before strace has made its output
                seen = False
            if seen and _all_stopped(pid):
                run.frozen_exe = proc.exe(pid)
                run.frozen = proc.fds(pid)
                for fd in run.frozen:
                    try:
                        run.frozen_flags[fd] = observe.fd_flags(pid, fd)
                        st = proc.fd_stat(pid, fd)
                        run.frozen_stat[fd] = (st.st_mode, st.st_dev, st.st_ino)
                    except (OSError, ValueError):
                        pass
                return
        if time.monotonic() > end:
            run.frozen_problem = (f"the helper (pid {pid}) was not stopped after a sendmsg within "
                                  f"{FREEZE_DEADLINE_S} s: {_unfrozen(pid, trace_file, strace_pid)}")
            return
        time.sleep(delay)  # poll interval, not a wait for an outcome
        delay = min(delay * 2, 0.05)


def _unfrozen(pid: int | None, trace_file: str, strace_pid: int | None = None) -> str:
    """What was true at the freeze deadline: the trace's sendmsg calls and
    SIGSTOP lines, and the state of each helper thread."""
    try:
        with open(trace_file, "rb") as f:
            text = f.read()
    except OSError as e:
        text, said = b"", f"no trace ({e.strerror})"
    else:
        said = (f"the trace ({len(text)} bytes) has {text.count(b'sendmsg(')} sendmsg call(s), "
                f"{text.count(b'--- stopped by SIGSTOP ---')} SIGSTOP stop(s), "
                f"{text.count(b'--- SIGCONT')} SIGCONT(s), {text.count(b'+++ exited')} exit(s) and "
                f"{text.count(b'+++ killed')} death(s) by a signal")
    states = "none"
    if pid:
        try:
            states = ", ".join(f"{tid} {proc.stat_field(proc.stat_line(pid, tid), 3).decode('ascii', 'replace')}"
                               for tid in proc.threads(pid)) or "none"
        except (OSError, ValueError) as e:
            states = f"unreadable ({e})"
    traced = "none"
    if strace_pid:
        parts = []
        for t in _traced(strace_pid):
            try:
                parts.append(f"{t} {proc.stat_field(proc.stat_line(t), 3).decode('ascii', 'replace')}")
            except (OSError, ValueError):
                parts.append(f"{t} gone")
        traced = ", ".join(parts) or "none"
    return f"{said}; helper threads (tid state): {states}; traced processes now (pid state): {traced}"


def _read_to_end(sock: socket.socket, deadline_s: float) -> bytes:
    out, end = b"", time.monotonic() + deadline_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise TraceError(f"helper output did not end within {deadline_s} s; so far {out[-200:]!r}")
        ready, _, _ = select.select([sock], [], [], left)
        if ready:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            if len(out) < MAX_OUTPUT:
                out += chunk


def run_traced(peer: DisposableUnit, socket_path: str, helper: str, service_user: str,
               argv: list[str], stdin: bytes, cwd: str = "/tmp", runtime_s: int = 60) -> TracedRun:
    """Authenticate, then run one session through the traced helper; `stdin` is
    written before the helper starts and then closed."""
    strace = strace_path()
    run = TracedRun(helper=helper, argv=argv, runtime_s=runtime_s, stdin=stdin)
    tmp = scratch.make("pty-acceptance-trace-")  # root 0700
    trace_file = os.path.join(tmp, "helper.trace")
    raw = RawSession(peer, socket_path).open()
    sock = cast(socket.socket, raw.sock)  # open() set it
    sock.setblocking(True)  # the agent's timeout left O_NONBLOCK on the shared description
    in_mine, in_theirs = socket.socketpair()
    out_mine, out_theirs = socket.socketpair()
    dirfd = open_cwd(cwd)
    proc = None
    scope = userunit.Scope("HELPER: the fixed helper under strace")
    try:
        run.sock = _socket_facts(sock)
        st = os.fstat(dirfd)
        run.cwd = {"path": cwd, "dev": st.st_dev, "ino": st.st_ino}
        in_mine.sendall(stdin)
        in_mine.close()
        args = [strace, "-f", "-qq", "-v", "-xx", "-s", str(STRING_BYTES), "-o", trace_file,
                "-u", service_user, "-e", "inject=sendmsg:signal=SIGSTOP:when=1", "--",
                helper, "--runtime", str(runtime_s), "--", *argv]
        with open(os.path.join(tmp, "strace.err"), "wb") as err:
            proc = subprocess.Popen(scope.argv(args), preexec_fn=_arrange([
                in_theirs.fileno(), out_theirs.fileno(), out_theirs.fileno(), sock.fileno(), dirfd,
                scope.gate_r]), close_fds=False, env=HELPER_ENV, cwd="/", stderr=err)
        for s in (in_theirs, out_theirs, sock):
            s.close()
        os.close(dirfd)
        dirfd = -1
        try:
            scope.enter(proc.pid)
        except userunit.UnitError as e:
            raise TraceError(str(e)) from None
        _freeze(run, proc.pid, trace_file)
        _continue_all(proc.pid)
        try:
            run.output = _read_to_end(out_mine, RUN_DEADLINE_S)
            run.status = proc.wait(RUN_DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise TraceError(f"strace/helper did not exit within {RUN_DEADLINE_S} s after its output "
                             f"ended; strace said {_tail(tmp)!r}") from None
        except TraceError as e:
            raise TraceError(f"{e}; strace said {_tail(tmp)!r}") from None
        run.strace_stderr = _tail(tmp)
        with open(trace_file, "rb") as f:
            text = f.read().decode("ascii", "replace")
        run.calls, run.other = parse(text)
        return run
    finally:
        if proc is not None and proc.poll() is None:
            if run.helper_pid:
                try:
                    os.kill(run.helper_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.kill()
            proc.wait(5)
        run.scope_left = scope.close()
        for s in (in_mine, in_theirs, out_mine, out_theirs, sock):
            s.close()
        if dirfd >= 0:
            os.close(dirfd)
        raw.close()
        scratch.remove(tmp)


def _tail(tmp: str) -> str:
    try:
        with open(os.path.join(tmp, "strace.err"), "rb") as f:
            return f.read()[-400:].decode("utf-8", "replace")
    except OSError:
        return ""


def lines_of(n_lines: int, width: int = 64) -> bytes:
    """n_lines lines of `width` bytes each (newline included): PTY-friendly input."""
    return (b"x" * (width - 1) + b"\n") * n_lines
