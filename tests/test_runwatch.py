"""SUITE-5: the whole run bounded, and a process of the suite's own stopped
from outside named, never waited for (gate/runwatch.py, host/stopguard.py)."""

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest
import yaml

from gateproject import add_tests, assert_refused, last_line, run
from pty_acceptance.host import proc, stopguard

SLOW = """
import time

@pytest.mark.requirement("OWN-1")
def test_slow():
    time.sleep(30)
"""


def _bound(target, seconds: int) -> None:
    doc = yaml.safe_load(target.inventory.read_text())
    doc["all"]["hosts"]["fake"]["run_bound_s"] = seconds
    target.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_a_run_past_its_bound_ends_there_not_ready_naming_the_test(project, target):
    _bound(target, 3)
    add_tests(project, SLOW)
    t0 = time.monotonic()
    res = run(project, target, subprocess=True)  # in process, pytester re-raises the interrupt
    took = time.monotonic() - t0
    assert took < 25, f"the run went on past its bound: {took:.1f} s"
    assert_refused(res, target, "SUITE-5")
    text = "\n".join(res.outlines)
    assert "did not end within its bound of 3 s (run_bound_s): it was in acceptance/test_all.py::test_slow" \
        in text, text[-3000:]
    assert res.ret == 2  # interrupted, as SIGINT ends a run


def test_a_run_within_its_bound_is_not_touched(project, target):
    _bound(target, 600)
    res = run(project, target)
    assert last_line(res).startswith("READY: marker written"), "\n".join(res.outlines[-20:])


STOPPED_CONFTEST = """
from pty_acceptance.host import stopguard

def _look(self, bus):  # a process of the suite's own found stopped from outside, once
    if not self.stops:
        self.stops.append(stopguard.Stop("pty-acceptance-probe-0123456789abcdef.service", 4242, "python3",
                                         "stopped (state T)", 0.5, self.during, "continued (SIGCONT)"))

stopguard.Guard.look = _look
stopguard.Guard.__init__.__defaults__ = (stopguard.connect, 0.01)
"""

TWO_MORE = """
import time

@pytest.mark.requirement("OWN-1")
def test_waits_for_the_guard():
    time.sleep(1)

@pytest.mark.requirement("OWN-1")
def test_never_runs():
    raise RuntimeError("ran after the stop")
"""


def test_after_a_stop_from_outside_no_test_runs_and_the_stop_is_a_blocker(project, target):
    conftest = project.path / "acceptance/conftest.py"
    conftest.write_text(conftest.read_text() + STOPPED_CONFTEST)
    add_tests(project, TWO_MORE)
    res = run(project, target, subprocess=True)
    assert_refused(res, target, "SUITE-5")
    text = "\n".join(res.outlines)
    assert "a process of the suite's own was stopped from outside: pid 4242 (python3) of the suite's own " \
           "unit pty-acceptance-probe-0123456789abcdef.service" in text, text[-3000:]
    assert "ran after the stop" not in text
    assert "NOT READY: SUITE-5: the run was ended at the first stop from outside (above)" in text


# -- the guard itself, on real processes of this machine
def _child_stopped():
    child = subprocess.Popen(["/bin/sleep", "60"])
    os.kill(child.pid, signal.SIGSTOP)
    for _ in range(500):
        if proc.stat_field(proc.stat_line(child.pid), 3) == b"T":
            return child
        time.sleep(0.01)
    raise AssertionError("the child did not stop")


@pytest.fixture
def own_group():
    """own_group(pid): `pid` moved into a fresh cgroup of the unified hierarchy (the
    lab's processes all sit in its root, which no unit's cgroup is); its name."""
    made = []

    def move(pid: int) -> str:
        name = f"/pty-acc-guard-{secrets.token_hex(4)}"
        path = f"/sys/fs/cgroup/unified{name}"
        os.mkdir(path)
        made.append(path)
        with open(f"{path}/cgroup.procs", "w") as f:
            f.write(str(pid))
        return name

    yield move
    for path in made:
        for _ in range(500):  # the child is killed by its test first: its cgroup empties
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.01)


def test_the_guard_names_a_stopped_process_and_continues_it(own_group):
    child = _child_stopped()
    try:
        group = own_group(child.pid)
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        guard.during = "acceptance/test_x.py::test_y"
        guard._judge("pty-acceptance-probe-00.service", group, child.pid)
        assert guard.tripped is not None
        said = guard.said()[0]
        assert f"pid {child.pid} (sleep)" in said and "during acceptance/test_x.py::test_y" in said, said
        assert "continued (SIGCONT)" in said, said
        assert proc.stat_field(proc.stat_line(child.pid), 3) != b"T"
        guard._judge("pty-acceptance-probe-00.service", group, child.pid)
        assert len(guard.stops) == 1  # once per process
    finally:
        child.kill()
        child.wait()


def test_a_stop_the_suite_makes_itself_is_not_counted(own_group):
    child = _child_stopped()
    try:
        group = own_group(child.pid)
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        with guard.deliberate(child.pid):
            guard._judge("pty-acceptance-probe-00.service", group, child.pid)
        assert guard.tripped is None
        assert proc.stat_field(proc.stat_line(child.pid), 3) == b"T"  # left as the test made it
    finally:
        child.kill()
        child.wait()


def test_a_process_outside_the_units_cgroup_is_named_but_never_signalled():
    child = _child_stopped()
    try:
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        guard._judge("pty-acceptance-probe-00.service", "/not/its/cgroup", child.pid)
        assert "not continued: outside /not/its/cgroup" in guard.said()[0]
        assert proc.stat_field(proc.stat_line(child.pid), 3) == b"T"
    finally:
        child.kill()
        child.wait()


def test_a_process_gone_is_not_a_stop():
    child = subprocess.Popen(["/bin/true"])
    child.wait()
    guard = stopguard.Guard("opencode-pty-supervisor.service")
    guard._judge("pty-acceptance-probe-00.service", "/", child.pid)
    assert guard.tripped is None


def test_a_guard_without_a_bus_says_it_did_not_watch():
    def no_bus():
        raise OSError("no system bus here")

    guard = stopguard.Guard("opencode-pty-supervisor.service", connect=no_bus)
    guard.start()
    guard.halt()
    assert guard.broken is not None and "no system bus here" in guard.broken


def test_a_stop_under_the_suites_own_tracer_is_the_tracers(own_group, tmp_path):
    """strace run by the suite stops its tracee on purpose (helpertrace.py's
    inject=...:signal=SIGSTOP): a stop of the suite's, never counted."""
    out = tmp_path / "trace"
    tracer = subprocess.Popen(["/usr/bin/strace", "-qq", "-o", str(out), "-e", "trace=none",
                               "/bin/sh", "-c", "kill -STOP $$; sleep 60"])
    try:
        deadline = time.monotonic() + 10
        child = None
        while time.monotonic() < deadline and child is None:
            for p in proc.descendants(tracer.pid):
                if proc.stat_field(proc.stat_line(p.pid), 3) in (b"T", b"t"):
                    child = p.pid
            time.sleep(0.01)
        assert child is not None, "the tracee did not stop"
        group = own_group(child)
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        guard._judge("pty-acceptance-scope-00.scope", group, child)
        assert guard.tripped is None, guard.said()
    finally:
        tracer.kill()
        tracer.wait()


def test_a_reading_made_while_declared_is_not_counted_when_judged_after(own_group, monkeypatch):
    """The guard's thread read state T inside the declared window, and (a loaded
    host) judged it only after the test had taken the stop back: not a stop."""
    child = _child_stopped()
    try:
        group = own_group(child.pid)
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        clock = iter([100.0, 101.0, 102.0])  # declared, read, taken back
        monkeypatch.setattr(stopguard.time, "monotonic", lambda: next(clock))
        with guard.deliberate(child.pid):
            read_at = stopguard.time.monotonic()
        monkeypatch.undo()
        with guard._lock:
            assert guard._declared(child.pid, read_at)
            assert not guard._declared(child.pid, 103.0)  # read after it was taken back: counted
            assert not guard._declared(child.pid, 99.0)   # read before it was declared: counted
        guard._judge("pty-acceptance-probe-00.service", group, child.pid)
        assert guard.tripped is not None  # now, long after the window: a stop from outside
    finally:
        child.kill()
        child.wait()


def test_a_stop_read_inside_the_window_and_taken_back_before_the_clock_is_not_counted(own_group, monkeypatch):
    """CI's false SUITE-5 (ISO-3's own stop): the guard's thread read state T
    inside the declared window, then the test continued the process and closed
    the window before the guard's thread looked at the clock (the GIL passed
    between the two). The reading is timed from before the read, and the state
    is read again with the tracer: not a stop."""
    child = _child_stopped()
    try:
        group = own_group(child.pid)
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        window = contextlib.ExitStack()
        window.enter_context(guard.deliberate(child.pid))
        real = stopguard.proc.stat_line

        def read_then_the_test_takes_it_back(pid, tid=None):
            data = real(pid, tid)
            os.kill(child.pid, signal.SIGCONT)
            deadline = time.monotonic() + 5
            while proc.stat_field(real(child.pid), 3) == b"T" and time.monotonic() < deadline:
                time.sleep(0.005)  # poll interval
            window.close()
            return data

        monkeypatch.setattr(stopguard.proc, "stat_line", read_then_the_test_takes_it_back)
        guard._judge("pty-acceptance-probe-00.service", group, child.pid)
        monkeypatch.undo()
        assert guard.tripped is None, guard.said()
    finally:
        child.kill()
        child.wait()


def test_a_stop_by_a_tracer_gone_and_its_tracee_released_is_not_counted(own_group, monkeypatch):
    """The reference host's false SUITE-5 (session 35): RUNTIME-2's strace,
    detaching at its end, stopped the runtime to let go of it and was reaped
    before the guard could read its parent. A tracer that is gone and a tracee
    released is not a stop from outside; a tracee still held by a pid that is
    gone past RELEASE_S is."""
    child = _child_stopped()
    try:
        group = own_group(child.pid)
        gone = subprocess.Popen(["/bin/true"])
        gone.wait()  # a pid that no longer exists
        reads = iter([gone.pid, 0])
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        monkeypatch.setattr(guard, "_tracer", lambda pid, tid: next(reads, 0))
        guard._judge("pty-acceptance-probe-00.service", group, child.pid)
        assert guard.tripped is None, guard.said()
        held = stopguard.Guard("opencode-pty-supervisor.service")
        monkeypatch.setattr(held, "_tracer", lambda pid, tid: gone.pid)
        monkeypatch.setattr(stopguard, "RELEASE_S", 0.05)
        held._judge("pty-acceptance-probe-00.service", group, child.pid)
        assert held.tripped is not None and f"traced by pid {gone.pid}" in held.said()[0]
    finally:
        child.kill()
        child.wait()


ZOMBIE_LEADER = """import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None)
def lives():
    while True:
        time.sleep(60)
t = threading.Thread(target=lives, daemon=False)
t.start()
print(t.native_id, flush=True)
sys.stdin.readline()  # go: once the test has moved it into its cgroup (a zombie leader moves no more)
libc.syscall(60, 0)  # SYS_exit: the leader thread alone ends, a zombie while its thread lives
"""


def test_a_stopped_thread_behind_a_zombie_leader_is_a_stop(own_group, monkeypatch):
    """A blind red team's ninth pass: a thread of the suite's process kept in a
    stop after its leader exited (the leader a zombie, never in state T); the
    process, and a session unit with it, outlives every bound. Each thread is read."""
    child = subprocess.Popen([sys.executable, "-c", ZOMBIE_LEADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        tid = int(child.stdout.readline())
        group = own_group(child.pid)
        child.stdin.write(b"go\n")
        child.stdin.flush()
        for _ in range(500):
            if proc.stat_field(proc.stat_line(child.pid), 3) == b"Z":
                break
            time.sleep(0.01)  # poll interval while the leader ends
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(500):
            if proc.stat_field(proc.stat_line(child.pid, tid), 3) == b"T":
                break
            time.sleep(0.01)  # poll interval while the thread stops
        assert proc.stat_field(proc.stat_line(child.pid), 3) == b"Z"
        guard = stopguard.Guard("opencode-pty-supervisor.service")
        guard._judge("pty-acceptance-probe-00.service", group, child.pid)
        assert guard.tripped is None  # the leader alone: a zombie, no stop
        monkeypatch.setattr(guard, "own_units", lambda bus: {"pty-acceptance-probe-00.service": group})
        monkeypatch.setattr(stopguard.cgroups, "cgroup_dir", lambda g: f"/sys/fs/cgroup/unified{g}")
        guard.look(None)
        said = guard.said()
        assert len(said) == 1 and f"its thread {tid}; the process's own state Z" in said[0], said
    finally:
        child.kill()
        child.wait()
