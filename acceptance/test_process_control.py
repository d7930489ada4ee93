"""Process control gains no identity (ISO-3), tried live against the suite's
disposable peer only: the transient opencode-v2.service whose MainPID is the
suite's agent. No production or candidate process is ever signalled.

Linux lets any process of the service user stop or kill the MainPID: that is
availability, not identity, and is recorded, never failed. What must hold:

stopped  The attacker sends SIGSTOP to the MainPID; once /proc/<MainPID>/stat
         says T (stopped) it connects and says HELLO: ERROR AUTH, the
         connection closed, no session unit created, and the MainPID still
         stopped after the answer. Then root sends SIGCONT to the disposable
         peer and the genuine peer must get HELLO_OK: the supervisor was alive
         and accepting all along, so the refusal was not an outage.
killed   The genuine peer holds a live session through the fixed helper (its
         child, holding the connection). The attacker sends SIGKILL to the
         MainPID; once it has exited the attacker connects: refused the same
         way. The session unit of the old connection must be gone (unit
         unloaded, cgroup removed, no process alive) within its
         TimeoutStopSec + 4 s of the kill. What became of the peer unit is
         recorded.

Each case runs with two attackers, both processes of the service user:
`other-unit`, the MainPID of another tagged transient unit
(pty-acceptance-impostor-<tag>.service), and `peer-child`, a child of the
MainPID inside the peer unit's own cgroup (in the kill case it ignores
SIGTERM, so it outlives the MainPID while systemd stops the unit). The
attacker sends the signal itself; should the kernel refuse it, root signals
the disposable peer instead and the evidence says so. Root signals only
through a pidfd of the MainPID it checked, so a reused pid is never hit.
Every wait polls with a deadline and names what was still true at it.
"""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

from pty_acceptance.supervisor import admission, isolation
from pty_acceptance.supervisor.admission import assert_refused
from pty_acceptance.host.bus import SERVICE_IFACE, BusError
from pty_acceptance.host.polling import poll
from pty_acceptance.host.processes import token_processes
from pty_acceptance.supervisor.session_footprint import Footprint, HostReadError
from pty_acceptance.supervisor.session_gone import force_stop, wait_gone
from pty_acceptance.supervisor.tokens import new_token, tagged_sh
from pty_acceptance.gate.checks import expect, finding, reading
from pty_acceptance.supervisor.peer import PeerError
from pty_acceptance.supervisor.session_clients import HelperSession, SessionError
from pty_acceptance.supervisor.unit_vouch import Owner

SIGNAL_DEADLINE_S = 5   # a signal has taken effect (stopped, exited, resumed) within this
SESSION_DEADLINE_S = 10  # the live session's unit and command are there within this
SESSION_RUNTIME_S = 120
EXITED = "exited"



class MainPid:
    """The disposable peer's MainPID as root holds it: by a pidfd opened while
    systemd names it MainPID, so root's own signals never reach a reused pid."""

    def __init__(self, bus, peer):
        self.pid, self.unit = peer.info["pid"], peer.name
        self.pidfd = os.pidfd_open(self.pid)
        main = (bus.properties(peer.name, SERVICE_IFACE) or {}).get("MainPID")
        if main != self.pid:
            self.close()
            raise finding("ISO-3", f"{peer.name} has MainPID {main}, not the suite's agent {self.pid}: "
                                   "the suite signals nothing but its own disposable peer")

    def exited(self) -> bool:
        return bool(select.select([self.pidfd], [], [], 0)[0])

    def state(self) -> str:
        """The /proc state letter (T: stopped), or 'exited'."""
        try:  # a live probe of the pidfd-held MainPID, polled: not host.process's `ps` listing
            letter = isolation.process_state(self.pid)
        except isolation.IsolationError:
            letter = EXITED
        return EXITED if self.exited() else letter

    def signal_as_root(self, sig: signal.Signals) -> None:
        if not self.exited():
            signal.pidfd_send_signal(self.pidfd, sig)

    def wait_state(self, done, what: str) -> float:
        """Poll until done(state); seconds it took. Fails the test at the deadline."""
        t0 = time.monotonic()
        with reading("ISO-3", "", TimeoutError):  # the error names what was awaited
            poll(lambda: done(self.state()), SIGNAL_DEADLINE_S, what,
                 lambda: f"pid {self.pid} of {self.unit} is in state {self.state()}")
        return time.monotonic() - t0

    def close(self) -> None:
        os.close(self.pidfd)


@pytest.fixture
def mainpid(bus, peer):
    held = MainPid(bus, peer)
    yield held
    held.signal_as_root(signal.SIGCONT)  # never leave the disposable peer stopped
    held.close()


@pytest.fixture
def attacker_of(inv, peer, units, run_tag):
    """attacker_of(kind, ignore_term=False) -> (another process of the service user
    with an agent, its description)."""
    children = []

    def make(kind, ignore_term=False):
        if kind == "other-unit":
            a = units(f"pty-acceptance-impostor-{run_tag}.service", user=inv.service_user,
                      group=inv.service_group)
            role = "MainPID of another unit of the service user"
        else:
            with reading("ISO-3", "the peer's agent could not fork a child", PeerError):
                a = peer.fork_agent(ignore_term)
            children.append(a)
            role = f"child of MainPID {peer.info['pid']}" + (", ignoring SIGTERM" if ignore_term else "")
        return a, (f"pid {a.info['pid']} (uid {a.info['uid']}, gid {a.info['gid']}) in {a.name}, "
                   f"{role}")

    yield make
    for child in children:
        child.close()


def signal_mainpid(attacker, who: str, mainpid: MainPid, sig: signal.Signals, evidence) -> None:
    """The attacker signals the MainPID (availability: recorded); if the kernel
    refuses it, root signals the disposable peer instead."""
    try:
        attacker.agent("signal", pid=mainpid.pid, signal=int(sig))
        evidence(sig.name, f"sent by {who} to MainPID {mainpid.pid}: delivered "
                           "(recorded: availability, not identity)")
    except PeerError as e:
        evidence(sig.name, f"{who} was refused ({e}); root sent it to the disposable peer instead")
        mainpid.signal_as_root(sig)


def unit_state(bus, name: str) -> str:
    try:
        unit = bus.properties(name)
        svc = bus.properties(name, SERVICE_IFACE) or {}
    except BusError as e:
        return f"unreadable ({e})"
    if unit is None:
        return "unloaded"
    return (f"ActiveState={unit.get('ActiveState')} SubState={unit.get('SubState')} "
            f"Result={svc.get('Result')} MainPID={svc.get('MainPID')}")


KINDS = ("other-unit", "peer-child")


# ------------------------------------------------------------------ stopped
@pytest.mark.requirement("ISO-3")
@pytest.mark.parametrize("kind", KINDS)
def test_a_stopped_mainpid_lends_its_identity_to_no_one(inv, bus, peer, mainpid, attacker_of, kind,
                                                        deliberate_stop, evidence):
    attacker, who = attacker_of(kind)
    evidence("peer", f"MainPID {mainpid.pid} of {peer.name} (the suite's disposable peer)")
    evidence("attacker", who)
    # SUITE-5's stop guard does not count this stop: it is the test's own, and it
    # is taken back (SIGCONT) whatever the test found
    with deliberate_stop(mainpid.pid):
        try:
            signal_mainpid(attacker, who, mainpid, signal.SIGSTOP, evidence)
            took = mainpid.wait_state(lambda s: s == "T", f"MainPID {mainpid.pid} stopped (state T)")
            evidence("MainPID stopped", f"state T {took:.3f} s after SIGSTOP")
            with admission.watch_sessions() as watch:
                a = admission.attempt_as(attacker, inv.socket, f"{who}, while MainPID {mainpid.pid} is stopped")
                during = mainpid.state()
                evidence("MainPID state after the answer", during)
                assert_refused(f"ISO-3 (MainPID stopped, {kind})", a, watch.new_units, evidence)
            expect(during == "T", "ISO-3", f"MainPID {mainpid.pid} was no longer stopped (state {during}) "
                                           f"when the supervisor had answered {a.describe()}: the refusal "
                                           "proves nothing")
        finally:
            mainpid.signal_as_root(signal.SIGCONT)
        mainpid.wait_state(lambda s: s not in ("T", EXITED), f"MainPID {mainpid.pid} running after SIGCONT")
    frame, seconds = admission.timed_hello(peer, inv.socket)
    peer.agent("close")
    evidence("genuine peer after SIGCONT (root's, to the disposable peer)", f"{frame} in {seconds:.3f} s")
    expect(frame.get("name") == "HELLO_OK", "ISO-3",
           f"after SIGCONT the genuine peer, MainPID {mainpid.pid} of {peer.name}, was answered "
           f"{frame}: a supervisor that refuses its own peer proves nothing by refusing {who}")


# ------------------------------------------------------------------ killed
def live_session(bus, h: HelperSession, token: str, owner: Owner) -> Footprint:
    """Open the helper session; its footprint once its command runs."""
    with admission.watch_sessions() as watch:
        with reading("ISO-3", "the genuine peer could not hold a session through the fixed helper",
                     SessionError, PeerError, TimeoutError, HostReadError, BusError, OSError):
            h.open()
            units = poll(watch.new_units, SESSION_DEADLINE_S, "the session unit created")
            fp = Footprint.capture(bus, units[0], token, owner)
            poll(lambda: token_processes(token), SESSION_DEADLINE_S,
                 "the session's command running", fp.describe)
    fp.remember()
    return fp


@pytest.mark.requirement("ISO-3")
@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_mainpid_lends_its_identity_to_no_one_and_its_session_ends(
        inv, bus, peer, mainpid, attacker_of, kind, evidence):
    attacker, who = attacker_of(kind, ignore_term=True)
    token = new_token()
    h = HelperSession(peer, inv.socket, inv.binaries.client.path,
                      tagged_sh(f"exec sleep 300.{token}", token), runtime_s=SESSION_RUNTIME_S)
    fp = None
    try:
        fp = live_session(bus, h, token, Owner.of(inv))
        evidence("peer", f"MainPID {mainpid.pid} of {peer.name} (the suite's disposable peer), "
                         f"session through the fixed helper pid {h.pid}")
        evidence("session of the old connection", fp.describe())
        evidence("attacker", who)
        killed_at = time.monotonic()
        signal_mainpid(attacker, who, mainpid, signal.SIGKILL, evidence)
        took = mainpid.wait_state(lambda s: s == EXITED, f"MainPID {mainpid.pid} exited")
        evidence("MainPID exited", f"{took:.3f} s after SIGKILL")
        evidence(f"{peer.name} after the kill", unit_state(bus, peer.name))
        with admission.watch_sessions(known=[fp.unit]) as watch:
            a = admission.attempt_as(attacker, inv.socket, f"{who}, after MainPID {mainpid.pid} was killed")
            evidence(f"{peer.name} when the supervisor had answered", unit_state(bus, peer.name))
            assert_refused(f"ISO-3 (MainPID killed, {kind})", a, watch.new_units, evidence)

        bound = fp.stop_bound_s()
        gone, left = wait_gone(bus, [fp], max(0.1, bound - (time.monotonic() - killed_at)),
                               since=killed_at)
        evidence(f"{peer.name} at the end", unit_state(bus, peer.name))
        if left:
            raise finding("ISO-3", f"{bound:.1f} s after MainPID {mainpid.pid} of {peer.name} was killed "
                                   f"(by {who}), the session of its old connection survives: {left[fp.unit]}")
        evidence("session of the old connection gone", f"{gone[fp.unit]:.2f} s after the kill "
                                                       f"(bound {bound:.1f} s)")
    finally:
        h.close()
        if fp is not None and fp.leftovers(bus):
            force_stop(bus, [fp.unit])
            fp.kill_survivors()
