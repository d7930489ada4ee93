"""SUITE-4, issue 11 item 3: a unit name from a reply (STARTED) is acted on
only when it is a strict session name bound to the supervisor in its slice.
A lying supervisor naming sshd.service, a strict name bound elsewhere or a
unit outside the slice is refused: the test fails naming SUITE-4 and nothing
is stopped or killed."""

from __future__ import annotations

import pytest

from pty_acceptance.host import cgroups, processes
from pty_acceptance.supervisor import tracked_sessions, unit_vouch
from pty_acceptance.supervisor.session_footprint import Footprint
from pty_acceptance.host.bus import UNIT_IFACE
from pty_acceptance.supervisor.session_clients import Outcome

OWNER = unit_vouch.Owner("opencode-pty-supervisor.service", "opencode-pty.slice")
STRICT = "opencode-pty-0123456789abcdef0123456789abcdef.service"


class FakeBus:
    """systemd as far as the suite asks it; records every act."""

    def __init__(self, units: dict[str, tuple[dict, dict]]):
        self.units = units
        self.acts: list[tuple] = []

    def properties(self, name, iface=UNIT_IFACE):
        if name not in self.units:
            return None
        unit, svc = self.units[name]
        return dict(unit if iface == UNIT_IFACE else svc)

    def unit_path(self, name):
        return f"/unit/{name}" if name in self.units else None

    def stop(self, name):
        self.acts.append(("stop", name))

    def kill(self, name, signal, who="all"):
        self.acts.append(("kill", name, signal))

    def wait_for(self, *a, **kw):
        return None

    def reset_failed(self, name):
        pass


def _unit(binds=("opencode-pty-supervisor.service",), slice_="opencode-pty.slice",
          cgroup="/system.slice/sshd.service"):
    return ({"BindsTo": list(binds), "ActiveState": "active"},
            {"Slice": slice_, "ControlGroup": cgroup, "MainPID": 1, "TimeoutStopUSec": 5_000_000})


HOSTILE = {
    "a non-strict name (sshd.service)": ("sshd.service", _unit(slice_="system.slice")),
    "a strict name bound elsewhere": (STRICT, _unit(binds=("dbus.service",))),
    "a strict name not bound at all": (STRICT, _unit(binds=())),
    "a strict name outside the slice": (STRICT, _unit(slice_="system.slice")),
    "upper-case hex": (STRICT.upper().replace(".SERVICE", ".service"), _unit()),
    "a control character": ("sshd.service\x1b[2J", _unit()),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_vouch_refuses_a_unit_not_ours(case):
    name, props = HOSTILE[case]
    bus = FakeBus({name: props})
    with pytest.raises(unit_vouch.NotOurs) as e:
        unit_vouch.vouch(bus, name, OWNER)
    assert str(e.value).startswith("SUITE-4: ") and "\x1b" not in str(e.value)
    assert e.value.requirements == ("SUITE-4",)
    assert not unit_vouch.may_act(bus, name, OWNER)


def test_vouch_accepts_a_bound_session_unit_in_the_slice():
    bus = FakeBus({STRICT: _unit(cgroup=f"/opencode.slice/opencode-pty.slice/{STRICT}")})
    assert unit_vouch.vouch(bus, STRICT, OWNER)["Slice"] == "opencode-pty.slice"
    with pytest.raises(unit_vouch.NotLoaded):
        unit_vouch.vouch(FakeBus({}), STRICT, OWNER)


class FakeRaw:
    def __init__(self, unit):
        self.unit, self.closed = unit, False

    def wait_started(self, deadline_s=10):
        return Outcome(unit=self.unit)

    def close(self):
        self.closed = True


@pytest.mark.parametrize("case", HOSTILE)
def test_sessions_refuse_what_started_named_and_never_stop_or_kill_it(case, monkeypatch):
    """Before: Footprint.capture took STARTED's name as it came, Sessions.close
    then stopped it and SIGKILLed its cgroup."""
    name, props = HOSTILE[case]
    bus = FakeBus({name: props})
    killed = []
    monkeypatch.setattr(cgroups, "cgroup_dir", lambda cg: "/sys/fs/cgroup" + cg)
    monkeypatch.setattr(processes, "processes_in", lambda path: {4242: (1.0, "sshd")})
    monkeypatch.setattr(processes, "token_processes", lambda token: {})
    monkeypatch.setattr(Footprint, "kill_survivors", lambda fp: killed.append(fp.unit))
    ss = tracked_sessions.Sessions(bus, peer=None, socket_path="/run/x.sock", owner=OWNER)
    s = FakeRaw(name)
    with pytest.raises(unit_vouch.NotOurs):
        ss.started(s, "123456789012")
    assert s.closed, "the refused session's connection is closed (the supervisor ends it)"
    ss.close()
    assert bus.acts == [] and killed == [] and ss.footprints == []


def test_a_vouched_session_is_still_cleaned_up(monkeypatch):
    bus = FakeBus({STRICT: _unit(cgroup=f"/opencode.slice/opencode-pty.slice/{STRICT}")})
    monkeypatch.setattr(cgroups, "cgroup_dir", lambda cg: "/sys/fs/cgroup" + cg)
    monkeypatch.setattr(processes, "processes_in", lambda path: {})
    monkeypatch.setattr(processes, "token_processes", lambda token: {})
    ss = tracked_sessions.Sessions(bus, peer=None, socket_path="/run/x.sock", owner=OWNER)
    fp = ss.started(FakeRaw(STRICT), "123456789012")
    assert fp.unit == STRICT and ss.footprints == [fp]
    monkeypatch.setattr(tracked_sessions, "wait_gone", lambda bus, fps, d: ({}, {STRICT: ["still loaded"]}))
    monkeypatch.setattr(Footprint, "kill_survivors", lambda fp: None)
    ss.close()
    assert bus.acts == [("stop", STRICT)]


def test_a_failure_naming_suite_4_is_reported_under_it(pytester):
    """The plugin adds a failure's `requirements` to its JUnit case."""
    pytester.makeconftest("from pty_acceptance.gate.plugin import pytest_runtest_makereport  # noqa: F401\n")
    pytester.makepyfile(test_x="""
        from pty_acceptance.supervisor import unit_vouch

        def test_refused():
            raise unit_vouch.NotOurs("sshd.service", "is not a strict session name")
    """)
    r = pytester.runpytest("--junitxml=out.xml", "-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    xml = (pytester.path / "out.xml").read_text()
    assert 'name="requirement" value="SUITE-4"' in xml
