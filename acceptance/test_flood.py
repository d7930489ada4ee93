"""Admission under abuse: floods do not lock out the real peer.

FLOOD-1 a same-UID process of another unit opens hundreds of unauthenticated
        and junk connections and holds the silent ones; the supervisor keeps
        at most its quota of them (the inventory's admission.unauth_quota,
        itself at most 32: "a small quota"), and meanwhile the peer
        (authenticated once before) authenticates 16 connections, which
        then carry 16 running sessions; closing them removes the sessions.
FLOOD-1 the quota is a cap on connections held at once, apart from the rate:
        a slow flood (one silent connection every HELLO timeout / (3 x
        quota) s, far under any rate limit that lets a quota's worth in per
        HELLO timeout) for twice the HELLO timeout never has more than the
        quota held at once; a rate limit alone would let three times the
        quota pile up before the first expires.
FLOOD-2 right after a rejected flood a fresh peer (never authenticated)
        is answered HELLO_OK with its InvocationID, retrying only on
        ERROR RATE_LIMITED.
FLOOD-3 every handshake (connect .. HELLO_OK, measured by the suite around
        the agent's calls: an upper bound on every D-Bus call in it) of
        FLOOD-1/2 takes at most 5 s. Not provoked, so recorded as a `concern`
        property (never counted as passed): a system bus or systemd that is
        slow to answer, where each call's own 5 s deadline would matter.
FLOOD-4 a session writing without pause while nobody reads: its writer
        stalls and the supervisor's RSS stays bounded; a STOP sent while
        the output is saturated (still not reading) removes the session
        within the inventory's session_stop.timeout_s (never the unit's own
        TimeoutStopSec, which is judged) + script(1)'s 2 s + slack, and EXIT follows
        once the reader drains.
"""

import time

import psutil
import pytest

from pty_acceptance.host import cgroups
from pty_acceptance.supervisor import admission
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.host.bus import SERVICE_IFACE
from pty_acceptance.host.backpressure import wait_stalled
from pty_acceptance.supervisor.session_footprint import bounded_stop_problem
from pty_acceptance.supervisor.session_gone import wait_gone
from pty_acceptance.supervisor.session_stream import Drain
from pty_acceptance.supervisor.tracked_sessions import Sessions
from pty_acceptance.supervisor.tokens import new_token, tagged_sh
from pty_acceptance.supervisor.peer import DisposableUnit, PeerError
from pty_acceptance.supervisor.session_clients import RawSession, SessionError
from pty_acceptance.supervisor.unit_vouch import Owner
from pty_acceptance.gate.checks import expect, expect_none
from pty_acceptance.gate.failures import fail

FLOOD_CONNECTIONS = 400
JUNK_EVERY = 3               # every third flood connection sends junk instead of staying silent
ANSWER_WINDOW_S = 0.5        # what the supervisor has not answered by then, it holds
QUOTA_CEILING = 32           # our reading of "a small quota" (TARGET-CONTRACT section 2): twice the slots
SLOW_FLOOD_PILE = 3          # the slow flood opens this many quotas' worth per HELLO timeout
HELLO_TIMEOUT_MAX_S = 25     # the slow flood lasts twice the HELLO timeout: the agent answers within 60 s
HANDSHAKE_BOUND_S = 5.0      # every D-Bus call of the handshake has a 5 s deadline
SESSIONS = 16
FLOOD3_NOT_PROVOKED = (
    "not provoked: a D-Bus call of the handshake that systemd or the bus is slow to answer. Each "
    "call is bounded here only through the whole handshake's time under a socket flood; whether "
    "every call has its own 5 s deadline when the bus stalls cannot be tested from outside without "
    "stalling the host's systemd")
WRITER = "yes"               # /usr/bin/yes: writes without pause
STALL_DEADLINE_S = 5.0       # the writer must be blocked by backpressure by then
WRITTEN_MAX = 32 << 20       # what the writer may write while nobody reads
RSS_GROWTH_MAX = 32 << 20    # what the supervisor may grow by meanwhile
EXIT_AFTER_DRAIN_S = 5.0


@pytest.fixture
def flooder(inv, bus, run_tag):
    """A same-UID process of another unit: not the peer, but allowed to reach the socket."""
    u = DisposableUnit(bus, name=f"pty-acceptance-flood-{run_tag}.service", user=inv.service_user,
                       group=inv.service_group, tag=run_tag)
    try:
        u.start()  # a start that fails has stopped what it made
    except (PeerError, TimeoutError) as e:
        fail(f"SUITE-3: the flooding unit did not start: {e}")
    yield u
    u.stop()


def flood(flooder, inv, evidence) -> dict:
    r = flooder.agent("flood", path=inv.socket, count=FLOOD_CONNECTIONS, junk_every=JUNK_EVERY,
                      window=ANSWER_WINDOW_S)
    r.pop("ok", None)
    evidence("flood", f"{FLOOD_CONNECTIONS} connections from {flooder.name} (pid {flooder.info['pid']}): {r}")
    return r


def refused(r: dict) -> int:
    return sum(r["answers"].values()) + sum(r["connect_errors"].values())


def open_timed(peer, inv, times: list) -> RawSession:
    t0 = time.monotonic()
    try:
        return RawSession(peer, inv.socket).open()
    finally:
        times.append(round(time.monotonic() - t0, 3))


def slow(times: list) -> list:
    return [t for t in times if t > HANDSHAKE_BOUND_S]


# ------------------------------------------------------------------ FLOOD-1
@pytest.mark.requirement("FLOOD-1", "FLOOD-3")
def test_a_flood_leaves_all_sixteen_slots_to_the_peer(inv, bus, peer, flooder, evidence, concern):
    concern("FLOOD-3", FLOOD3_NOT_PROVOKED)
    ss, times, problems = Sessions(bus, peer, inv.socket, Owner.of(inv)), [], []
    try:
        ss.open_sessions.append(open_timed(peer, inv, times))  # the peer is known before the flood
        quota = _quota(inv)
        r = flood(flooder, inv, evidence)
        if r["held"] > quota:
            problems.append(f"the supervisor held {r['held']} of {FLOOD_CONNECTIONS} unauthenticated "
                            f"connections open (the inventory's admission.unauth_quota: {quota}); "
                            f"answers {r['answers']}")
        try:
            while len(ss.open_sessions) < SESSIONS:  # every handshake while the flood holds on
                ss.open_sessions.append(open_timed(peer, inv, times))
        except (SessionError, OSError) as e:
            problems.append(f"during the flood the peer authenticated {len(ss.open_sessions)} of "
                            f"{SESSIONS} connections: {e}")
        released = flooder.agent("flood_release")
        evidence("flood after the handshakes", f"{released['still_open']} of {released['released']} "
                                               f"held connections still open: {released['answers']}")
        token = new_token()
        try:
            for s in ss.open_sessions:  # every START sent first: the 16 starts are in flight at once
                s.start(["/bin/sleep", f"30.{token}1"])
            for s in ss.open_sessions:
                ss.started(s, token)
        except (SessionError, TimeoutError, OSError) as e:
            problems.append(f"the peer got {len(ss.footprints)} of {SESSIONS} sessions: {e}")
    finally:
        forced = ss.close()
    evidence("sessions", [fp.unit for fp in ss.footprints])
    evidence("handshake seconds", times)
    expect_none(problems, "FLOOD-1")
    expect(not forced, "FLOOD-1", f"closing the connections did not remove the sessions: {forced}")
    expect(not slow(times), "FLOOD-3", f"handshakes during the flood took {slow(times)} s (bound {HANDSHAKE_BOUND_S})")


def _quota(inv) -> int:
    """The inventory's quota of unauthenticated connections, if it is a small one."""
    quota = inv.admission.unauth_quota
    expect(quota <= QUOTA_CEILING, "FLOOD-1", f"the inventory's admission.unauth_quota is {quota}, not a small quota "
                                              f"(TARGET-CONTRACT 2; at most {QUOTA_CEILING}, twice the session slots)")
    return quota


@pytest.mark.requirement("FLOOD-1")
def test_a_slow_flood_under_the_rate_stays_at_the_quota(inv, flooder, evidence):
    quota, hello_s = _quota(inv), inv.admission.hello_timeout_s
    expect(hello_s <= HELLO_TIMEOUT_MAX_S, "FLOOD-1",
           f"the inventory's admission.hello_timeout_s is {hello_s} s; the slow flood "
           f"must outlast it twice and can last at most {2 * HELLO_TIMEOUT_MAX_S} s")
    interval = hello_s / (SLOW_FLOOD_PILE * quota)
    duration = 2 * hello_s + ANSWER_WINDOW_S
    r = flooder.agent("slow_flood", path=inv.socket, interval=interval, duration=duration,
                      window=ANSWER_WINDOW_S)
    r.pop("ok", None)
    closed_after = r.pop("held_closed_after_s")
    evidence("slow flood", f"one connection every {interval:.3f} s for {duration:g} s from "
                           f"{flooder.name}: {r}")
    evidence("held connections the supervisor closed", f"{len(closed_after)}, after " + (
        f"{min(closed_after):g} to {max(closed_after):g} s of silence" if closed_after else "-"))
    expect(r["max_held"] <= quota, "FLOOD-1",
           f"a slow flood (one silent connection every {interval:.3f} s for {duration:g} s, "
           f"HELLO timeout {hello_s} s) had {r['max_held']} unauthenticated connections held at "
           f"once {r['max_held_at_s']} s in, over the inventory's admission.unauth_quota of "
           f"{quota}: the quota is not a cap apart from the rate; answers {r['answers']}")


# ------------------------------------------------------------------ FLOOD-2
@pytest.mark.requirement("FLOOD-2", "FLOOD-3")
def test_a_fresh_peer_authenticates_right_after_a_flood(inv, bus, peer, flooder, evidence):
    r = flood(flooder, inv, evidence)
    flooder.agent("flood_release")
    expect(refused(r) > 0, "FLOOD-2", f"nothing of a {FLOOD_CONNECTIONS}-connection flood was refused: {r}")
    t0, tries, frame, delay = time.monotonic(), [], {}, 0.01
    while time.monotonic() - t0 < HANDSHAKE_BOUND_S:
        frame, seconds = admission.timed_hello(peer, inv.socket)
        tries.append((frame.get("name"), round(seconds, 3)))
        if admission.reported_error(frame) != p.Code.RATE_LIMITED:
            break
        peer.agent("close")
        time.sleep(delay)  # back off before retrying a rate-limited HELLO
        delay = min(delay * 2, 0.5)
    total = time.monotonic() - t0
    peer.agent("close")
    evidence("attempts after the flood", f"{tries} in {total:.3f} s")
    expect(frame.get("name") == "HELLO_OK", "FLOOD-2",
           f"after the flood the peer {peer.name} was not authenticated: {tries}")
    expect(frame["payload"] == admission.invocation_id(bus, peer.name).hex(), "FLOOD-2",
           f"HELLO_OK after the flood carries {frame['payload']}, not {peer.name}'s InvocationID")
    expect(total <= HANDSHAKE_BOUND_S, "FLOOD-3",
           f"the first handshake after the flood took {total:.3f} s (bound {HANDSHAKE_BOUND_S})")


# ------------------------------------------------------------------ FLOOD-4
def supervisor_rss(bus, inv) -> tuple[int, list[int]]:
    """RSS of every process of the supervisor unit (the reference is a wrapper and its child)."""
    # psutil, not host.process: Testinfra splits `ps` lines on spaces and comm, which any process sets, comes first
    props = bus.properties(inv.units.supervisor, SERVICE_IFACE) or {}
    path = cgroups.cgroup_dir(props.get("ControlGroup") or "")
    pids = cgroups.cgroup_pids(path) if path else []
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total, pids


@pytest.mark.requirement("FLOOD-4")
def test_unread_output_is_bounded_and_a_saturated_stop_ends_in_time(inv, bus, peer, evidence):
    rss0, pids = supervisor_rss(bus, inv)
    expect(pids, "FLOOD-4", f"no processes found in the cgroup of {inv.units.supervisor}")
    ss, problems = Sessions(bus, peer, inv.socket, Owner.of(inv)), []
    try:
        token = new_token()
        s = ss.start(tagged_sh(f"exec {WRITER} pty-acceptance saturating output", token))
        fp = ss.started(s, token)
        try:
            written = wait_stalled(fp.path, WRITER, STALL_DEADLINE_S)
        except TimeoutError as e:
            written, problems = None, [f"with nobody reading, the session's writer never stalled: {e}"]
        growth = supervisor_rss(bus, inv)[0] - rss0
        evidence("unread output", f"{fp.describe()}: {WRITER} wrote {written} bytes before it "
                                  f"stalled; supervisor {pids} RSS {rss0} -> +{growth} bytes")
        if written is not None and written > WRITTEN_MAX:
            problems.append(f"with nobody reading, {WRITER} wrote {written} bytes (bound {WRITTEN_MAX})")
        if growth > RSS_GROWTH_MAX:
            problems.append(f"the supervisor's RSS grew by {growth} bytes (bound {RSS_GROWTH_MAX})")
        stop_problem = bounded_stop_problem(fp)
        if stop_problem:
            problems.append(stop_problem)

        t0 = time.monotonic()
        s.send(p.encode(p.T.STOP))  # and still nobody reads
        took, left = wait_gone(bus, [fp], fp.stop_bound_s(), since=t0)
        if left:
            problems.append(f"STOP under saturated output: after {fp.stop_bound_s():g} s "
                            f"(session_stop.timeout_s + script(1)'s 2 s + slack) "
                            f"still there: {left[fp.unit]}")
        t1, drain = time.monotonic(), Drain(s)
        try:
            out = drain.to_end(EXIT_AFTER_DRAIN_S)
        except TimeoutError as e:
            out = s.outcome
            problems.append(f"after the STOP: {e}")
        evidence("saturated STOP", f"session gone {took.get(fp.unit)} s after STOP (bound "
                                   f"{fp.stop_bound_s():g} s); then drained {drain.output_bytes} bytes, "
                                   f"exit={out.exit} error={out.error} closed={out.closed} after "
                                   f"{time.monotonic() - t1:.3f} s")
        if out.exit is None:
            problems.append(f"no EXIT after the STOP and {drain.output_bytes} drained bytes: "
                            f"{out.describe()}")
    finally:
        forced = ss.close()
    expect_none(problems, "FLOOD-4")
    expect(not forced, "FLOOD-4", f"the stopped session had to be removed by force: {forced}")
