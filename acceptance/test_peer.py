"""Peer authentication: only the peer service's MainPID gets in.

PEER-1  the real peer (MainPID of the disposable opencode-v2.service) is
        answered HELLO_OK carrying exactly its unit's 16-byte InvocationID
        (systemd 257 and later: read from the MainPID's pidfd with
        GetUnitByPIDFD, that process's unit and invocation in one answer;
        before 257, by the unit's name);
        the socket peer is judged, not whoever holds the socket later.
PEER-2  each pin is varied from outside on a unit of the right name and must
        cost HELLO_OK: Group (GID), User (UID), Slice (ControlGroup) and
        ActiveState (a peer in `deactivating`). MainPID: PEER-5; InvocationID
        is always 16 bytes from systemd and cannot be varied from outside.
PEER-3  SO_PEERPIDFD: the kernel provides it (or else no peer may be
        accepted); a connection whose connecting MainPID has exited is
        refused even after a new peer took over the unit name.
PEER-4  HELLO_OK, then the MainPID moves (sd_notify MAINPID=, same
        invocation, the pinned process still alive) or the unit is replaced
        (new MainPID and InvocationID): START on the old socket is refused
        and no session unit appears.
PEER-5  refused with ERROR AUTH and nothing started: a child of the peer
        (what the helper connecting on its own would be), the MainPID of
        another unit of the same user, root, another user.
"""

import pytest

from pty_acceptance.supervisor import admission
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.admission import AuthAttempt, assert_refused
from pty_acceptance.host.bus import BusError
from pty_acceptance.gate.failures import fail

OTHER_USER = "nobody"
OTHER_GROUP = "nogroup"
OTHER_SLICE = "user.slice"
REFUSED_AFTER_HELLO_OK = (p.Code.AUTH, p.Code.START_FAILED)


# ----------------------------------------------------------------- PEER-1/2
@pytest.mark.requirement("PEER-1", "PEER-2")
def test_the_peer_mainpid_is_accepted_with_its_invocation_id(inv, bus, peer, evidence):
    frame, seconds = admission.timed_hello(peer, inv.socket)
    # systemd 257+: read from the MainPID's pidfd (GetUnitByPIDFD), before: by name
    unit_inv, how = admission.peer_invocation(bus, peer.name, peer.info["pid"])
    evidence("peer", f"{peer.name} MainPID={peer.info['pid']} uid={peer.info['uid']} "
                     f"gid={peer.info['gid']} ControlGroup={peer.info['control_group']}")
    evidence("InvocationID (bus)", f"{unit_inv.hex()} ({how})")
    evidence("HELLO answer", f"{frame} in {seconds:.3f} s")
    if frame.get("name") != "HELLO_OK":
        fail(f"PEER-1: the MainPID {peer.info['pid']} of {peer.name} was answered {frame}, expected HELLO_OK")
    if not (len(unit_inv) == 16 and frame["payload"] == unit_inv.hex() == peer.info["invocation"]):
        fail(f"PEER-2: HELLO_OK carries {frame['payload']!r}; {peer.name}'s InvocationID is "
             f"{unit_inv.hex()!r} (bus, {how}) / {peer.info['invocation']!r} ($INVOCATION_ID)")


def pin_variant(inv, variant):
    """(DisposableUnit keywords, what differs) for a unit with the peer's name and one other fact."""
    user, group = inv.service_user, inv.service_group
    if variant == "group":  # the supplementary group keeps the socket reachable
        return (dict(user=user, group=OTHER_GROUP, extra=[("SupplementaryGroups", ("as", [group]))]),
                f"GID is {OTHER_GROUP} ({group} only as a supplementary group)")
    if variant == "user":
        return dict(user=OTHER_USER, group=group), f"UID is {OTHER_USER}, GID {group}"
    if variant == "slice":
        return (dict(user=user, group=group, slice_=OTHER_SLICE),
                f"ControlGroup is under {OTHER_SLICE}")
    raise ValueError(variant)


@pytest.mark.requirement("PEER-2")
@pytest.mark.parametrize("variant", ["group", "user", "slice"])
def test_a_peer_unit_with_one_other_fact_is_refused(inv, units, variant, evidence, created):
    kw, differs = pin_variant(inv, variant)
    u = units(inv.units.peer, **kw)
    evidence("impostor", f"{u.name} MainPID={u.info['pid']} uid={u.info['uid']} gid={u.info['gid']} "
                         f"ControlGroup={u.info['control_group']}: {differs}")
    a = admission.attempt_as(u, inv.socket, f"{u.name} whose {differs}")
    assert_refused(f"PEER-2 ({variant})", a, created, evidence)


@pytest.mark.requirement("PEER-2")
def test_a_deactivating_peer_is_refused(inv, bus, units, evidence, created):
    """ActiveState pin: while ExecStop runs, the MainPID is alive but the unit is deactivating."""
    u = units(inv.units.peer, user=inv.service_user, group=inv.service_group,
              extra=[("ExecStop", ("a(sasb)", [("/bin/sleep", ["/bin/sleep", "60"], False)]))])
    try:
        bus.stop(u.name)
        props = bus.wait_for(u.name, lambda pr: pr and pr.get("ActiveState") == "deactivating",
                             5, "deactivating")
        evidence("impostor", f"{u.name} MainPID={u.info['pid']} ActiveState={props.get('ActiveState')} "
                             f"SubState={props.get('SubState')}")
        a = admission.attempt_as(u, inv.socket, f"{u.name} while deactivating")
    finally:  # end the ExecStop sleep; stop() does the rest
        try:
            bus.kill(u.name, 9, who="control")
        except BusError:
            pass  # no control process left: the unit already ended
    assert_refused("PEER-2 (ActiveState)", a, created, evidence)


# ------------------------------------------------------------------- PEER-3
@pytest.mark.requirement("PEER-3", "PEER-1")
def test_a_connection_whose_peer_exited_is_refused(inv, peer, units, evidence, created):
    has_pidfd, why = admission.kernel_has_so_peerpidfd()
    evidence("kernel", why)
    sock = admission.take_connection(peer, inv.socket)
    with sock:
        gone_pid = peer.info["pid"]
        peer.stop()  # the connecting MainPID exits; only its PID number is left
        successor = units(inv.units.peer, user=inv.service_user, group=inv.service_group)
        evidence("peers", f"connected by {gone_pid} (exited), {successor.name} now has MainPID "
                          f"{successor.info['pid']}")
        a = admission.speak(sock, f"socket of the exited MainPID {gone_pid}, held by root")
    assert_refused("PEER-3", a, created, evidence)
    if not has_pidfd:  # then no peer at all may be accepted: a HELLO_OK proves a bare-PID fallback
        frame, _ = admission.timed_hello(successor, inv.socket)
        evidence("valid peer without SO_PEERPIDFD", frame)
        if frame.get("name") == "HELLO_OK":
            fail(f"PEER-3: this kernel has no SO_PEERPIDFD ({why}) yet the peer was accepted: {frame}")


# ------------------------------------------------------------------- PEER-4
def _move_mainpid(bus, u, units, evidence):
    child = u.agent("move_mainpid")["child"]
    bus.wait_for(u.name, lambda pr: pr and pr.get("MainPID") == child, 5,
                 f"MainPID={child}", iface="org.freedesktop.systemd1.Service")
    evidence("replaced", f"MainPID {u.info['pid']} -> {child}, same InvocationID, "
                         f"{u.info['pid']} still alive")


def _replace_unit(bus, u, units, evidence):
    old_inv = admission.invocation_id(bus, u.name)
    u.stop()
    new = units(u.name, user=u.user, group=u.group)
    evidence("replaced", f"MainPID {u.info['pid']} -> {new.info['pid']}, InvocationID "
                         f"{old_inv.hex()} -> {admission.invocation_id(bus, new.name).hex()}")


REPLACEMENTS = {"mainpid-moved": _move_mainpid, "unit-replaced": _replace_unit}


@pytest.mark.requirement("PEER-4")
@pytest.mark.parametrize("how", sorted(REPLACEMENTS))
def test_start_after_the_peer_was_replaced_is_refused(inv, bus, units, how, evidence, created):
    u = units(inv.units.peer, user=inv.service_user, group=inv.service_group,
              extra=[("NotifyAccess", ("s", "all"))])
    sock = admission.take_connection(u, inv.socket)
    with sock:
        sock.sendall(p.encode(p.T.HELLO))
        hello, closed = admission.read_frames(sock, lambda fs: fs, admission.ANSWER_DEADLINE_S)
        if not (hello and hello[0].type == p.T.HELLO_OK):
            fail(f"PEER-4: the genuine peer {u.name} was not authenticated: {[f.name for f in hello]} {closed}")
        REPLACEMENTS[how](bus, u, units, evidence)
        admission.send_start(sock, ["/bin/sleep", "30"])
        a = AuthAttempt(f"START on the socket authenticated before ({how})")
        a.frames, a.closed = admission.read_frames(sock, lambda fs: fs, admission.ANSWER_DEADLINE_S)
    evidence("answer to START", a.describe())
    new = created()
    if any(f.type == p.T.STARTED for f in a.frames) or new:
        fail(f"PEER-4 ({how}): START after the replacement started a session: {a.describe()} units={sorted(new)}")
    if a.error_code() not in REFUSED_AFTER_HELLO_OK:
        fail(f"PEER-4 ({how}): expected ERROR AUTH or START_FAILED, the host answered: {a.describe()}")


# ------------------------------------------------------------------- PEER-5
@pytest.mark.requirement("PEER-5", "PEER-1")
def test_a_child_of_the_peer_is_refused(inv, peer, evidence, created):
    """What the helper connecting on its own would be: same unit and UID, not MainPID."""
    reply = peer.agent("child_hello", path=inv.socket)
    evidence("child", f"pid {reply.get('pid')} of {peer.name} (MainPID {peer.info['pid']}): {reply}")
    frame = reply.get("frame") or {}
    if frame.get("name") == "HELLO_OK":
        fail(f"PEER-5: a non-MainPID process {reply.get('pid')} of {peer.name} was authenticated: {reply}")
    if admission.reported_error(frame) != p.Code.AUTH:
        fail(f"PEER-5: expected ERROR AUTH for the peer's child, the host answered {reply}")
    new = created()
    if new:
        fail(f"PEER-5: the child's attempt left session units {sorted(new)}")


@pytest.mark.requirement("PEER-5")
def test_another_unit_of_the_service_user_is_refused(inv, units, run_tag, evidence, created):
    u = units(f"pty-acceptance-impostor-{run_tag}.service", user=inv.service_user,
              group=inv.service_group)
    a = admission.attempt_as(u, inv.socket, f"MainPID {u.info['pid']} of {u.name} (same UID)")
    assert_refused("PEER-5 (same UID, other unit)", a, created, evidence)


@pytest.mark.requirement("PEER-5")
def test_root_is_refused(inv, evidence, created):
    a = admission.attempt_as_root(inv.socket)
    assert_refused("PEER-5 (root)", a, created, evidence)


@pytest.mark.requirement("PEER-5")
def test_another_user_is_refused(inv, units, evidence, created):
    """The unit has the peer's name; without the service group the socket
    directory should already keep it out (a refused connect is a pass)."""
    u = units(inv.units.peer, user=OTHER_USER, group=OTHER_GROUP)
    a = admission.attempt_as(u, inv.socket, f"{u.name} as {OTHER_USER}:{OTHER_GROUP}")
    assert_refused("PEER-5 (other user)", a, created, evidence, allow_connect_error=True)
