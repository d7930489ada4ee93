"""A process that exits between a /proc listing and its read is gone, never
another user's process and never an unreadable one (UNIT-5, and every /proc
walk of the library: proc.walk); a process that is there and cannot be read
still fails (EACCES, a read cut short, a malformed field).

The probe's own listing (session_inspect.PROC_LISTING, run inside sessions)
is run here as the probe runs it, against a process reaped after the
listing, against failures injected into its reads, and against a churn of
short-lived processes."""
import errno
import os
import subprocess
import sys
import time

import pytest

from pty_acceptance.host import proc
from pty_acceptance.supervisor import session_inspect as live

DEADLINE_S = 10.0


@pytest.fixture
def reaped():
    """The pid of a child that ran and was reaped: listed a moment ago, gone now."""
    p = subprocess.Popen(["/bin/true"])
    p.wait(DEADLINE_S)
    return p.pid


# ------------------------------------------------------------------ proc.walk
def test_gone_is_enoent_or_esrch_and_nothing_else():
    assert proc.gone(FileNotFoundError(errno.ENOENT, "x")) and proc.gone(ProcessLookupError(errno.ESRCH, "x"))
    assert not proc.gone(PermissionError(errno.EACCES, "x")) and not proc.gone(OSError(errno.EIO, "x"))


def test_a_walk_leaves_out_a_process_gone_after_the_listing(reaped):
    me = os.getpid()
    got = proc.walk(proc.cmdline, "the command line", among=[me, reaped])
    assert set(got) == {me}


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "Permission denied"),
                                   OSError(errno.EIO, "Input/output error"),
                                   ValueError("no field 22")])
def test_a_walk_fails_on_a_process_that_is_there_and_cannot_be_read(error):
    def read(pid):
        raise error

    with pytest.raises(proc.ProcUnreadable, match=f"/proc/{os.getpid()}: cannot read the start time"):
        proc.walk(read, "the start time", among=[os.getpid()])


def test_descriptors_closed_while_listed_are_left_out():
    r, w = os.pipe()
    links = proc.fds(os.getpid())
    assert links[r].startswith("pipe:[")
    os.close(r)
    os.close(w)
    assert r not in proc.fds(os.getpid())


# ------------------------------------------------------------------ the probe's listing
def listing(fake_os=None) -> dict:
    """session_inspect.PROC_LISTING's names, as the probe runs them (its `os`
    replaced by fake_os when given)."""
    names: dict = {}
    exec(live.PROC_LISTING, names)  # the probe's own text, run as python3 -c runs it
    if fake_os is not None:
        names["os"] = fake_os
    return names


class FakeOs:
    """os, but one call fails, or os.read returns given bytes."""

    def __init__(self, fail: dict | None = None, data: bytes | None = None):
        self.fail, self.data = fail or {}, data

    def __getattr__(self, name):
        real = getattr(os, name)
        if name in self.fail:
            def failing(*a, **k):
                raise self.fail[name]
            return failing
        if name == "read" and self.data is not None:
            data, self.data = self.data, b""
            return lambda fd, n: data[:n]
        return real


def test_the_probe_reads_a_live_process():
    got = listing()["read_pid"](str(os.getpid()))
    assert set(got) == {"cgroup", "uid"} and got["uid"] == os.geteuid()
    assert got["cgroup"] == open("/proc/self/cgroup").read().strip()


def test_the_probe_takes_a_reaped_process_for_gone(reaped):
    assert listing()["read_pid"](str(reaped)) is None


@pytest.mark.parametrize("call, error, shown", [
    ("open", PermissionError(errno.EACCES, "denied"), "EACCES"),
    ("fstat", OSError(errno.EIO, "io"), "EIO"),
    ("read", OSError(errno.EIO, "io"), "EIO"),
])
def test_the_probe_reports_a_process_it_cannot_read(call, error, shown):
    got = listing(FakeOs(fail={call: error}))["read_pid"](str(os.getpid()))
    assert got == {"error": shown}


@pytest.mark.parametrize("data, shown", [
    (b"0::/" + b"a" * 5000, "cgroup longer than 4096 bytes"),
    (b"", "cgroup malformed: ''"),
    (b"garbage\n", "cgroup malformed: 'garbage'"),
])
def test_the_probe_reports_a_cgroup_cut_short_or_malformed(data, shown):
    got = listing(FakeOs(data=data))["read_pid"](str(os.getpid()))
    assert got == {"error": shown}


CHURN = """
import os, time
end = time.monotonic() + 30
while time.monotonic() < end:
    for _ in range(8):
        if os.fork() == 0:
            time.sleep(0.001)
            os._exit(0)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
"""


def test_a_churn_of_short_lived_processes_is_never_read_as_anything_but_gone():
    """Processes that exit while the probe reads /proc (the user's loop of
    short-lived processes): until one was seen gone, every listing reads all
    the others whole."""
    names = listing()
    churn = subprocess.Popen([sys.executable, "-I", "-c", CHURN])
    try:
        end, rounds, gone = time.monotonic() + DEADLINE_S, 0, []
        while not gone and time.monotonic() < end:
            procs, gone = names["list_procs"]()
            rounds += 1
            bad = {pid: v for pid, v in procs.items() if set(v) != {"cgroup", "uid"}}
            assert not bad, f"round {rounds}: processes read as unreadable: {bad}"
        assert gone, f"no process exited between the listing and its read in {rounds} rounds"
        assert not set(gone) & set(procs)
    finally:
        churn.kill()
        churn.wait(DEADLINE_S)
