"""RUNTIME-2: the candidate runtime as the disposable peer, one PTY session
through its API, and who holds what while that session lives
(TARGET-CONTRACT section 8).

The run, in order:

1. The candidate unit file (units.candidate_file, read without following
   links) gives ExecStart= (its program must be runtime.binary, whose
   identity RUNTIME-1 proves), WorkingDirectory= and EnvironmentFile=.
   `--port` is replaced by a free loopback port. Every EnvironmentFile= must
   name cutover.server_env (the runtime's environment comes from nothing
   else): any other path fails before anything is read. server.env must then
   pass CUT-3's checks, read by the suite (walked from / without following a
   link, lstat + O_NOFOLLOW, bounded), and be the service user's (uid and
   gid); it is handed to systemd as a root-only copy, so that PID 1 never
   opens a path the service user controls and the password never shows in
   the unit's properties.
2. runtime.binary is opened by the same no-follow walk and hashed by that
   descriptor (bounded): it must be runtime.sha256, the file RUNTIME-1
   hashed. The descriptor is kept. The command runs as the transient
   `units.peer` (User=/Group= the service user, system.slice, the run's
   tag): the runtime is now the peer's MainPID. The listener on the port
   must be that MainPID, its /proc/<pid>/exe the very file of the kept
   descriptor (st_dev, st_ino; not whatever the path names by then: the
   user owns its directory and can rename another file in), before the
   password is sent to it.
3. strace (root, absolute path) attaches to every thread of the runtime and
   follows its children, recording only execve and sendmsg with descriptors
   decoded (-yy) and strings cut to 2 bytes: which child exec'd the fixed
   helper, and what that child sent on which descriptor. No payload byte is
   kept; the trace is parsed, never shown.
4. POST /api/pty with a command whose argv carries a token, in a fresh 0700
   directory of the service user; the supervisor's new session unit is seen
   through UnitNew, its processes through its cgroup.
5. While the session lives every process on the host is read: who holds the
   client end of each supervisor connection (sock_diag + /proc/<pid>/fd), who
   holds the directory (stat of every /proc/<pid>/fd entry: no open, so no
   FIFO or device is ever opened), and whether the runtime or any of its
   descendants holds a terminal.
6. DELETE /api/pty/<id>; the session must end; MainPID must still execute
   the kept descriptor's file, which is hashed again through that descriptor
   (the file that was hashed before the start and proven to be what runs;
   opening /proc/<pid>/exe instead would trust that the pid is still the
   runtime's); both hashes must be the pin. Then the runtime unit is stopped
   and the directory removed, on every path.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import shlex
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from typing import cast

from pty_acceptance.errors import Unreadable
from pty_acceptance.candidate import opencode_api, serverenv
from pty_acceptance.host import hostfs, observe, proc, programs, rundir, scratch
from pty_acceptance.provenance import runtime
from pty_acceptance.host.bus import SERVICE_IFACE, BusError, Systemd
from pty_acceptance.host.cgroups import cgroup_pids, unit_pids
from pty_acceptance.host.polling import poll
from pty_acceptance.host.processes import token_processes
from pty_acceptance.supervisor.footprint import Footprint, HostReadError
from pty_acceptance.supervisor.gone import wait_gone
from pty_acceptance.supervisor.isolation import connections_to, socket_file_id, unix_sockets
from pty_acceptance.supervisor.peer import TAG_PREFIX, PeerError, refuse_foreign, stop_unit, workspace
from pty_acceptance.supervisor.sessionunit import Owner
from pty_acceptance.supervisor.tokens import new_token
from pty_acceptance.host.terminal import escape
from pty_acceptance.host.unitwatch import UnitWatch

LISTEN_DEADLINE_S = 30.0
ATTACH_DEADLINE_S = 10.0
SESSION_DEADLINE_S = 15.0
STRACE_EXIT_S = 5.0
DELETE_STAGE = "DELETE /api/pty/<id>"
SESSION_COMMAND, SESSION_COMM = "/bin/sleep", b"sleep"  # argv: 600.<token>1, a 600 s sleep
TRACE_STRINGS = 2  # bytes of any string strace prints: enough to see an array was cut

_PORT_ARG = re.compile(r"^--port(=.*)?$")
_SPECIFIER = re.compile(r"%[A-Za-z%]")
# 1234 sendmsg(3<UNIX-STREAM:[111->222]>, {... cmsg_data=[4</some/dir>]}], ...}, 0) = 10
# strace -f names the thread (tid, padded): a Go helper sends from a thread of its own
_EXECVE = re.compile(r'^(\d+)\s+execve\("((?:[^"\\]|\\.)*)", .*\) = 0$')
_SENDMSG = re.compile(r"^(\d+)\s+sendmsg\((\d+)<UNIX-STREAM:\[(\d+)->(\d+)\]>, (.*)\) = (\d+)$")
_RIGHTS = re.compile(r"cmsg_type=SCM_RIGHTS, cmsg_data=\[(.*?)\]\}")
_RIGHTS_FD = re.compile(r"^(\d+)<(.*)>$")


class HandoffError(Unreadable):
    pass


# ------------------------------------------------------------------ the command
@dataclass(frozen=True)
class CandidateCommand:
    argv: list[str]
    working_directory: str | None
    environment_files: list[tuple[str, bool]]  # (path, missing is ok)
    shown: str                                  # the ExecStart= line, for evidence


def candidate_command(text: str, port: int) -> CandidateCommand:
    """The candidate unit's command with --port replaced (HandoffError when it
    cannot be run as written)."""
    execs: list[str] = []
    workdir: str | None = None
    env_files: list[str] = []
    for section, key, value in runtime.unit_lines(text):
        if section != "Service":
            continue
        if key == "ExecStart":
            execs = [] if value == "" else execs + [value]
        elif key == "WorkingDirectory":
            workdir = value or None
        elif key == "EnvironmentFile":
            env_files = [] if value == "" else env_files + [value]
    if len(execs) != 1:
        raise HandoffError(f"the candidate unit has {len(execs)} ExecStart= lines, expected one")
    line = execs[0]
    if _SPECIFIER.search(line) or any(_SPECIFIER.search(v) for v in env_files + [workdir or ""]):
        raise HandoffError(f"the candidate unit uses systemd specifiers, which the suite does not "
                           f"expand: {line[:200]!r}")
    try:
        argv = shlex.split(line.lstrip(runtime.EXEC_PREFIXES), posix=True)
    except ValueError as e:
        raise HandoffError(f"ExecStart= cannot be split ({e}): {line[:200]!r}") from None
    ports = [i for i, a in enumerate(argv) if _PORT_ARG.match(a)]
    if len(ports) != 1 or (argv[ports[0]] == "--port" and ports[0] + 1 >= len(argv)):
        raise HandoffError(f"ExecStart= must name the port exactly once as --port N or --port=N "
                           f"(the suite runs the runtime on another port): {line[:200]!r}")
    i = ports[0]
    argv = argv[:i] + ["--port", str(port)] + argv[i + (1 if "=" in argv[i] else 2):]
    if workdir is not None and not re.match(r"^-?(~|/[^\0]*)$", workdir):
        raise HandoffError(f"WorkingDirectory={workdir[:200]!r} is not an absolute path or ~")
    files = []
    for v in env_files:
        optional, path = v.startswith("-"), v.lstrip("-")
        if not path.startswith("/"):
            raise HandoffError(f"EnvironmentFile={v[:200]!r} is not an absolute path")
        files.append((path, optional))
    return CandidateCommand(argv, workdir, files, f"ExecStart={line[:300]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment_only_from(files: list[tuple[str, bool]], server_env: str) -> None:
    """RUNTIME-2: the runtime's environment comes only from cutover.server_env.
    Every EnvironmentFile= must name it (a leading "-" or not); anything else
    fails before any file is read, naming the path (escaped, bounded)."""
    others = list(dict.fromkeys(path for path, _ in files if path != server_env))
    if others:
        shown = ", ".join(repr(escape(p[:200])) for p in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        raise HandoffError(f"the candidate unit's EnvironmentFile= names {shown}{more}: the runtime's "
                           f"environment comes only from cutover.server_env {server_env} "
                           "(nothing was read)")
    if not files:
        raise HandoffError(f"the candidate unit has no EnvironmentFile=: expected exactly "
                           f"cutover.server_env {server_env}")


def service_ids(user: str, group: str) -> tuple[int, int]:
    try:
        return pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        raise HandoffError(f"the service user {user!r} or group {group!r} does not exist") from None


def private_environment(files: list[tuple[str, bool]], tag: str, *, server_env: str,
                        owner: tuple[int, int]) -> str:
    """A root-only copy of server.env, the one environment file allowed
    (environment_only_from), read after CUT-3's checks and owned by `owner`
    (the service user's uid and gid). The caller removes it."""
    environment_only_from(files, server_env)
    env = serverenv.read(server_env)
    found = serverenv.problems(env, *owner)
    if found or env.content is None:
        raise HandoffError(f"EnvironmentFile {server_env}: " + ("; ".join(found) or "not read")
                           + ": the runtime is not started with it")
    try:
        dfd = rundir.open_run_dir()  # root 0700; a SIGKILLed run's copy goes at the next start
    except rundir.RunDirError as e:
        raise HandoffError(f"no root-only place for the environment copy: {e}") from None
    try:
        fd = os.open(f"pty-acceptance-{tag}-runtime.env",
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dfd)
    finally:
        os.close(dfd)
    path = os.readlink(f"/proc/self/fd/{fd}")
    try:
        os.write(fd, env.content.reveal().encode("utf-8", "surrogateescape").rstrip(b"\n") + b"\n")
    finally:
        os.close(fd)
    return path


# ------------------------------------------------------------------ the runtime file
@dataclass
class Hashed:
    """runtime.binary as RUNTIME-2 runs it: a kept descriptor, its identity and hashes."""
    path: str
    fd: int
    dev_ino: tuple[int, int]
    before: str
    after: str | None = None

    def describe(self) -> str:
        after = self.after or "not hashed again"
        return (f"{self.path} ({self.dev_ino[0]}:{self.dev_ino[1]}, by descriptor): {self.before} "
                f"before the start, {after} after the session")


def open_runtime(path: str, pin: str, limit: hostfs.Limit) -> Hashed:
    """runtime.binary opened by the no-follow walk from / and hashed by that
    descriptor (bounded); the pin (RUNTIME-1's) or HandoffError. The caller
    closes `fd`."""
    try:
        fd = hostfs.open_file(path, user_writable=True)
    except OSError as e:
        raise HandoffError(f"the runtime {path} cannot be opened (walked from / without following "
                           f"a link): {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        digest = hostfs.sha256_fd_bounded(fd, limit, path)
    except OSError as e:
        os.close(fd)
        raise HandoffError(f"the runtime {path}: {e.strerror or e}") from None
    hashed = Hashed(path, fd, (st.st_dev, st.st_ino), digest)
    if digest != pin:
        os.close(fd)
        raise HandoffError(f"the runtime {path} hashes to {digest} before the start, the pin "
                           f"runtime.sha256 (the file RUNTIME-1 hashed) is {pin}: not started")
    return hashed


def runs_hashed(pid: int, hashed: Hashed) -> str | None:
    """Why `pid` does not execute the kept descriptor's file (None: it does)."""
    try:
        dev, ino = proc.exe_file(pid)  # the magic link resolves to the mapped file itself
    except OSError as e:
        return f"/proc/{pid}/exe: {e.strerror or e}"
    if (dev, ino) != hashed.dev_ino:
        return (f"pid {pid} executes {dev}:{ino}, not {hashed.path} as hashed before the "
                f"start ({hashed.dev_ino[0]}:{hashed.dev_ino[1]})")
    return None


def hash_again(pid: int, hashed: Hashed, pin: str, limit: hostfs.Limit) -> str | None:
    """After the session: MainPID still executes the kept descriptor's file,
    which is hashed again through that descriptor (it is what was hashed
    before the start and what runs; /proc/<pid>/exe would trust that the pid
    is still the runtime's). Why not the pin, or None."""
    why = runs_hashed(pid, hashed)
    if why:
        return f"after the session: {why}"
    try:
        hashed.after = hostfs.sha256_fd_bounded(hashed.fd, limit, hashed.path)
    except OSError as e:
        return f"the runtime {hashed.path} could not be hashed again: {e.strerror or e}"
    if hashed.after != hashed.before or hashed.after != pin:
        return (f"the runtime {hashed.path} (what MainPID {pid} executes) hashed to {hashed.before} "
                f"before the start and to {hashed.after} after the session, by the same descriptor; "
                f"the pin runtime.sha256 is {pin}")
    return None


# ------------------------------------------------------------------ the runtime unit
@dataclass
class RuntimeUnit:
    name: str
    main_pid: int = 0
    control_group: str = ""
    env_copy: str | None = None


def runtime_properties(cmd: CandidateCommand, *, name: str, user: str, group: str, tag: str,
                       env_copy: str | None) -> list:
    props = [
        ("Description", ("s", f"{TAG_PREFIX} {tag}: {name} (RUNTIME-2, the candidate runtime)")),
        ("Type", ("s", "exec")),
        ("User", ("s", user)),
        ("Group", ("s", group)),
        ("Slice", ("s", "system.slice")),
        ("ExecStart", ("a(sasb)", [(cmd.argv[0], cmd.argv, False)])),
        ("CollectMode", ("s", "inactive-or-failed")),
        ("TimeoutStopUSec", ("t", 5_000_000)),
    ]
    if cmd.working_directory:
        props.append(("WorkingDirectory", ("s", cmd.working_directory)))
    if env_copy:
        props.append(("EnvironmentFiles", ("a(sb)", [(env_copy, False)])))
    return props


def wait_listening(bus: Systemd, unit: RuntimeUnit, port: int, hashed: Hashed) -> runtime.Listener:
    """Until the unit's MainPID listens on the port; it must execute the file
    of the kept descriptor (`hashed`), not whatever the path names now."""
    def ready():
        props = bus.properties(unit.name, SERVICE_IFACE) or {}
        unit.main_pid = props.get("MainPID") or 0
        unit.control_group = props.get("ControlGroup") or ""
        if not unit.main_pid:
            state = bus.properties(unit.name) or {}
            if state.get("ActiveState") in (None, "inactive", "failed"):
                raise HandoffError(f"{unit.name} ended before it listened "
                                   f"({state.get('ActiveState')}/{state.get('Result')})")
            return None
        found = runtime.listener(port)
        return found if found.pid == unit.main_pid else None

    found = poll(ready, LISTEN_DEADLINE_S, f"the runtime {unit.name} listening on "
                 f"127.0.0.1:{port}", lambda: runtime.listener(port).describe())
    if tuple(found.exe_dev_ino or ()) != hashed.dev_ino:
        shown = "%d:%d" % found.exe_dev_ino if found.exe_dev_ino else "an unknown file"
        raise HandoffError(f"MainPID {found.pid} of {unit.name} executes {shown} "
                           f"({escape(str(found.exe_link)[:200])!r}), not {hashed.path} as hashed before "
                           f"the start ({hashed.dev_ino[0]}:{hashed.dev_ino[1]})")
    return found


# ------------------------------------------------------------------ the trace
@dataclass
class Tracer:
    proc: subprocess.Popen
    out: str
    workdir: str
    text: str | None = None

    def stop(self) -> str:
        """Detach (SIGTERM: strace detaches from every tracee) and return the trace."""
        if self.text is not None:
            return self.text
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STRACE_EXIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STRACE_EXIT_S)
        try:
            with open(self.out, "rb") as f:
                self.text = f.read(4 << 20).decode("utf-8", "replace")
        except OSError:
            self.text = ""
        finally:
            scratch.remove(self.workdir)
        return self.text


def tracer_of(tid: int, pid: int) -> int | None:
    try:
        return int(proc.status(pid, tid)["TracerPid"])
    except (OSError, ValueError, KeyError):
        return None


def attach(pid: int) -> Tracer:
    """strace -f on every thread of pid, until each thread reports strace as its tracer."""
    strace = programs.path("strace")
    if not os.path.isfile(strace):
        raise HandoffError(f"{strace} is not installed: the helper hand-off cannot be observed")
    work = scratch.make("pty-acceptance-trace-")  # root 0700
    out = os.path.join(work, "trace")
    child = subprocess.Popen([strace, "-f", "-qq", "-yy", "-s", str(TRACE_STRINGS), "-e", "signal=none",
                              "-e", "trace=execve,sendmsg", "-o", out, "-p", str(pid)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=dict(programs.ROOT_ENV))
    tracer = Tracer(child, out, work)

    def attached():
        if child.poll() is not None:
            raise HandoffError(f"strace exited ({child.returncode}) before it attached to {pid}")
        try:
            tids = proc.threads(pid)
        except OSError:
            raise HandoffError(f"the runtime {pid} exited while strace attached") from None
        return tids and all(tracer_of(t, pid) == child.pid for t in tids)

    try:
        poll(attached, ATTACH_DEADLINE_S, f"strace attached to every thread of {pid}")
    except (HandoffError, TimeoutError):
        tracer.stop()
        raise
    return tracer


Send = tuple[int, int, int, "list[tuple[int, str]] | None"]
# (fd, local socket inode, peer inode, SCM_RIGHTS [(fd, path)] or None)


@dataclass
class Trace:
    """What the traced threads did: tid -> executable exec'd, tid -> sendmsg calls."""
    execs: dict[int, str] = field(default_factory=dict)
    sends: dict[int, list[Send]] = field(default_factory=dict)

    def of(self, tids: set[int]) -> tuple[list[str], list[Send]]:
        """The execs and sends of one process, given its thread ids."""
        return ([self.execs[t] for t in sorted(tids) if t in self.execs],
                [s for t in sorted(tids) for s in self.sends.get(t, [])])


def parse_trace(text: str) -> Trace:
    trace = Trace()
    for line in text.splitlines():
        if m := _EXECVE.match(line):
            trace.execs[int(m.group(1))] = m.group(2)
        elif m := _SENDMSG.match(line):
            rights = None
            if r := _RIGHTS.search(m.group(5)):
                rights = []
                for item in r.group(1).split(", "):
                    fm = _RIGHTS_FD.match(item)
                    rights.append((int(fm.group(1)), fm.group(2)) if fm else (-1, item[:80]))
            trace.sends.setdefault(int(m.group(1)), []).append(
                (int(m.group(2)), int(m.group(3)), int(m.group(4)), rights))
    return trace


def tasks(pid: int) -> set[int]:
    try:
        return set(proc.threads(pid))
    except OSError:
        return set()


# ------------------------------------------------------------------ the host, read
@dataclass
class Holder:
    pid: int
    fd: int
    exe: str
    uid: int | None


def _uid(pid: int) -> int | None:
    try:
        return proc.uid(pid)
    except OSError:
        return None


def holders(inodes: set[int], directory: tuple[int, int]) -> tuple[dict[int, list[Holder]], list[Holder]]:
    """(socket inode -> its holders, holders of the directory), over every process.
    Directories are judged by stat of the descriptor's magic link: never opened."""
    socks: dict[int, list[Holder]] = {i: [] for i in inodes}
    dirs: list[Holder] = []
    for pid in proc.pids():
        try:
            links = proc.fds(pid)
        except OSError:
            continue
        for fd, link in links.items():
            ino = observe.socket_inode(link)
            if ino in socks:
                socks[ino].append(Holder(pid, fd, proc.exe_identity(pid)[0], _uid(pid)))
            elif link.startswith("/"):
                try:
                    st = proc.fd_stat(pid, fd)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == directory:
                    dirs.append(Holder(pid, fd, proc.exe_identity(pid)[0], _uid(pid)))
    return socks, dirs


def terminals(pids: list[int]) -> list[str]:
    """Descriptors on a terminal (/dev/pts/*, /dev/ptmx, /dev/tty*) held by these processes."""
    found = []
    for pid in pids:
        try:
            links = proc.fds(pid)
        except OSError:
            continue
        for fd, link in links.items():
            if link.startswith(("/dev/pts/", "/dev/ptmx", "/dev/tty")):
                found.append(f"pid {pid} ({proc.exe_identity(pid)[0]}) fd {fd} -> {link}")
    return found


def connections(socket_path: str) -> list[tuple[int, int | None]]:
    return connections_to(unix_sockets(), socket_path, socket_file_id(socket_path))


def stop_runtime(bus: Systemd, unit: RuntimeUnit) -> None:
    try:
        stop_unit(bus, unit.name)
    finally:
        if unit.env_copy:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(unit.env_copy)


# ------------------------------------------------------------------ one observed session
@dataclass
class Observation:
    """Everything RUNTIME-2 judges; `problem` names the step that failed, if one did."""
    stage: str = "not started"
    problem: str | None = None
    command: CandidateCommand | None = None
    runtime: Hashed | None = None
    port: int = 0
    unit: RuntimeUnit | None = None
    listener: dict = field(default_factory=dict)
    workspace: str = ""
    directory: tuple[int, int] = (0, 0)
    pty: opencode_api.Pty | None = None
    session_units: list[str] = field(default_factory=list)
    footprint: Footprint | None = None
    token_cwds: dict[int, str] = field(default_factory=dict)    # session process -> its cwd judged
    runtime_children: dict[int, str] = field(default_factory=dict)  # descendants: pid -> exe
    helpers: list[int] = field(default_factory=list)            # descendants running the fixed helper
    pairs: list[tuple[int, int | None]] = field(default_factory=list)
    socket_holders: dict[int, list[Holder]] = field(default_factory=dict)
    dir_holders: list[Holder] = field(default_factory=list)
    supervisor: set[int] = field(default_factory=set)
    terminals: list[str] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    threads: dict[int, set[int]] = field(default_factory=dict)  # helper pid -> its thread ids
    deleted: str = ""
    leftovers: list[str] = field(default_factory=list)
    ended_in: float | None = None

    def fail(self, text: str) -> "Observation":
        self.problem = self.problem or f"{self.stage}: {text}"
        return self


def _same_dir(pid: int, directory: tuple[int, int]) -> str:
    try:
        st = os.stat(f"/proc/{pid}/cwd")
    except OSError as e:
        return f"unreadable ({e.strerror})"
    return "the workspace" if (st.st_dev, st.st_ino) == directory else f"{st.st_dev}:{st.st_ino}"


def _sample(ob: Observation, bus: Systemd, inv, helper_path: str) -> None:
    """Every process on the host, read while the session lives."""
    main = cast(RuntimeUnit, ob.unit).main_pid  # observe_session started it before sampling
    kids = proc.descendants(main)
    for p in kids:
        exe, dev_ino = proc.exe_identity(p.pid)
        ob.runtime_children[p.pid] = exe
        if runtime.same_file(helper_path, dev_ino)[0]:
            ob.helpers.append(p.pid)
            ob.threads[p.pid] = tasks(p.pid)
    ob.pairs = connections(inv.socket)
    ob.supervisor = unit_pids(bus, inv.units.supervisor)
    inodes = {i for pair in ob.pairs for i in pair if i}
    ob.socket_holders, ob.dir_holders = holders(inodes, ob.directory)
    ob.terminals = terminals([main] + [p.pid for p in kids])
    if ob.footprint:
        for pid in session_command(ob.footprint):
            ob.token_cwds[pid] = _same_dir(pid, ob.directory)


def session_command(fp: Footprint) -> list[int]:
    """The session's own processes carrying the token (the helper's argv carries it
    too) whose exec is complete: /proc/<pid>/comm is set only after the old image's
    descriptors are closed, so systemd's pre-exec child and the launcher, which
    hold the directory as fd 2 for an instant, are over."""
    out = []
    for pid in set(token_processes(fp.token)) & set(cgroup_pids(fp.path)):
        try:
            if proc.read(pid, "comm", proc.COMM_LIMIT).strip() == SESSION_COMM:
                out.append(pid)
        except OSError:
            continue
    return out


def observe_session(bus: Systemd, inv, tag: str, password: str) -> Observation:
    """Run the candidate runtime as the peer, open one PTY session through its
    API and read the host while it lives. Never raises for what the host does:
    the Observation says which step failed. Leaves nothing running."""
    ob = Observation()
    helper_path = inv.binaries.client.path
    name = inv.units.peer

    def session_gone():  # last: after the runtime stopped, whatever happened before
        if ob.footprint is not None and ob.ended_in is None:
            _, left = wait_gone(bus, [ob.footprint], ob.footprint.stop_bound_s())
            ob.leftovers = left.get(ob.footprint.unit, [])

    with contextlib.ExitStack() as stack:
        stack.callback(session_gone)
        try:
            ob.stage = "reading the candidate unit"
            text = runtime_unit_text(inv.units.candidate_file)
            ob.port = free_port()
            ob.command = candidate_command(text, ob.port)
            if ob.command.argv[0] != inv.runtime.binary:
                return ob.fail(f"ExecStart= runs {escape(ob.command.argv[0][:200])!r}, not the runtime "
                               f"binary {inv.runtime.binary}")
            ob.stage = "checking the candidate unit's EnvironmentFile="
            environment_only_from(ob.command.environment_files, inv.cutover.server_env)
            owner = service_ids(inv.service_user, inv.service_group)
            ob.stage = "hashing the runtime RUNTIME-1 hashed"
            ob.runtime = open_runtime(inv.runtime.binary, inv.runtime.sha256, inv.limit("runtime_bytes"))
            stack.callback(os.close, ob.runtime.fd)
            ob.stage = "starting the runtime as the peer"
            refuse_foreign(bus, name)  # before anything may stop a unit of that name
            ob.unit = RuntimeUnit(name)
            ob.unit.env_copy = private_environment(ob.command.environment_files, tag,
                                                   server_env=inv.cutover.server_env, owner=owner)
            stack.callback(stop_runtime, bus, ob.unit)
            bus.start_transient(name, runtime_properties(ob.command, name=name, user=inv.service_user,
                                                         group=inv.service_group, tag=tag,
                                                         env_copy=ob.unit.env_copy))
            found = wait_listening(bus, ob.unit, ob.port, ob.runtime)
            ob.listener = found.describe()
            ob.stage = "attaching strace to the runtime"
            tracer = attach(ob.unit.main_pid)
            stack.callback(tracer.stop)
            ob.workspace, ob.directory = stack.enter_context(workspace(inv.service_user, "pty-acceptance-rt2-"))
            token = new_token()
            watch = stack.enter_context(UnitWatch())
            client = opencode_api.Client(ob.port, password=password, directory=ob.workspace)
            ob.stage = "POST /api/pty"
            _, ob.pty = client.pty_create(SESSION_COMMAND, [f"600.{token}1"], ob.workspace,
                                          f"pty-acceptance RUNTIME-2 {tag}")
            ob.stage = "waiting for the session unit"
            ob.session_units = poll(watch.new_units, SESSION_DEADLINE_S,
                                    "a new session unit after POST /api/pty",
                                    lambda: f"runtime children {proc.descendants(ob.unit.main_pid)}")
            ob.footprint = Footprint.capture(bus, ob.session_units[0], token, Owner.of(inv))
            poll(lambda: session_command(ob.footprint), SESSION_DEADLINE_S,
                 "the session's command exec'd in its unit", lambda: ob.footprint.describe())
            ob.stage = "reading the host while the session lives"
            _sample(ob, bus, inv, helper_path)
            ob.trace = parse_trace(tracer.stop())
            ob.stage = DELETE_STAGE
            t0 = time.monotonic()
            ob.deleted = client.pty_delete(ob.pty.id).describe()
            took, left = wait_gone(bus, [ob.footprint], ob.footprint.stop_bound_s(), since=t0)
            ob.ended_in = took.get(ob.footprint.unit)
            ob.leftovers = left.get(ob.footprint.unit, [])
            ob.stage = "hashing the running runtime again after the session"
            why = hash_again(ob.unit.main_pid, ob.runtime, inv.runtime.sha256, inv.limit("runtime_bytes"))
            if why:
                return ob.fail(why)
            ob.stage = "done"
        except (HandoffError, opencode_api.ApiError, BusError, TimeoutError, OSError,
                HostReadError, ValueError, PeerError) as e:
            ob.fail(str(e))
    return ob


def runtime_unit_text(path: str) -> str:
    """The candidate unit file (runtime.unit_file_text: walked from /, bounded)."""
    try:
        return runtime.unit_file_text(path)
    except runtime.UnitFileError as e:
        raise HandoffError(f"the candidate unit file: {e}") from None
