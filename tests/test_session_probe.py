"""A session probe's answer is believed only from the process root judged (session_probe.py).

Here the probe runs as `nobody` beside the channel's stage, the way a session
runs it (`../<stage>/python3` from its working directory): its own cgroup
stands for the session's. The terminal is no longer the way an answer comes
(a blind red team's round eight made the probe's connect() return 0 by ptrace;
round seven wrote a report of its own into the terminal)."""
import os
import shutil
import subprocess

import pytest

from pty_acceptance.host import proc, scratch
from pty_acceptance.supervisor import session_probe

DEADLINE_S = 20
CODE = 'import os, ctypes\nanswer({"uid": os.getuid(), "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)})\n'


@pytest.fixture
def channel():
    cwd = scratch.make("pty-acceptance-cwd-", mode=0o755)
    ch = session_probe.Channel(cwd)
    yield ch, cwd
    ch.close()
    scratch.remove(cwd)


def start(argv, cwd, env=None, prefix=()):
    return subprocess.Popen([*prefix, *argv], cwd=cwd, user="nobody" if not prefix else None,
                            env=env if env is not None else {"PATH": "/usr/bin:/bin"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def group_of(pid):
    return proc.cgroups(pid)[0]


def test_the_probe_the_suite_started_is_admitted_and_answers(channel):
    ch, cwd = channel
    argv = ch.argv(CODE)
    assert argv[0].startswith("../pty-acceptance-probe-") and argv[0].endswith("/python3")
    p = start(argv, cwd)
    try:
        ch.listener.settimeout(DEADLINE_S)
        pid = ch.admit(lambda: [group_of(p.pid)], argv, DEADLINE_S)
        assert pid == p.pid
        ch.go()
        assert ch.answer(DEADLINE_S) == {"uid": 65534, "dumpable": 0}  # not dumpable from its exec
    finally:
        p.kill()
        p.wait()


def _refused(ch, p, group, argv, deadline_s=DEADLINE_S) -> str:
    try:
        with pytest.raises(session_probe.ProbeError) as e:
            ch.admit(lambda: [group], argv, deadline_s)
        return str(e.value)
    finally:
        p.kill()
        p.wait()


def test_an_ordinary_python_of_the_user_is_not_the_probe(channel):
    """Dumpable, so another process of the user's could attach to it: refused."""
    ch, cwd = channel
    argv = ch.argv(CODE)
    p = start([os.path.realpath("/usr/bin/python3"), *argv[1:]], cwd)
    why = _refused(ch, p, group_of(p.pid), argv)
    assert "not the suite's execute-only interpreter" in why and "it is dumpable" in why, why


def test_a_traced_probe_is_refused(channel):
    """A tracer that attached before the exec keeps its hold across it (here root's strace)."""
    strace = shutil.which("strace", path="/usr/bin:/bin")
    if strace is None:
        pytest.fail("strace is needed for this test (tools/setup.sh installs it)")
    ch, cwd = channel
    argv = ch.argv(CODE)
    p = start(argv, cwd, prefix=(strace, "-f", "-qq", "-o", "/dev/null", "-u", "nobody"))
    why = _refused(ch, p, group_of(p.pid), argv)
    assert "it is traced by pid" in why, why


def test_another_command_line_another_cgroup_or_a_loader_variable_is_refused(channel):
    ch, cwd = channel
    argv = ch.argv(CODE)
    p = start(argv, cwd, env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": "/nonexistent.so"})
    why = _refused(ch, p, "/system.slice/not-the-session.service", ch.argv(CODE + "#\n"), 1.0)
    assert "in none of the sessions started for the probe" in why, why
    assert "its command line is not the probe's" in why, why
    assert "names what the loader loads: ['LD_PRELOAD']" in why, why


def test_no_probe_within_the_deadline_is_no_answer(channel):
    ch, _ = channel
    with pytest.raises(session_probe.ProbeError, match="no probe connected"):
        ch.admit(lambda: ["/x"], ch.argv(CODE), 0.2)


def test_a_process_that_never_says_go_ends(channel):
    """The probe acts only after root's go: a channel closed first ends it (status 3)."""
    ch, cwd = channel
    argv = ch.argv(CODE)
    p = start(argv, cwd)
    ch.admit(lambda: [group_of(p.pid)], argv, DEADLINE_S)
    ch.conn.close()
    ch.conn = None
    assert p.wait(DEADLINE_S) == 3
