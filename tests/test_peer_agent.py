"""The peer agent (probes/agent.py) as the suite runs it, a process of its own
driven over its control socket: a HELLO written to a connection the supervisor
has already closed (what a rate-limited flood gets) is an error reported to
the suite, and the agent goes on answering. With SIGPIPE at its default the
agent died there, and FLOOD-2/3 read "agent closed the control channel during
'hello'" on a loaded good host."""
import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from pty_acceptance.supervisor.peer import Agent, PeerError

from conftest import REPO

PKG = REPO / "acceptance" / "pty_acceptance"


@pytest.fixture
def agent(tmp_path):
    shutil.copy(PKG / "probes" / "agent.py", tmp_path / "agent.py")
    shutil.copy(PKG / "supervisor" / "protocol.py", tmp_path / "protocol.py")
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    proc = subprocess.Popen([sys.executable, "-I", str(tmp_path / "agent.py")], stdin=theirs,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    theirs.close()
    try:
        yield Agent(mine), proc
    finally:
        mine.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_hello_to_a_closed_connection_is_reported_and_the_agent_lives(agent, tmp_path):
    a, proc = agent
    path = str(tmp_path / "closing.sock")
    ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ln.bind(path)
    ln.listen(1)
    closed = threading.Event()

    def accept_and_close():
        c, _ = ln.accept()
        c.close()  # as a supervisor does with a connection over its rate
        closed.set()

    t = threading.Thread(target=accept_and_close, daemon=True)
    t.start()
    a("connect", path=path)
    assert closed.wait(10)
    with pytest.raises(PeerError) as e:
        a("hello")
    assert "BrokenPipeError" in str(e.value) or "ConnectionResetError" in str(e.value), str(e.value)
    assert a("close") == {"ok": True}  # still answering
    assert proc.poll() is None, f"the agent died: {proc.returncode}, {proc.stderr.read()!r}"
    ln.close()
    os.unlink(path)
