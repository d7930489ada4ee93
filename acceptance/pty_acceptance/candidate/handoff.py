"""RUNTIME-2: the candidate runtime as the disposable peer, one PTY session
through its API, and who held what while that session lived: a live sample
of every process (TARGET-CONTRACT section 8) and the trace of the runtime's
whole tree for the whole session (a sample is not the session).

The run, in order:

1. The candidate unit file (units.candidate_file, read without following
   links; where it is one of the source manifest's files, the root-owned
   copy SCOPE-1 hashed, not the service user's file) gives ExecStart= (its program must be runtime.binary, whose
   identity RUNTIME-1 proves), WorkingDirectory= and EnvironmentFile=.
   `--port` is replaced by a free loopback port. Every EnvironmentFile= must
   name cutover.server_env (the runtime's environment comes from nothing
   else): any other path fails before anything is read. server.env must then
   pass CUT-3's checks, read by the suite (walked from / without following a
   link, lstat + O_NOFOLLOW, bounded), set nothing but cutover.environment and
   nothing the floor refuses (NODE_OPTIONS, LD_PRELOAD, ...: the runtime would
   load the user's code, which could hide what this run looks for: never
   started), and be the service user's (uid and gid); it is handed to systemd as a root-only copy, so that PID 1 never
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
   of every process it already has and follows their children
   (runtimetrace.py): every process created, every exec, every call that
   gives, copies, takes or ends a descriptor, and what each sent, with
   descriptors decoded (-yy) and strings cut to 2 bytes. No payload byte is
   kept; the trace is parsed, never shown.
4. POST /api/pty with a command whose argv carries a token, in a fresh 0700
   directory of the service user; the supervisor's new session unit is seen
   through UnitNew, its processes through its cgroup.
5. While the session lives every process on the host is read (the live
   sample: it alone sees processes outside the runtime's tree): who holds the
   client end of each supervisor connection (sock_diag + /proc/<pid>/fd), who
   holds the directory (stat of every /proc/<pid>/fd entry: no open, so no
   FIFO or device is ever opened), and whether the runtime or any of its
   descendants holds a terminal.
6. DELETE /api/pty/<id>; the session must end. The trace ends then, whatever
   DELETE did (every process of the runtime's unit and tree must be traced at
   that moment) and is judged (tracedholders.py): every process of the tree
   that held the connection or the directory at any time, and which child
   exec'd the fixed helper and what it sent on which descriptor; what the
   live sample saw must be in it. MainPID must still execute
   the kept descriptor's file, which is hashed again through that descriptor
   (the file that was hashed before the start and proven to be what runs;
   opening /proc/<pid>/exe instead would trust that the pid is still the
   runtime's); both hashes must be the pin. Then the runtime unit is stopped
   and the directory removed, on every path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass, field
from typing import cast

from pty_acceptance.candidate import opencode_api, runtimetrace, tracedholders
from pty_acceptance.candidate.runtimetrace import Trace, Tracer
from pty_acceptance.candidate.runtimeunit import (
    CandidateCommand, HandoffError, Hashed, RuntimeUnit, candidate_command, environment_only_from, exec_path_problem,
    free_port, hash_again, open_runtime, private_environment, runtime_properties, runtime_unit_text,
    service_ids, stop_runtime, wait_listening)
from pty_acceptance.host import observe, proc
from pty_acceptance.provenance import node_runtime
from pty_acceptance.host.bus import BusError, Systemd
from pty_acceptance.host.cgroups import cgroup_pids, unit_pids
from pty_acceptance.host.polling import poll
from pty_acceptance.host.processes import token_processes
from pty_acceptance.supervisor.session_footprint import Footprint, HostReadError
from pty_acceptance.supervisor.session_gone import wait_gone
from pty_acceptance.supervisor.isolation import connections_to, socket_file_id, unix_sockets
from pty_acceptance.supervisor.peer import PeerError, refuse_foreign, workspace
from pty_acceptance.supervisor.unit_vouch import Owner
from pty_acceptance.supervisor.tokens import new_token
from pty_acceptance.host.terminal import escape
from pty_acceptance.host.unitwatch import UnitWatch

SESSION_DEADLINE_S = 15.0
DELETE_STAGE = "DELETE /api/pty/<id>"
SESSION_COMMAND, SESSION_COMM = "/bin/sleep", b"sleep"  # argv: 600.<token>1, a 600 s sleep


# ------------------------------------------------------------------ the host, read
def tasks(pid: int) -> set[int]:
    try:
        return set(proc.threads(pid))
    except OSError:
        return set()


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
    Directories are judged by stat of the descriptor's magic link: never opened.
    A process or descriptor gone between the listing and its read is left out;
    one that is there and cannot be read raises proc.ProcUnreadable."""
    socks: dict[int, list[Holder]] = {i: [] for i in inodes}
    dirs: list[Holder] = []
    for pid, links in proc.walk(proc.fds, "the descriptors").items():
        for fd, link in links.items():
            ino = observe.socket_inode(link)
            if ino in socks:
                socks[ino].append(Holder(pid, fd, proc.exe_identity(pid)[0], _uid(pid)))
            elif link.startswith("/"):
                try:
                    st = proc.fd_stat(pid, fd)
                except OSError as e:
                    if proc.gone(e):
                        continue
                    raise proc.unreadable(pid, f"descriptor {fd}", e) from None
                if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == directory:
                    dirs.append(Holder(pid, fd, proc.exe_identity(pid)[0], _uid(pid)))
    return socks, dirs


def terminals(pids: list[int]) -> list[str]:
    """Descriptors on a terminal (/dev/pts/*, /dev/ptmx, /dev/tty*) held by these
    processes (one gone meanwhile holds none; one unreadable raises)."""
    found = []
    for pid, links in proc.walk(proc.fds, "the descriptors", among=pids).items():
        for fd, link in links.items():
            if link.startswith(("/dev/pts/", "/dev/ptmx", "/dev/tty")):
                found.append(f"pid {pid} ({proc.exe_identity(pid)[0]}) fd {fd} -> {link}")
    return found


def connections(socket_path: str) -> list[tuple[int, int | None]]:
    return connections_to(unix_sockets(), socket_path, socket_file_id(socket_path))


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
    holdings: tracedholders.Judgement | None = None  # the trace of the whole session, judged
    tree_at_sample: set[int] = field(default_factory=set)       # the runtime and its descendants then
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
    ob.tree_at_sample = {main} | {p.pid for p in kids}
    for p in kids:
        exe, dev_ino = proc.exe_identity(p.pid)
        ob.runtime_children[p.pid] = exe
        if node_runtime.same_file(helper_path, dev_ino)[0]:
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


def _judge_trace(ob: Observation, bus: Systemd, inv, tracer: Tracer) -> None:
    """End the trace (every process of the runtime's unit and tree must be traced
    then) and judge who held the connection or the directory at any time, with
    what the live sample saw checked against it."""
    unit = cast(RuntimeUnit, ob.unit)

    def tree() -> set[int]:
        return unit_pids(bus, unit.name) | {p.pid for p in proc.descendants(unit.main_pid)}

    text = tracer.end(tree)
    ob.trace = runtimetrace.parse(text)
    clients = {c for _, c in ob.pairs if c}
    sampled = [tracedholders.Sampled(h.pid, h.fd, tracedholders.CONNECTION, str(ino))
               for ino in clients for h in ob.socket_holders.get(ino, []) if h.pid in ob.tree_at_sample]
    sampled += [tracedholders.Sampled(h.pid, h.fd, tracedholders.DIRECTORY, ob.workspace)
                for h in ob.dir_holders if h.pid in ob.tree_at_sample]
    ob.holdings = tracedholders.judge(text, main=unit.main_pid, tids=tracer.tids, socket_path=inv.socket,
                                      workspace=ob.workspace, connections=clients,
                                      helper_path=inv.binaries.client.path, sampled=sampled,
                                      tree_at_sample=ob.tree_at_sample, problems=tracer.problems)


def session_command(fp: Footprint) -> list[int]:
    """The session's own processes carrying the token (the helper's argv carries it
    too) whose exec is complete: /proc/<pid>/comm is set only after the old image's
    descriptors are closed, so systemd's pre-exec child and the launcher, which
    hold the directory as fd 2 for an instant, are over."""
    tagged = set(token_processes(fp.token)) & set(cgroup_pids(fp.path))
    comms = proc.walk(lambda pid: proc.read(pid, "comm", proc.COMM_LIMIT), "comm", among=sorted(tagged))
    return [pid for pid, comm in comms.items() if comm.strip() == SESSION_COMM]


def unit_file(inv, source) -> str:
    """Where RUNTIME-2 reads the candidate unit: the copy SCOPE-1 hashed (the
    `source` mirror, root's) when units.candidate_file is one of the source
    manifest's files, since the service user may rewrite it in its own tree
    after SCOPE-1 read it (a red team's round five: its arguments, its
    WorkingDirectory=); else the file itself (installed by root)."""
    path = inv.units.candidate_file
    if source is not None and any(p == path for p, _ in source.files):
        return source.copy_of(path)
    return path


def observe_session(bus: Systemd, inv, tag: str, password: str, source=None) -> Observation:
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
            text = runtime_unit_text(unit_file(inv, source))
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
                                                   server_env=inv.cutover.server_env, owner=owner,
                                                   allowed=inv.cutover.environment)
            stack.callback(stop_runtime, bus, ob.unit)
            bus.start_transient(name, runtime_properties(ob.command, name=name, user=inv.service_user,
                                                         group=inv.service_group, tag=tag,
                                                         env_copy=ob.unit.env_copy))
            found = wait_listening(bus, ob.unit, ob.port, ob.runtime)
            ob.listener = found.describe()
            ob.stage = "reading the runtime's path as systemd exec'd it"
            if why := exec_path_problem(ob.unit.main_pid, ob.runtime):
                return ob.fail(why)
            ob.stage = "attaching strace to the runtime"
            tracer = runtimetrace.attach(ob.unit.main_pid)
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
            ob.stage = DELETE_STAGE
            try:
                t0 = time.monotonic()
                ob.deleted = client.pty_delete(ob.pty.id).describe()
                took, left = wait_gone(bus, [ob.footprint], ob.footprint.stop_bound_s(), since=t0)
                ob.ended_in = took.get(ob.footprint.unit)
                ob.leftovers = left.get(ob.footprint.unit, [])
            finally:  # the session is over (or DELETE failed): the trace ends, whatever happened
                _judge_trace(ob, bus, inv, tracer)
            ob.stage = "hashing the running runtime again after the session"
            why = hash_again(ob.unit.main_pid, ob.runtime, inv.runtime.sha256, inv.limit("runtime_bytes"))
            if why:
                return ob.fail(why)
            ob.stage = "done"
        except (HandoffError, opencode_api.ApiError, BusError, TimeoutError, OSError,
                HostReadError, ValueError, PeerError, proc.ProcUnreadable) as e:
            ob.fail(str(e))
    return ob
