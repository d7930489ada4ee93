"""Same-UID isolation: what another process of the service user can do to the
candidate runtime, and what a live session may reach.

ISO-1  the target is the one process listening on ports.candidate (the
       runtime that becomes the peer at cutover). A probe run as the service
       user in a disposable unit (isoprobe.py) must be refused each vector:
       PTRACE_SEIZE; /proc/<pid>/fd listing and opening, environ, fdinfo and
       mem; process_vm_readv; pidfd_getfd; kill(pid, 0) and
       pidfd_send_signal(0). Read as root: no descriptor >= 3 of the target
       lacks O_CLOEXEC (nothing is inherited by what it spawns), and every
       connection to the supervisor socket is held by the supervisor and the
       fixed helper only (sock_diag). Yama and the target's dumpability are
       recorded with every result.
ISO-2  from inside a live PTY session: whether it can create (and remove) a
       file in its workspace (the cwd it was given, owned by the service
       user) and whether it can open a TCP connection to 127.0.0.1 on
       ports.production. Both are recorded; a test fails only where the host
       differs from what the inventory declares (isolation.*).

The probe never harms the target: SEIZE in a child that exits at once (it
never stops the target), signal 0 only, lengths of what it read but never the
bytes. A target that cannot be found, or a probe that cannot run, fails every
ISO-1 test with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import tempfile

import pytest

from pty_acceptance import isolation
from pty_acceptance import livesession as live
from pty_acceptance.bus import BusError, Systemd
from pty_acceptance.peer import PeerError
from pty_acceptance.session import RawSession, SessionError

START_DEADLINE_S = 10
END_DEADLINE_S = 10
WS_BEGIN, WS_END = b"ISO2-BEGIN", b"ISO2-END"


def _fail(text):
    pytest.fail(text, pytrace=False)


@pytest.fixture(scope="module")
def probed(inv, bus, run_tag):
    """(target, probe report by vector) or the reason there is none."""
    try:
        target = isolation.find_target(inv.ports["candidate"])
        report = isolation.run_probe(bus, user=inv.service_user, group=inv.service_group,
                                     tag=run_tag, target=target)
    except (isolation.IsolationError, BusError, TimeoutError, OSError) as e:
        return str(e)
    return target, report


def _results(probed, evidence, vectors):
    if isinstance(probed, str):
        _fail(f"ISO-1: the isolation probe could not run: {probed}")
    target, report = probed
    evidence("yama", isolation.yama())
    evidence("target", target.describe())
    if report.get("error"):
        _fail(f"ISO-1: probe against {target.describe()}: {report['error']}")
    got = {r["vector"]: r for r in report["results"]}
    missing = [v for v in vectors if v not in got]
    if missing:
        _fail(f"ISO-1: the probe did not report {missing}")
    for v in vectors:
        evidence(f"probe {v}", f"{got[v]['outcome']}: {got[v]['detail'][:200]}")
    return target, report, [got[v] for v in vectors]


def _assert_refused(probed, evidence, vectors, what):
    target, report, rows = _results(probed, evidence, vectors)
    worked = [f"{r['vector']} ({r['detail'][:160]})" for r in rows if r["outcome"] != "refused"]
    assert not worked, (f"ISO-1: {what} worked against {target.describe()} from uid "
                        f"{report.get('uid')}: {'; '.join(worked)}; Yama {isolation.yama()}")


@pytest.mark.requirement("ISO-1")
def test_ptrace_is_refused(probed, evidence):
    _assert_refused(probed, evidence, ["ptrace"], "ptrace")


@pytest.mark.requirement("ISO-1")
def test_proc_descriptors_environ_and_memory_are_refused(probed, evidence):
    _assert_refused(probed, evidence, ["proc-fd-list", "proc-fd-open", "proc-environ",
                                       "proc-fdinfo", "proc-mem"], "reading it through /proc")


@pytest.mark.requirement("ISO-1")
def test_process_vm_readv_is_refused(probed, evidence):
    _assert_refused(probed, evidence, ["process_vm_readv"], "process_vm_readv")


@pytest.mark.requirement("ISO-1")
def test_pidfd_getfd_is_refused(probed, evidence):
    _assert_refused(probed, evidence, ["pidfd_getfd"], "taking its descriptors with pidfd_getfd")


@pytest.mark.requirement("ISO-1")
def test_signals_are_refused(probed, evidence):
    _assert_refused(probed, evidence, ["kill", "pidfd_send_signal"], "signalling it")


@pytest.mark.requirement("ISO-1")
def test_descriptors_are_close_on_exec(inv, evidence):
    try:
        target = isolation.find_target(inv.ports["candidate"])
        bad, seen = isolation.inheritable_fds(target.pid)
        again = isolation.start_ticks(target.pid)
    except (isolation.IsolationError, OSError, ValueError) as e:
        _fail(f"ISO-1: cannot read the target's descriptors: {e}")
    evidence("target", target.describe())
    evidence("descriptors >= 3 checked", str(seen))
    assert again == target.start_ticks, f"ISO-1: pid {target.pid} was replaced while it was read"
    assert not bad, (f"ISO-1: {target.describe()} holds descriptors a child would inherit "
                     f"(no O_CLOEXEC): {'; '.join(bad)}")


def _supervisor_pid(bus: Systemd, unit: str) -> int:
    svc = bus.properties(unit, "org.freedesktop.systemd1.Service") or {}
    return int(svc.get("MainPID") or 0)


@pytest.mark.requirement("ISO-1")
def test_only_the_helper_holds_supervisor_connections(inv, bus, evidence):
    helper = inv.binaries["client"]["path"]
    try:
        sup = _supervisor_pid(bus, inv.units["supervisor"])
        pairs = isolation.supervisor_connections(inv.socket)
        holders = isolation.socket_holders()
    except (isolation.IsolationError, BusError, OSError) as e:
        _fail(f"ISO-1: cannot read the supervisor socket's connections: {e}")
    evidence("supervisor MainPID", str(sup))
    evidence("connections", f"{len(pairs)} to {inv.socket}")
    wrong = []
    for server_ino, client_ino in pairs:
        for pid in holders.get(server_ino, []):
            if pid != sup:
                wrong.append(f"pid {pid} ({isolation.exe_of(pid)}) holds the supervisor side "
                             f"socket:[{server_ino}]")
        for pid in holders.get(client_ino, []):
            exe = isolation.exe_of(pid)
            evidence("client side", f"socket:[{client_ino}] held by pid {pid} ({exe})")
            if exe != helper:
                wrong.append(f"pid {pid} ({exe}) holds a connection socket:[{client_ino}]; only "
                             f"the helper {helper} may")
    assert not wrong, "ISO-1: " + "; ".join(wrong)


# ------------------------------------------------------------------ ISO-2
SESSION_PROBE = r'''
import errno, json, os, socket, sys
name, port = sys.argv[1], int(sys.argv[2])
out = {}
try:
    fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    os.unlink(name)
    out["workspace"] = "writable"
except OSError as e:
    out["workspace"] = errno.errorcode.get(e.errno, str(e.errno))
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    out["network"] = "connected"
except OSError as e:
    out["network"] = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
sys.stdout.write("ISO2-BEGIN" + json.dumps(out) + "ISO2-END\n")
sys.stdout.flush()
sys.stdin.read()
'''


def _workspace(stack, inv):
    acct = pwd.getpwnam(inv.service_user)
    d = tempfile.mkdtemp(prefix="pty-acceptance-ws-")
    stack.callback(shutil.rmtree, d, True)
    os.chown(d, acct.pw_uid, acct.pw_gid)
    os.chmod(d, 0o700)
    return os.path.realpath(d)


@pytest.fixture(scope="module")
def session_reach(inv, bus, run_tag):
    """What a live session could do: {"workspace": ..., "network": ..., "cwd": ...}."""
    with contextlib.ExitStack() as stack:
        try:
            peer = stack.enter_context(live.module_peer(bus, inv, run_tag))
        except live.LiveError as e:
            _fail(f"ISO-2: no session can be driven: {e}")
        cwd = _workspace(stack, inv)
        name = f"iso2-{secrets.token_hex(8)}"
        raw = RawSession(peer, inv.socket)
        stack.callback(raw.close)
        try:
            raw.open()
            raw.start(["python3", "-I", "-c", SESSION_PROBE, name, str(inv.ports["production"])],
                      runtime_s=60, cwd=cwd)
            raw.wait_started(START_DEADLINE_S)
            out = raw.read(lambda o: WS_END in o.output or o.exit or o.error or o.closed,
                           START_DEADLINE_S)
        except (SessionError, PeerError, TimeoutError, BusError, OSError) as e:
            _fail(f"ISO-2: the probe session did not come up: {e}")
        stack.callback(live.end_by_eof, raw, END_DEADLINE_S)
        start = out.output.find(WS_BEGIN)
        end = out.output.find(WS_END, start + 1)
        if start < 0 or end < 0:
            _fail(f"ISO-2: no report in the session output: {out.output[-300:]!r}")
        try:
            report = json.loads(out.output[start + len(WS_BEGIN):end])
        except ValueError as e:
            _fail(f"ISO-2: the session's report is not JSON ({e}): {out.output[start:start + 200]!r}")
        if not isinstance(report, dict) or not all(isinstance(report.get(k), str)
                                                   for k in ("workspace", "network")):
            _fail(f"ISO-2: the session's report has the wrong shape: {out.output[start:start + 200]!r}")
        leftover = os.path.join(cwd, name)
        if os.path.lexists(leftover):
            _fail(f"ISO-2: the session left {leftover} behind")
        report["cwd"] = cwd
        yield report


@pytest.mark.requirement("ISO-2")
def test_session_workspace_access_is_as_declared(inv, session_reach, evidence):
    want = inv.isolation["session_workspace_writable"]
    got = session_reach["workspace"]
    evidence("session workspace", f"create+remove in its cwd {session_reach['cwd']} "
                                  f"(owned by {inv.service_user}, 0700): {got}")
    evidence("declared", f"isolation.session_workspace_writable: {want}")
    assert (got == "writable") == want, (
        f"ISO-2: a session {'could not' if want else 'could'} write its workspace "
        f"({got}); the inventory declares session_workspace_writable: {want}")


@pytest.mark.requirement("ISO-2")
def test_session_network_access_is_as_declared(inv, session_reach, evidence):
    want = inv.isolation["session_network"]
    got = session_reach["network"]
    port = inv.ports["production"]
    evidence("session network", f"TCP connect to 127.0.0.1:{port} from inside: {got}")
    evidence("declared", f"isolation.session_network: {want}")
    assert (got == "connected") == want, (
        f"ISO-2: a session {'could not' if want else 'could'} reach 127.0.0.1:{port} "
        f"({got}); the inventory declares session_network: {want}")
