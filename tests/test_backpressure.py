"""A still writer is backpressure only while its terminal's output runs
(host/backpressure.py): a blind red team's round eleven stopped the output of
FLOOD-4's writer with TCXONC TCOOFF (no signal, no ptrace stop), so the
supervisor had nothing to hold back."""

from __future__ import annotations

import os
import pty
import subprocess
import termios
import threading
import time

import pytest

from pty_acceptance.host import backpressure


@pytest.fixture
def terminal(monkeypatch):
    """A terminal, `yes` writing to it (found in a fake cgroup), and a drain of its
    master the test may start."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    writer = subprocess.Popen(["/usr/bin/yes", "pty-acceptance"], stdin=slave, stdout=slave, stderr=slave,
                              start_new_session=True, preexec_fn=lambda: __import__("fcntl").ioctl(
                                  0, termios.TIOCSCTTY, 0))
    monkeypatch.setattr(backpressure, "cgroup_pids", lambda path: [writer.pid])
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            try:
                os.read(master, 65536)
            except OSError:
                return

    yield master, slave, writer, threading.Thread(target=drain, daemon=True)
    stop.set()
    writer.kill()
    writer.wait()
    os.close(slave)
    os.close(master)


def test_a_writer_nobody_reads_is_held_back(terminal):
    master, slave, writer, _ = terminal
    n = backpressure.wait_stalled("cg", "yes", 10)
    assert n > 0


def test_a_writer_whose_output_was_stopped_is_no_backpressure(terminal):
    master, slave, writer, drain = terminal
    drain.start()  # a supervisor reading at full speed
    deadline = time.monotonic() + 10
    while not (backpressure.writer("cg", "yes") or (0, 0))[1] and time.monotonic() < deadline:
        time.sleep(0.01)  # poll interval until the writer has written (a still writer at 0 is never "stalled")
    termios.tcflow(slave, termios.TCOOFF)  # what the service user did to its terminal
    with pytest.raises(backpressure.TerminalStopped) as e:
        backpressure.wait_stalled("cg", "yes", 10)
    assert "SUITE-4" in e.value.requirements and "its terminal's output was stopped" in str(e.value)
