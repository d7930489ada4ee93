"""The reference Python supervisor's own tests (tests/reference/src/
supervisor-python/cmd/supervisor/supervisor.py, imported as a module: its
main() runs only as a script), the behaviours the Go supervisor's `go test`
checks where they apply: START's limits at and one past, the frame reader,
the exit mapping, admission, orphan matching, and the forge-proof end of a
session (CONC-2): signals believed only from systemd's owner, an end confirmed
by a method call."""

from __future__ import annotations

import importlib.util
import os
import socket
import struct
import time

import pytest
from jeepney import DBusAddress, HeaderFields, new_signal

from conftest import REPO

PATH = REPO / "tests/reference/src/supervisor-python/cmd/supervisor/supervisor.py"
OWNER, FORGER = ":1.1", ":1.666"
UNIT = "opencode-pty-00112233445566778899aabbccddeeff.service"


@pytest.fixture(scope="module")
def sup():
    spec = importlib.util.spec_from_file_location("reference_python_supervisor", PATH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not mod.FAULTS, f"{mod.FAULTS_FILE} of this machine sets {mod.FAULTS}"
    return mod


@pytest.fixture
def faults(sup):
    def use(*words):
        sup.FAULTS.clear()
        sup.FAULTS.update(words)
    yield use
    sup.FAULTS.clear()


def start_payload(runtime, *argv: bytes) -> bytes:
    out = struct.pack(">IHHH", runtime, 24, 80, len(argv))
    for a in argv:
        out += struct.pack(">I", len(a)) + a
    return out


OK = 0
START_CASES = {
    "command of 4096 bytes": (start_payload(60, b"/" + b"c" * 4095), OK),
    "command of 4097 bytes": (start_payload(60, b"/" + b"c" * 4096), "LIMIT"),
    "128 arguments": (start_payload(60, b"/bin/true", *[b"a"] * 128), OK),
    "129 arguments": (start_payload(60, b"/bin/true", *[b"a"] * 129), "LIMIT"),
    "argument of 16384 bytes": (start_payload(60, b"/bin/true", b"a" * 16384), OK),
    "argument of 16385 bytes": (start_payload(60, b"/bin/true", b"a" * 16385), "LIMIT"),
    "arguments of 65536 bytes": (start_payload(60, b"/bin/true", *[b"a" * 16384] * 4), OK),
    "arguments of 65537 bytes": (start_payload(60, b"/bin/true", b"a", *[b"a" * 16384] * 4), "LIMIT"),
    "runtime 0": (start_payload(0, b"/bin/true"), "LIMIT"),
    "runtime 1": (start_payload(1, b"/bin/true"), OK),
    "runtime 3600": (start_payload(3600, b"/bin/true"), OK),
    "runtime 3601": (start_payload(3601, b"/bin/true"), "LIMIT"),
    "no command": (start_payload(60), "PROTOCOL"),
    "empty command": (start_payload(60, b""), "PROTOCOL"),
    "NUL as the command's first byte": (start_payload(60, b"\0/bin/true"), "PROTOCOL"),
    "an argument that is only NUL": (start_payload(60, b"/bin/echo", b"\0"), "PROTOCOL"),
    "NUL as an argument's first byte": (start_payload(60, b"/bin/echo", b"\0a"), "PROTOCOL"),
    "malformed UTF-8": (start_payload(60, b"/bin/echo", b"\xff\xfe"), "PROTOCOL"),
    "trailing bytes": (start_payload(60, b"/bin/true") + b"\0", "PROTOCOL"),
    "too short": (start_payload(60)[:9], "PROTOCOL"),
}


@pytest.mark.parametrize("case", sorted(START_CASES))
def test_start_limits(sup, case):
    payload, want = START_CASES[case]
    if want == OK:
        assert sup.parse_start(payload)[3]
        return
    with pytest.raises(sup.Reject) as e:
        sup.parse_start(payload)
    assert e.value.code == {"LIMIT": sup.E_LIMIT, "PROTOCOL": sup.E_PROTOCOL}[want]


@pytest.mark.parametrize("n, t, ok", [(0, 1, True), (1, 1, False), (10, 2, True), (9, 2, False),
                                      (70158, 2, True), (70159, 2, False), (32768, 3, True),
                                      (32769, 3, False), (4, 5, True), (5, 5, False), (0, 0x7F, False),
                                      (8, 0x84, False)])
def test_frame_header_bounds(sup, n, t, ok):
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        b.sendall(struct.pack(">IB", n, t) + (b"\0" * n if ok else b""))
        r = sup.FrameReader(a)
        if ok:
            deadline = time.monotonic() + 5
            while (f := r.poll()) is None:
                assert time.monotonic() < deadline
            assert f[0] == t and len(f[1]) == n
        else:
            with pytest.raises(sup.Reject) as e:
                r.poll()
            assert e.value.code == sup.E_PROTOCOL


def test_a_connection_closed_inside_a_frame_is_protocol(sup):
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        b.sendall(struct.pack(">IB", 9, 3) + b"cut")
        b.shutdown(socket.SHUT_WR)
        r = sup.FrameReader(a)
        with pytest.raises(sup.Reject):
            while r.poll() is None:
                pass


@pytest.mark.parametrize("code, status, result, stopped, want", [
    (1, 0, "success", False, (0, 0)), (1, 3, "exit-code", False, (3, 0)), (2, 9, "signal", False, (0, 9)),
    (3, 11, "core-dump", False, (0, 11)), (1, 0, "success", True, (0, 15)), (1, 0, "timeout", False, (0, 15)),
    (1, 1, "exit-code", True, (1, 0))])
def test_exit_mapping(sup, code, status, result, stopped, want):
    st = sup.UnitState(UNIT, -1)
    st.on_props(sup.SERVICE_IF, {"ExecMainCode": ("i", code), "ExecMainStatus": ("i", status),
                                 "Result": ("s", result)})
    st.stop_requested = stopped
    assert st.exit_pair() == want


def test_mistyped_exit_properties_fail_closed(sup):
    for name, value in (("ExecMainCode", ("u", 1)), ("ExecMainStatus", ("s", "0")), ("Result", ("i", 0))):
        st = sup.UnitState(UNIT, -1)
        st.on_props(sup.SERVICE_IF, {name: value})
        with pytest.raises(sup.Reject, match=name):
            st.exit_pair()


def admission(sup):
    s = object.__new__(sup.Server)  # no bus: only the admission state
    s.lock, s.unauth, s.tokens, s.token_t, s.locked_until = sup.threading.Lock(), 0, sup.RATE_BURST, \
        time.monotonic(), 0.0
    return s


def test_unauthenticated_quota_and_token_bucket(sup, faults):
    faults()
    s = admission(sup)
    assert [s.admit_unauth() for _ in range(sup.UNAUTH_QUOTA)] == [None] * sup.UNAUTH_QUOTA
    assert s.admit_unauth() == "too many unauthenticated connections"
    s = admission(sup)
    for _ in range(sup.RATE_BURST):
        assert s.admit_unauth() is None
        s.release_unauth()
    assert s.admit_unauth() == "connection rate limit"
    s.token_t -= 1.0
    for _ in range(int(sup.RATE_PER_SEC)):
        assert s.admit_unauth() is None
        s.release_unauth()
    assert s.admit_unauth() == "connection rate limit"


@pytest.mark.parametrize("name, binds, want", [
    (UNIT, ["opencode-pty-supervisor.service"], True),
    (UNIT, ["opencode-pty-supervisor.service", "dbus.service"], False),
    (UNIT, ["dbus.service", "opencode-pty-supervisor.service"], False),
    (UNIT, [], False),
    (UNIT.replace("00112233", "0011223G"), ["opencode-pty-supervisor.service"], False),
    (UNIT.upper(), ["opencode-pty-supervisor.service"], False),
    ("opencode-pty-decoy.service", ["opencode-pty-supervisor.service"], False),
])
def test_orphan_matching(sup, name, binds, want):
    assert sup.is_orphan(name, binds) is want


def test_session_id(sup):
    assert sup.session_id(UNIT) == "00112233445566778899aabbccddeeff"


# -- forged signals (CONC-2)
def props_signal(sup, sender, iface, changed, unit=UNIT):
    m = new_signal(DBusAddress(sup.unit_path(unit), interface=sup.PROPS_IF), "PropertiesChanged", "sa{sv}as",
                   (iface, changed, []))
    if sender is not None:
        m.header.fields[HeaderFields.sender] = sender
    return m


def job_removed(sup, sender, result, unit=UNIT):
    m = new_signal(DBusAddress(sup.SD_PATH, interface=sup.MGR), "JobRemoved", "uoss",
                   (7, "/org/freedesktop/systemd1/job/7", unit, result))
    m.header.fields[HeaderFields.sender] = sender
    return m


def owner_changed(sup, sender, name, new):
    m = new_signal(DBusAddress("/org/freedesktop/DBus", interface=sup.BUS_NAME), "NameOwnerChanged", "sss",
                   (name, OWNER, new))
    m.header.fields[HeaderFields.sender] = sender
    return m


@pytest.fixture
def bus(sup, faults):
    faults()
    b = sup.Bus(connect=False)
    b.sd_owner = OWNER
    st = sup.UnitState(UNIT, -1)
    b.register(st)
    b.handle(props_signal(sup, OWNER, sup.UNIT_IF, {"ActiveState": ("s", "active")}))
    return b, st


@pytest.mark.parametrize("sender", [FORGER, None, "org.freedesktop.systemd1", "org.freedesktop.DBus"])
def test_signals_from_another_sender_are_dropped(sup, bus, sender):
    b, st = bus
    b.handle(props_signal(sup, sender, sup.UNIT_IF, {"ActiveState": ("s", "inactive"), "SubState": ("s", "dead")}))
    b.handle(props_signal(sup, sender, sup.SERVICE_IF, {"ExecMainCode": ("i", 1), "ExecMainStatus": ("i", 42)}))
    b.handle(job_removed(sup, sender or FORGER, "failed"))
    assert (st.signalled, st.ended, st.job_result, st.exec_status) == (False, False, None, 0)
    assert b.dropped >= 2
    b.handle(props_signal(sup, OWNER, sup.UNIT_IF, {"ActiveState": ("s", "inactive")}))
    assert (st.signalled, st.ended) == (True, False)  # systemd's own: a hint, not yet confirmed


def test_name_owner_changes_only_when_the_bus_says_so(sup, bus):
    b, st = bus
    b.handle(owner_changed(sup, FORGER, sup.SD, FORGER))
    b.handle(owner_changed(sup, sup.BUS_NAME, "org.example.Other", FORGER))
    assert b.sd_owner == OWNER
    b.handle(owner_changed(sup, sup.BUS_NAME, sup.SD, ":1.2"))
    assert b.sd_owner == ":1.2"
    b.handle(props_signal(sup, OWNER, sup.UNIT_IF, {"ActiveState": ("s", "inactive")}))
    assert not st.signalled


def test_no_signal_sender_check_fault(sup, bus, faults):
    b, st = bus
    faults("no-signal-sender-check")
    b.handle(props_signal(sup, FORGER, sup.UNIT_IF, {"ActiveState": ("s", "inactive")}))
    assert (st.signalled, st.ended) == (True, False)


class FakeSystemd:
    """Server.confirm_end's method calls: the unit's ActiveState ("" once unloaded)."""

    def __init__(self, sup, state):
        self.sup, self.state = sup, state

    def unit_gone(self, unit):
        return self.state == ""

    def active_state(self, path):
        return self.state


@pytest.mark.parametrize("state, ended", [("active", False), ("deactivating", False), ("inactive", True),
                                          ("failed", True), ("", True)])
def test_a_signalled_end_is_confirmed_by_a_method_call(sup, bus, state, ended):
    b, st = bus
    b.handle(props_signal(sup, OWNER, sup.UNIT_IF, {"ActiveState": ("s", "inactive")}))
    assert st.end_hinted()
    assert sup.Server.confirm_end(FakeSystemd(sup, state), st) is ended
    assert st.ended is ended
    if not ended:
        assert not st.end_hinted()


def test_no_end_confirmation_fault(sup, bus, faults):
    b, st = bus
    faults("no-end-confirmation")
    b.handle(props_signal(sup, OWNER, sup.UNIT_IF, {"ActiveState": ("s", "failed")}))
    assert st.ended


def test_malformed_signals_are_dropped(sup, bus):
    b, st = bus
    m = new_signal(DBusAddress(sup.unit_path(UNIT), interface=sup.PROPS_IF), "PropertiesChanged", "sa{ss}as",
                   (sup.UNIT_IF, {"ActiveState": "inactive"}, []))
    m.header.fields[HeaderFields.sender] = OWNER
    b.handle(m)
    b.handle(props_signal(sup, OWNER, sup.UNIT_IF, {"ActiveState": ("ay", b"inactive")}))
    assert not st.end_hinted()


def test_the_start_job_result_is_systemds(sup, bus):
    b, st = bus
    b.handle(job_removed(sup, FORGER, "failed"))
    assert st.job_result is None
    b.handle(job_removed(sup, OWNER, "done"))
    b.handle(job_removed(sup, OWNER, "failed"))  # a later one changes nothing
    assert st.job_result == "done"


def test_it_is_the_deployed_file(sup):
    assert os.path.samefile(sup.__file__, PATH)
