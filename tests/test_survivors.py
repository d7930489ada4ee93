"""SUITE-4: the suite signals only processes inside its own units (issue 21
item 13). kill_survivors used to SIGKILL every process whose argv carried the
session's token, and any process of the service user can carry it. Now the
token only finds and reports; a process is signalled only while it is inside
the unit's cgroup (pidfd, then cgroup and start time, then the signal).

Real processes of this test stand in for the session's: one carries the
token outside any cgroup of the suite's, one is moved into a cgroup made for
the test (a unit's ControlGroup stand-in)."""

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from pty_acceptance.host import cgroups, proc
from pty_acceptance.host.cgroupkill import kill_inside
from pty_acceptance.host.polling import poll
from pty_acceptance.host.processes import token_processes
from pty_acceptance.supervisor.session_footprint import Footprint
from pty_acceptance.supervisor.tracked_sessions import end_refused
from pty_acceptance.supervisor.tokens import new_token

DEADLINE_S = 10


def tagged_sleep(token: str) -> subprocess.Popen:
    return subprocess.Popen(["/bin/sleep", f"300.{token}"])


def dead_within(p: subprocess.Popen, deadline_s: float = DEADLINE_S) -> bool:
    try:
        p.wait(deadline_s)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture
def procs():
    made = []
    yield made
    for p in made:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.fixture
def unit_cgroup():
    """A fresh cgroup of systemd's unified tree, as (ControlGroup, directory)."""
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if os.path.isfile(f"{root}/cgroup.controllers"):  # cgroup2
            break
    else:
        pytest.fail("no cgroup2 hierarchy is mounted here: the test cannot place a process in a unit's cgroup")
    name = f"/pty-acc-test-{secrets.token_hex(4)}"
    path = Path(root + name)
    path.mkdir()
    try:
        yield name, path
    finally:
        poll(lambda: not cgroups.cgroup_pids(str(path)), DEADLINE_S, f"{path} empty",
             lambda: f"pids {cgroups.cgroup_pids(str(path))}")
        path.rmdir()


def test_a_process_outside_the_unit_carrying_the_token_is_reported_never_signalled(procs):
    token = new_token()
    outsider = tagged_sleep(token)
    procs.append(outsider)
    poll(lambda: outsider.pid in token_processes(token), DEADLINE_S, "the outsider seen")
    fp = Footprint(unit="opencode-pty-0123.service", token=token,
                   control_group="/opencode.slice/opencode-pty-0123.service")
    spared = fp.kill_survivors()
    assert not dead_within(outsider, 1), "SIGKILLed a process that merely carried the token"
    assert [s for s in spared if f"pid {outsider.pid} " in s and "not signalled" in s], spared
    assert "outside /opencode.slice/opencode-pty-0123.service" in " ".join(spared)


def test_a_refused_sessions_leftovers_are_waited_for_and_reported_never_signalled(procs):
    token = new_token()
    outsider = tagged_sleep(token)
    procs.append(outsider)
    poll(lambda: outsider.pid in token_processes(token), DEADLINE_S, "the outsider seen")
    said = end_refused(token, deadline_s=0.3)
    assert outsider.poll() is None and not dead_within(outsider, 1)
    assert len(said) == 1 and f"pid {outsider.pid} " in said[0] and "not signalled" in said[0], said


def test_a_process_inside_the_units_cgroup_is_killed_and_one_outside_is_not(procs, unit_cgroup):
    control_group, path = unit_cgroup
    token = new_token()
    inside, outsider = tagged_sleep(token), tagged_sleep(token)
    procs += [inside, outsider]
    (path / "cgroup.procs").write_text(f"{inside.pid}\n")
    assert cgroups.inside(proc.cgroups(inside.pid), control_group)
    fp = Footprint(unit="x.service", token=token, control_group=control_group, path=str(path))
    fp.remember()
    spared = fp.kill_survivors()
    assert dead_within(inside), "the process inside the unit's cgroup was not killed"
    assert outsider.poll() is None and not dead_within(outsider, 0.5)
    assert [s for s in spared if f"pid {outsider.pid} " in s], spared


def test_a_reused_pid_is_not_signalled(procs, unit_cgroup):
    control_group, path = unit_cgroup
    p = tagged_sleep(new_token())
    procs.append(p)
    (path / "cgroup.procs").write_text(f"{p.pid}\n")
    created = proc.create_time(p.pid)
    assert kill_inside(p.pid, created - 5, control_group) is None  # "that one is gone"
    assert not dead_within(p, 0.5)
    assert kill_inside(p.pid, created, control_group) is None
    assert dead_within(p)


def test_the_cgroup_lines_of_systemds_tree_are_read(monkeypatch):
    text = b"12:pids:/user.slice\n1:name=systemd:/system.slice/x.service\n0::/system.slice/x.service/sub\n"
    monkeypatch.setattr(proc, "read_file", lambda path, limit: text)
    groups = proc.cgroups(1)
    assert groups == ["/system.slice/x.service", "/system.slice/x.service/sub"]
    assert cgroups.inside(groups, "/system.slice/x.service")
    assert not cgroups.inside(groups, "/system.slice/x.serv")
    assert not cgroups.inside(["/user.slice"], "/system.slice/x.service") and not cgroups.inside(groups, "")
