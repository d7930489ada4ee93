"""host/proc.py read on this machine (as root): this process, a child of
this test, and a child that is gone (SUITE-4: a pid is judged by its start
time or a pidfd, what it runs by the inode the kernel resolves)."""
import os
import secrets
import subprocess
import sys
import tempfile

import psutil
import pytest

from pty_acceptance.host import proc
from pty_acceptance.host.polling import poll

DEADLINE_S = 10


@pytest.fixture
def child():
    """A live `/bin/sleep 300.<token>` of this test."""
    p = subprocess.Popen(["/bin/sleep", f"300.{secrets.randbelow(10 ** 12):012d}"])
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(DEADLINE_S)


@pytest.fixture
def dead():
    """The pid of a child that ran and was reaped: no process has it now (the
    kernel hands pids out in order, so it is not reused within the test)."""
    p = subprocess.Popen(["/bin/true"])
    p.wait(DEADLINE_S)
    return p.pid


def exec_done(p: subprocess.Popen) -> None:
    """Until the child runs /bin/sleep (not the interpreter's fork any more)."""
    poll(lambda: proc.comm(p.pid) == "sleep", DEADLINE_S, f"pid {p.pid} running /bin/sleep")


def test_this_process_is_read():
    me = os.getpid()
    assert me in proc.pids()
    assert me in proc.threads(me)
    st = proc.status(me)
    assert st["Pid"] == str(me) and proc.ppid(me) == os.getppid()
    assert proc.uid(me) == os.geteuid() == 0
    assert proc.cmdline(me) == [os.fsencode(a) for a in psutil.Process(me).cmdline()]
    assert proc.exe(me) == os.path.realpath(sys.executable)


def test_this_processes_start_time():
    me = os.getpid()
    ticks = proc.start_ticks(me)
    assert ticks == int(proc.stat_field(proc.stat_line(me), 22)) > 0
    assert abs(proc.start_time(me) - psutil.Process(me).create_time()) < 2
    assert proc.create_time(me) == psutil.Process(me).create_time() == proc.create_time(me)
    assert proc.alive(me, proc.create_time(me))
    assert not proc.alive(me, proc.create_time(me) - 5), "another start time is another process"


def test_a_stat_line_is_counted_after_comms_last_parenthesis():
    line = b"42 (a) b) (c )) S 1 " + b" ".join(str(n).encode() for n in range(5, 23)) + b"\n"
    assert proc.stat_field(line, 3) == b"S"
    assert proc.stat_field(line, 22) == b"22"
    with pytest.raises(ValueError):
        proc.stat_field(b"42 (no close paren", 3)
    with pytest.raises(ValueError):
        proc.stat_field(b"42 (short) S 1", 22)


def test_a_childs_identity(child):
    exec_done(child)
    assert proc.cmdline(child.pid)[0] == b"/bin/sleep" and proc.cmdline(child.pid)[1].startswith(b"300.")
    assert proc.comm(child.pid) == "sleep"
    st = os.stat("/bin/sleep")
    link, ident = proc.exe_identity(child.pid)
    assert link == os.path.realpath("/bin/sleep")
    assert ident == proc.exe_file(child.pid) == (st.st_dev, st.st_ino)
    assert child.pid in [c.pid for c in proc.descendants(os.getpid())]
    assert proc.stat_field(proc.stat_line(child.pid), 3) in (b"S", b"R")
    assert proc.stat_field(proc.stat_line(child.pid, child.pid), 3) in (b"S", b"R")
    assert proc.status(child.pid, child.pid)["TracerPid"] == "0"


def test_a_pidfd_holds_the_process_not_the_number(child):
    fd = proc.pidfd_open(child.pid)
    try:
        created = proc.create_time(child.pid)
        assert proc.pidfd_alive(fd) and proc.alive(child.pid, created)
        child.kill()
        child.wait(DEADLINE_S)
        assert not proc.pidfd_alive(fd)
        assert not proc.alive(child.pid, created)
    finally:
        os.close(fd)


def test_the_cgroups_of_this_process_are_systemds_lines():
    groups = proc.cgroups(os.getpid())
    assert groups and all(g.startswith("/") for g in groups)
    with open("/proc/self/cgroup") as f:
        unified = [line.split(":", 2)[2].strip() for line in f if line.startswith("0::")]
    assert set(unified) <= set(groups)


def test_descriptors_are_read_by_number_and_identity():
    with tempfile.TemporaryFile() as f:
        fd, me = f.fileno(), os.getpid()
        assert fd in proc.fd_numbers(me) and proc.fd_numbers(me) == sorted(proc.fd_numbers(me))
        assert proc.fds(me)[fd].endswith("(deleted)") or proc.fds(me)[fd].startswith("/")
        st, mine = proc.fd_stat(me, fd), os.fstat(fd)
        assert (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def test_a_dead_pid_is_an_error_or_a_plain_answer(dead):
    assert dead not in proc.pids()
    for reader in (proc.status, proc.cmdline, proc.comm, proc.exe, proc.exe_file, proc.threads,
                   proc.fds, proc.fd_numbers, proc.start_ticks, proc.cgroups, proc.uid):
        with pytest.raises(OSError):
            reader(dead)
    with pytest.raises(ProcessLookupError):
        proc.pidfd_open(dead)
    with pytest.raises(psutil.NoSuchProcess):
        proc.create_time(dead)
    link, ident = proc.exe_identity(dead)
    assert ident is None and link.startswith("? (")
    assert proc.start_time(dead) is None
    assert not proc.alive(dead, 0.0)
    assert proc.descendants(dead) == []
