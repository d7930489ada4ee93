"""Same-UID isolation: what another process of the service user can do to the
candidate runtime, and what a live session can reach.

ISO-1  The target is the one process listening on ports.candidate (the
       runtime that becomes the peer at cutover), judged only when it runs
       runtime.binary (same device and inode) as the service user and is
       units.candidate's own: its MainPID or in its cgroup, the unit active
       in the invocation first read, before the probe and after it
       (host/unitowner.py; a process of the user's own on that port proves
       nothing of the candidate). A probe runs once, as the
       service user and group, in a disposable tagged unit (isoprobe.py), and
       every vector must be refused: PTRACE_SEIZE; listing and opening
       /proc/<pid>/fd, reading environ, fdinfo and one page of mem;
       process_vm_readv; pidfd_getfd of its descriptors 3..63. Read as root:
       no descriptor >= 3 of the target lacks O_CLOEXEC (a child it spawns,
       compromised, would inherit it and could pass it on by SCM_RIGHTS), and,
       while a live session runs through the fixed helper (opened first: with
       no connection nobody holds anything), both ends of every connection to
       the supervisor socket are held by the supervisor's processes and the
       fixed helper only (sock_diag). A probe
       that did not run with exactly the target's uid and gid proves nothing
       and fails. A probe holding any capability fails the same way. Yama
       (kernel.yama.ptrace_scope through Testinfra's host.sysctl; a kernel
       without Yama has no such key, recorded as `absent`), the owner of
       /proc/<pid>/fd (root: the target is not dumpable) and every probe
       result are recorded with each test. What the probe cannot see is read
       as root: runtime.binary is root's and unreadable to the service user
       (others, its groups, an ACL) and unchanged since before the candidate
       started, or the kernel made the candidate dumpable at exec and it may
       since have made itself not dumpable; so is every directory on its path
       whose name the service user could relink, or what systemd exec'd there
       may have been a wrapper of the user's; and the
       candidate catches no SIGUSR1 (Node's inspector, which any process of
       the user could open with it).
ISO-3  (the rest is test_process_control.py) The same probe also tries
       kill(pid, 0) and pidfd_send_signal(0): Linux lets a process signal its
       own uid, so what they reach is recorded as evidence (availability, not
       identity), never failed; the test fails only when the probe gave no
       usable result.
ISO-2  The PTY is not a general sandbox: from inside a live session started
       through the fixed helper, whether its command can create and remove a
       file in its workspace (the cwd it was given: a fresh directory of the
       service user, 0700), and whether it can open a TCP connection to
       127.0.0.1 on ports.production. Both are recorded; a test fails only
       where the host differs from what the inventory declares
       (isolation.session_workspace_writable, isolation.session_network).
       The terminal, script(1) and the launcher before its exec are the
       user's, which another process of the user may write into or attach to
       (a blind red team's round eight made the probe's connect() return 0):
       the probe's answer comes only on a channel of its own
       (session_probe.py: the suite's execute-only Python, judged by root
       from /proc before it may act: the session's cgroup, not dumpable,
       untraced, its command line the probe's), and the probe session must
       end with status 0. The network is also read from outside, by root,
       while the probe waits: its network namespace is the host's or one of
       its own; one of its own fails a declared session_network: true
       whatever the probe said.

The probe never harms the target: SEIZE never stops it and a tracer that
exits detaches, signal 0 only, only the lengths of what it read are reported.
A target that cannot be found, or a probe that cannot run, fails every ISO-1
test and the ISO-3 record with the reason; a session that cannot be driven
fails both ISO-2 tests.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import socket
import time
from dataclasses import dataclass

import pytest

from pty_acceptance.host import cgroups, proc, unitowner
from pty_acceptance.provenance import node_runtime
from pty_acceptance.supervisor import isolation, session_probe
from pty_acceptance.supervisor import session_inspect as live
from pty_acceptance.host.bus import SERVICE_IFACE, BusError
from pty_acceptance.host.unitwatch import UnitWatch
from pty_acceptance.gate.checks import expect, finding, reading
from pty_acceptance.supervisor.peer import PeerError, workspace
from pty_acceptance.supervisor.session_clients import HelperSession, SessionError

SESSION_DEADLINE_S = 30
CONNECT_TIMEOUT_S = 3
YAMA = "kernel.yama.ptrace_scope"



@dataclass
class Probed:
    target: isolation.Target
    yama: str
    report: dict | None
    problem: str | None   # why there is no usable report

    @property
    def results(self) -> dict:
        return {r["vector"]: r for r in (self.report or {}).get("results", [])}


def _yama(host) -> str:
    """'ptrace_scope N', 'absent' (the kernel has no Yama, so no such key: a fact to
    record, not a value), or why it could not be read."""
    try:
        return f"ptrace_scope {host.sysctl(YAMA)}"
    except AssertionError as e:  # Testinfra's check_output: sysctl exited non-zero
        if not host.file("/proc/sys/kernel/yama").exists:
            return "absent"
        return f"unreadable ({str(e)[:200]})"
    except ValueError as e:  # Testinfra found no sysctl command
        return f"unreadable ({e})"


def _not_the_candidate(inv, host, bus, unit_seen, t: isolation.Target) -> str | None:
    """Why the target is not the candidate (None: it is): the runtime binary, run
    as the service user, by units.candidate itself."""
    port, binary, unit = inv.ports.candidate, inv.runtime.binary, inv.units.candidate
    same, detail = node_runtime.same_file(binary, t.exe_dev_ino)
    if not same:
        return f"the process on port {port}, {t.describe()}, does not run {binary}: {detail}"
    user = host.user(inv.service_user)
    if not user.exists or set(t.uids) != {user.uid}:
        return f"the process on port {port}, {t.describe()}, runs with uids {t.uids}, not only {inv.service_user}'s"
    try:
        owner = unitowner.judge(bus, unit, t.pid, t.create_time, unit_seen)
    except BusError as e:
        return f"cannot read {unit} from systemd: {e}"
    if owner.problem:
        return f"the process on port {port} is not the candidate: {owner.problem}"
    return None


@pytest.fixture(scope="module")
def target(inv, host, bus, unit_seen):
    """The process on ports.candidate, or why there is none or it is not the
    candidate (psutil, not host.socket: Testinfra's socket names no owning process)."""
    try:
        t = isolation.find_target(inv.ports.candidate)
    except isolation.IsolationError as e:
        return str(e)
    return _not_the_candidate(inv, host, bus, unit_seen, t) or t


def _target_or_fail(target, evidence, ids="ISO-1") -> isolation.Target:
    if isinstance(target, str):
        raise finding(ids, target)
    evidence("target", f"{target.describe()}, uids {target.uids}, gids {target.gids}, "
                       f"start {target.start_ticks} ticks")
    return target


@pytest.fixture(scope="module")
def probed(inv, host, bus, run_tag, unit_seen, target):
    """The probe's report against the target, run once for the module."""
    if isinstance(target, str):
        return target
    state = _yama(host)
    try:
        report = isolation.run_probe(bus, user=inv.service_user, group=inv.service_group,
                                     tag=run_tag, target=target)
    except (isolation.IsolationError, BusError, TimeoutError, OSError) as e:
        return Probed(target, state, None, f"the probe did not run: {e}")
    changed = _not_the_candidate(inv, host, bus, unit_seen, target)
    if changed:
        return Probed(target, state, report, f"after the probe: {changed}")
    if report.get("error"):
        return Probed(target, state, report, f"the probe failed: {report['error']}")
    ids = (report["uid"], report["euid"], report["gid"], report["egid"])
    want = (target.uids[0], target.uid, target.gids[0], target.gids[1])
    if ids != want:
        return Probed(target, state, report,
                      f"the probe ran as uid/euid/gid/egid {ids}, the target runs as {want}: "
                      "its refusals say nothing about same-UID isolation")
    if report["cap_eff"] != 0:
        return Probed(target, state, report,
                      f"the probe held capabilities (CapEff {report['cap_eff']:#x}): what worked "
                      "says nothing about an unprivileged process of the service user")
    return Probed(target, state, report, None)


def _results_or_fail(probed, evidence, vectors, ids="ISO-1") -> tuple[Probed, list[dict]]:
    if isinstance(probed, str):
        raise finding(ids, probed)
    _target_or_fail(probed.target, evidence, ids)
    evidence("Yama", probed.yama)
    evidence(f"/proc/{probed.target.pid}/fd owner", f"uid {probed.target.fd_owner} ("
             f"{'dumpable' if probed.target.dumpable else 'not dumpable'})")
    if probed.report:
        evidence("probe ran as", {k: probed.report.get(k)
                                  for k in ("uid", "euid", "gid", "egid", "cap_eff", "seccomp")})
        for r in probed.report["results"]:
            evidence(f"probe {r['vector']}", f"{r['outcome']}: {r['detail']}")
    expect(not probed.problem, ids, f"{probed.target.describe()}: {probed.problem}")
    got = probed.results
    return probed, [got[v] for v in vectors]


def _assert_refused(probed, evidence, vectors):
    pr, rows = _results_or_fail(probed, evidence, vectors)
    worked = [r for r in rows if r["outcome"] != "refused"]
    expect(not worked, "ISO-1", f"{' and '.join(r['vector'] for r in worked)} worked against "
                                f"{pr.target.describe()}: {'; '.join(r['detail'] for r in worked)}; "
                                f"{pr.target.facts(pr.yama)}")


# ------------------------------------------------------------------ ISO-1, the probe
@pytest.mark.requirement("ISO-1")
def test_ptrace_is_refused(probed, evidence):
    _assert_refused(probed, evidence, ["ptrace"])


@pytest.mark.requirement("ISO-1")
def test_proc_descriptors_environ_and_memory_are_refused(probed, evidence):
    _assert_refused(probed, evidence, ["proc-fd-list", "proc-fd-open", "proc-environ",
                                       "proc-fdinfo", "proc-mem"])


@pytest.mark.requirement("ISO-1")
def test_process_vm_readv_is_refused(probed, evidence):
    _assert_refused(probed, evidence, ["process_vm_readv"])


@pytest.mark.requirement("ISO-1")
def test_pidfd_getfd_is_refused(probed, evidence):
    _assert_refused(probed, evidence, ["pidfd_getfd"])


@pytest.mark.requirement("ISO-3")
def test_signal_reach_is_recorded(probed, evidence, concern):
    """Availability, not identity: recorded, never failed (test_process_control.py
    proves that stopping or killing the MainPID lends no identity)."""
    pr, rows = _results_or_fail(probed, evidence, ["kill", "pidfd_send_signal"], ids="ISO-3")
    reach = "; ".join(f"{r['vector']} {r['outcome']} against {pr.target.describe()}" for r in rows)
    evidence("signal reach (recorded, not judged)", reach)
    concern("ISO-3", f"same-UID signal reach (availability, not identity; recorded, not judged): {reach}")


# ------------------------------------------------------------------ ISO-1, root's view
@pytest.mark.requirement("ISO-1")
def test_the_runtime_binary_is_unreadable_to_the_service_user(inv, host, target, evidence):
    """What the probe cannot see: a process is made not dumpable at exec only when
    its user cannot read its executable; one that could, and then made itself not
    dumpable (its preload, or an injection while it was dumpable), refuses the
    probe and is the user's all the same."""
    t = _target_or_fail(target, evidence)
    binary, user = inv.runtime.binary, host.user(inv.service_user)
    expect(user.exists, "ISO-1", f"the service user {inv.service_user!r} does not exist")
    gids = {int(g) for g in user.gids} | set(t.gids)
    with reading("ISO-1", f"the candidate's start (pid {t.pid})", OSError, ValueError):
        started = proc.start_realtime_ns(t.pid)
    seen, problems = isolation.readable_to(binary, user.uid, gids, started)
    evidence("runtime binary", seen)
    expect(not problems, "ISO-1", "; ".join(problems) + f": the candidate ({t.describe()}) runs it, so the kernel may "
                                  "have made it dumpable at exec and a process of the service user's could attach to "
                                  "it, whatever the probe now sees")


@pytest.mark.requirement("ISO-1")
def test_the_candidate_opens_no_inspector_on_sigusr1(target, evidence):
    """Node opens its inspector (code run inside the process, for whoever
    connects to it) when it catches SIGUSR1, which any process of the service
    user may send the candidate: a Node runtime must be built with
    --disable-sigusr1 (a blind red team's round six patched the live candidate's
    answers this way, with no other trace)."""
    t = _target_or_fail(target, evidence)
    with reading("ISO-1", f"the candidate's signal handlers (pid {t.pid})", isolation.IsolationError):
        caught = isolation.catches(t.pid, t.create_time, signal.SIGUSR1)
    evidence("SIGUSR1", "caught (Node's inspector activation)" if caught else "not caught")
    expect(not caught, "ISO-1", f"the candidate ({t.describe()}) catches SIGUSR1 (SigCgt of /proc/{t.pid}/status): "
                                "Node opens its inspector on it, so any process of the service user can run code "
                                "inside the candidate (build the runtime with --disable-sigusr1)")


@pytest.mark.requirement("ISO-1")
def test_descriptors_are_close_on_exec(inv, host, bus, unit_seen, target, evidence):
    t = _target_or_fail(target, evidence)
    with reading("ISO-1", f"cannot read the descriptors of {t.describe()}", isolation.IsolationError):
        bad, seen = isolation.inheritable_fds(t.pid)
        again = isolation.start_ticks(t.pid)
    evidence("descriptors >= 3 checked", seen)
    evidence("without O_CLOEXEC", bad or "none")
    expect(again == t.start_ticks, "ISO-1", f"pid {t.pid} was replaced while its descriptors were read")
    changed = _not_the_candidate(inv, host, bus, unit_seen, t)
    expect(not changed, "ISO-1", f"after its descriptors were read: {changed}")
    expect(not bad, "ISO-1", f"inheriting descriptors worked against {t.describe()}: "
                             f"{len(bad)} of {seen} descriptors >= 3 lack O_CLOEXEC, so whatever it "
                             f"spawns holds them: {'; '.join(bad)}")


@dataclass
class Holders:
    supervisor: set
    socks: int
    pairs: list
    holders: dict


def _read_holders(inv, bus) -> Holders:
    supervisor = cgroups.unit_pids(bus, inv.units.supervisor)
    file_id = isolation.socket_file_id(inv.socket)
    socks = isolation.unix_sockets()
    holders = isolation.socket_holders()
    return Holders(supervisor, len(socks), isolation.connections_to(socks, inv.socket, file_id), holders)


def _live_connection_held(inv, bus, helper_pid, is_helper) -> Holders:
    """Poll until the helper (exec'd) holds the client side of a connection whose
    supervisor side a supervisor process holds (accepted): the moment a live
    session's connection exists to be judged."""
    end = time.monotonic() + SESSION_DEADLINE_S
    delay = 0.01
    while True:
        seen = _read_holders(inv, bus)
        if is_helper(helper_pid)[0] and any(
                helper_pid in seen.holders.get(client, ()) and seen.holders.get(server, set()) & seen.supervisor
                for server, client in seen.pairs if client):
            return seen
        if time.monotonic() > end:
            raise TimeoutError(
                f"the helper pid {helper_pid} ({is_helper(helper_pid)[1]}) held no accepted connection to "
                f"{inv.socket} within {SESSION_DEADLINE_S} s; connections {seen.pairs}, supervisor "
                f"processes {sorted(seen.supervisor)}")
        time.sleep(delay)  # poll interval, not a wait for an outcome
        delay = min(delay * 2, 0.1)


@pytest.mark.requirement("ISO-1")
def test_only_the_helper_holds_supervisor_connections(inv, bus, module_peer, evidence):
    """Read while a session runs through the fixed helper: with no live
    connection nobody holds anything, and the check would prove nothing."""
    helper = inv.binaries.client.path

    def is_helper(pid):
        link, dev_ino = proc.exe_identity(pid)
        return node_runtime.same_file(helper, dev_ino)[0], link

    with contextlib.ExitStack() as stack:
        cwd, _ = stack.enter_context(workspace(inv.service_user, "pty-acceptance-ws-"))
        h = HelperSession(module_peer, inv.socket, helper, ["/bin/cat"], cwd=cwd)
        stack.callback(h.close)
        with reading("ISO-1", f"cannot read the connections of a live session to {inv.socket}",
                     isolation.IsolationError, BusError, OSError, SessionError, PeerError, TimeoutError):
            h.open()
            seen = _live_connection_held(inv, bus, h.pid, is_helper)
        evidence("live session", f"helper pid {h.pid} running /bin/cat")
        evidence("supervisor processes", sorted(seen.supervisor))
        evidence("UNIX sockets seen (sock_diag)", seen.socks)
        evidence(f"connections to {inv.socket}", len(seen.pairs))
        findings, rows = isolation.judge_holders(seen.pairs, seen.holders, supervisor=seen.supervisor,
                                                 is_helper=is_helper, own={os.getpid()})
        evidence("holders", rows)
    expect(not findings, "ISO-1", f"obtaining the supervisor connection worked: {'; '.join(findings)}"
                                  f" (the fixed helper is {helper})")


# ------------------------------------------------------------------ ISO-2
REACH = r'''
import errno, os, socket, sys
name, port = sys.argv[1], int(sys.argv[2])
def why(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
try:
    out = {"cwd": os.getcwd()}
except OSError as e:
    out = {"cwd": "getcwd " + why(e)}
try:
    fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, b"ISO-2\n")
    finally:
        os.close(fd)
    try:
        os.unlink(name)
        out["workspace"] = "writable"
    except OSError as e:
        out["workspace"] = "created, unlink " + why(e)
except OSError as e:
    out["workspace"] = why(e)
try:
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    out["network"] = "connected"
except OSError as e:
    out["network"] = why(e)
answer(out)  # on the probe's own channel (session_probe.py), never through the terminal
'''


def _connect(port: int) -> str:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S).close()
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__


def _network_namespace(pid: int) -> str:
    """Whether the probe shares the suite's (the host's) network namespace, read by root from /proc."""
    theirs, ours = os.readlink(f"/proc/{pid}/ns/net"), os.readlink(f"/proc/{os.getpid()}/ns/net")
    return "the host's" if theirs == ours else f"its own ({theirs}; the host's {ours})"


@pytest.fixture(scope="module")
def reach(inv, bus, module_peer):
    """What a live session could do: {"workspace", "network", "outside", "cwd", ...}."""
    port = inv.ports.production
    peer = module_peer
    with contextlib.ExitStack() as stack:
        cwd, _ = stack.enter_context(workspace(inv.service_user, "pty-acceptance-ws-"))
        name = f"iso2-{secrets.token_hex(8)}"
        outside = _connect(port)
        with reading("ISO-2", "the probe's channel cannot be set up", session_probe.ProbeError, OSError):
            channel = session_probe.Channel(cwd)
        stack.callback(channel.close)
        argv = channel.argv(REACH, name, str(port))
        h = HelperSession(peer, inv.socket, inv.binaries.client.path, argv, cwd=cwd)
        stack.callback(h.close)
        watch = stack.enter_context(UnitWatch())
        with reading("ISO-2", "the session through the fixed helper did not report",
                     SessionError, PeerError, TimeoutError, BusError, live.LiveError, OSError,
                     session_probe.ProbeError):
            h.open()
            started: dict[str, str] = {}  # every session unit started since the watch began -> ControlGroup

            def sessions():
                for unit in watch.new_units():
                    started[unit] = (bus.properties(unit, SERVICE_IFACE) or {}).get("ControlGroup", "")
                return started.values()

            pid = channel.admit(sessions, argv, SESSION_DEADLINE_S)
            unit = next(u for u, g in started.items() if g == channel.group)
            # the probe is held (not dumpable, untraced) and has not acted yet: its network
            # namespace, read by root, is the one its connect() will use
            netns = _network_namespace(pid)
            channel.go()
            report = channel.answer(SESSION_DEADLINE_S)
            _output, status = h.run(None, SESSION_DEADLINE_S)
        expect(all(isinstance(report.get(k), str) for k in ("workspace", "network", "cwd")), "ISO-2",
               f"the session's report has the wrong shape: {str(report)[:200]!r}")
        expect(status == 0, "ISO-2", f"the probe session ended with status {status}, not 0 after its answer")
        left = os.path.join(cwd, name)
        report.update(cwd_host=cwd, outside=outside, status=status,
                      leftover=os.path.lexists(left), netns=netns, unit=unit, probe_pid=pid)
        yield report


@pytest.mark.requirement("ISO-2")
def test_session_workspace_access_is_as_declared(inv, reach, evidence, concern):
    want = inv.isolation.session_workspace_writable
    got = reach["workspace"]
    evidence("workspace", f"{reach['cwd_host']} (owned by {inv.service_user}, 0700), "
                          f"the session's cwd {reach['cwd']!r}")
    evidence("create + remove a file there, from inside", got)
    evidence("declared isolation.session_workspace_writable", want)
    evidence("helper exit status", reach["status"])
    expect(not reach["leftover"], "ISO-2",
           f"the session could create but not remove its file in {reach['cwd_host']} ({got})")
    expect((got == "writable") == want, "ISO-2",
           f"a session {'could not' if want else 'could'} create and remove a file in its "
           f"workspace {reach['cwd_host']} ({got}); the inventory declares "
           f"session_workspace_writable: {str(want).lower()}")
    concern("ISO-2", f"a live session's workspace {reach['cwd_host']} is {got} from inside "
                     "(as declared: pilot behaviour, not a sandbox)")


@pytest.mark.requirement("ISO-2")
def test_session_network_access_is_as_declared(inv, reach, evidence, concern):
    want = inv.isolation.session_network
    port = inv.ports.production
    got = reach["network"]
    evidence(f"TCP connect to 127.0.0.1:{port} from the suite (outside)", reach["outside"])
    evidence(f"TCP connect to 127.0.0.1:{port} from inside the session", got)
    evidence("declared isolation.session_network", want)
    expect(reach["outside"] == "connected", "ISO-2",
           f"127.0.0.1:{port} does not accept connections even from outside "
           f"({reach['outside']}): what the session reached proves nothing")
    evidence(f"network namespace of {reach['unit']} (read by root from outside)", reach["netns"])
    expect((got == "connected") == want, "ISO-2",
           f"a session {'could not' if want else 'could'} connect to 127.0.0.1:{port} "
           f"({got}); the inventory declares session_network: {str(want).lower()}")
    # a namespace of its own has a loopback of its own: declared network access cannot be; the
    # host's namespace proves nothing the other way (IPAddressDeny= may still refuse)
    expect(not want or reach["netns"] == "the host's", "ISO-2",
           f"the session's network namespace is {reach['netns']} (its probe said {got}): its 127.0.0.1 is not "
           f"the host's, yet the inventory declares session_network: true")
    concern("ISO-2", f"TCP 127.0.0.1:{port} from inside a live session: {got} "
                     "(as declared: pilot behaviour, not a sandbox)")
