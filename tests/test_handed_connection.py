"""What an agent hands over as its supervisor connection is one (session_clients.
handed_connection, host/unixdiag.py), and an agent's reply has one deadline
(peer.Agent.call): a blind red team's round ten handed over one end of a
socketpair and relayed the real connection, and could trickle a reply forever."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from pty_acceptance.supervisor import peer
from pty_acceptance.supervisor.session_clients import NotTheSupervisor, handed_connection


@pytest.fixture
def listener(tmp_path):
    path = str(tmp_path / "supervisor.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen()
    yield path, srv
    srv.close()


def test_a_connection_accepted_on_the_socket_is_taken(listener):
    path, srv = listener
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    accepted, _ = srv.accept()
    sock = handed_connection([os.dup(client.fileno())], path, "the agent")
    assert sock.fileno() >= 0
    sock.close(), client.close(), accepted.close()


def test_one_end_of_a_socketpair_is_refused_under_suite_4(listener):
    path, _ = listener
    mine, theirs = socket.socketpair()
    fd = os.dup(mine.fileno())
    with pytest.raises(NotTheSupervisor) as e:
        handed_connection([fd], path, "the agent of x")
    assert "SUITE-4" in e.value.requirements and "bound to no file" in str(e.value), str(e.value)
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    mine.close(), theirs.close()


def test_a_connection_to_another_socket_file_is_refused(listener, tmp_path):
    path, _ = listener
    other = str(tmp_path / "other.sock")
    srv2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv2.bind(other)
    srv2.listen()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(other)
    accepted, _ = srv2.accept()
    with pytest.raises(NotTheSupervisor) as e:
        handed_connection([os.dup(client.fileno())], path, "the agent")
    assert f"not to {path}" in str(e.value), str(e.value)
    client.close(), accepted.close(), srv2.close()


def test_an_agent_trickling_its_reply_is_cut_at_the_calls_deadline(monkeypatch):
    monkeypatch.setattr(peer, "CALL_DEADLINE_S", 0.5)
    mine, theirs = socket.socketpair()
    stop = threading.Event()

    def trickle():
        theirs.recv(65536)
        while not stop.is_set():
            theirs.send(b" ")
            time.sleep(0.05)  # the stimulus: a byte every 50 ms, never a newline

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(peer.PeerError, match="not a line within"):
        peer.Agent(mine).call("ready")
    assert time.monotonic() - t0 < 5
    stop.set()
    t.join(2)
    mine.close(), theirs.close()


def test_a_connection_the_supervisor_already_closed_is_still_taken(listener):
    """The Python reference supervisor refuses an impostor and closes before the suite
    takes the descriptor: the credentials the connection carries still name the
    listener's process, which holds the socket bound at the path."""
    path, srv = listener
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    accepted, _ = srv.accept()
    accepted.close()
    sock = handed_connection([os.dup(client.fileno())], path, "the agent")
    sock.close(), client.close()
