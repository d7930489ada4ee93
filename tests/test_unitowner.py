"""host/unitowner.py: a process is a unit's own only when the unit is active, the
process is its MainPID or in its cgroup, and the unit's InvocationID is the one
read before and after, and the one the module's checks first read (issue 37
item 3: CUT-1, CUT-2, RUNTIME-1, ISO-1)."""

import os

import pytest

from pty_acceptance.host import proc, unitowner
from pty_acceptance.host.bus import SERVICE_IFACE

ME = os.getpid()
MY_GROUP = "/system.slice/x.service/sub"


@pytest.fixture(autouse=True)
def _my_cgroup(monkeypatch):
    """This machine is no systemd host: this process's cgroup, as the kernel would say it."""
    real = proc.cgroups
    monkeypatch.setattr(proc, "cgroups", lambda pid: [MY_GROUP, MY_GROUP] if pid == ME else real(pid))


class Bus:
    """systemd as a list of answers: each properties() pair (Unit, then Service) takes the next."""

    def __init__(self, *states):
        self.states, self.reads = list(states), 0

    def properties(self, name, iface=None, load=False):
        state = self.states[min(self.reads // 2, len(self.states) - 1)]
        self.reads += 1
        if state is None:
            return None
        if iface == SERVICE_IFACE:
            return {"MainPID": state.get("pid", 0), "ControlGroup": state.get("cg", ""),
                    "Result": state.get("result", "success")}
        return {"ActiveState": state.get("active", "active"), "SubState": "running",
                "InvocationID": bytes.fromhex(state.get("inv", "ab" * 16))}


def _judge(*states, seen=None, pid=ME):
    return unitowner.judge(Bus(*states), "x.service", pid, None, seen)


def test_the_main_pid_of_an_active_unit_is_its_own():
    got = _judge({"pid": ME})
    assert got.problem is None and got.cgroups == (MY_GROUP,)


def test_a_process_in_the_unit_s_cgroup_is_its_own():
    assert _judge({"pid": 1, "cg": MY_GROUP}).problem is None
    assert _judge({"pid": 1, "cg": "/system.slice/x.service"}).problem is None  # a sub-cgroup of the unit's
    assert _judge({"pid": 1, "cg": "/system.slice/x.serv"}).problem is not None  # a prefix is not a parent


def test_neither_main_pid_nor_in_the_cgroup_names_pid_cgroup_and_unit():
    got = _judge({"pid": 1, "cg": "/system.slice/y.service"})
    assert got.problem == (f"pid {ME} (cgroup {MY_GROUP}) is not x.service's own: neither its MainPID nor in "
                           f"its cgroup (x.service: active/running, MainPID 1, ControlGroup "
                           f"/system.slice/y.service, InvocationID {'ab' * 16})")


def test_a_failed_or_unloaded_unit_owns_nothing():
    got = _judge({"active": "failed", "pid": 0, "result": "start-limit-hit", "inv": ""})
    assert "the unit is not active (x.service: failed/running (Result start-limit-hit), MainPID none" in got.problem
    assert "x.service: not loaded" in _judge(None).problem


def test_an_invocation_that_changes_while_read_or_since_first_read_is_refused():
    changed = _judge({"pid": ME}, {"pid": ME, "inv": "cd" * 16})
    assert "x.service changed while it was read" in changed.problem
    seen = {}
    assert _judge({"pid": ME}, seen=seen).problem is None and seen["x.service"].invocation == "ab" * 16
    later = _judge({"pid": ME, "inv": "cd" * 16}, seen=seen)
    assert "is not the run the checks first read" in later.problem and later.first is not None


def test_a_process_gone_is_not_judged():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert "cannot read /proc/" in _judge({"pid": pid}, pid=pid).problem
