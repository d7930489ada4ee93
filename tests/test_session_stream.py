"""A session's stream read from a socket pair standing in for the supervisor
(CONC-2, FLOOD-4): RawSession.read keeps frames and output within bounds,
Drain counts output at full speed; both note STARTED, EXIT and ERROR, say
how the stream ended and name what was not reached by the deadline."""
import socket
import struct

import pytest

from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.session import RawSession
from pty_acceptance.supervisor.sessionio import Drain

UNIT = b"opencode-pty-0123456789abcdef0123456789abcdef.service"


@pytest.fixture
def stream():
    """(a RawSession on one end of a socket pair, the supervisor's end)."""
    ours, theirs = socket.socketpair()
    s = RawSession(peer=None, socket_path="/run/x.sock")
    s.sock = ours
    try:
        yield s, theirs
    finally:
        ours.close()
        theirs.close()


def frames(*items: tuple[int, bytes]) -> bytes:
    return b"".join(p.encode(t, payload) for t, payload in items)


def test_read_notes_started_keeps_output_and_the_exit(stream):
    s, sup = stream
    sup.sendall(frames((p.T.STARTED, UNIT), (p.T.OUTPUT, b"hello "), (p.T.OUTPUT, b"world"),
                       (p.T.EXIT, struct.pack(">ii", 0, 0))))
    out = s.read(lambda o: o.exit, 5)
    assert out.unit == UNIT.decode() and out.output == b"hello world" and out.exit is not None
    assert [f.type for f in out.frames] == [p.T.STARTED, p.T.OUTPUT, p.T.OUTPUT, p.T.EXIT]


def test_read_says_how_the_stream_ended_and_what_was_not_reached(stream):
    s, sup = stream
    sup.sendall(frames((p.T.STARTED, UNIT)))
    with pytest.raises(TimeoutError, match=r"session did not reach the expected state in 0.2 s: unit=opencode-pty-"):
        s.read(lambda o: o.exit, 0.2)
    sup.shutdown(socket.SHUT_WR)
    assert s.read(lambda o: o.exit, 5).closed == "eof"


def test_drain_counts_output_and_keeps_only_a_sample(stream):
    s, sup = stream
    sup.sendall(frames((p.T.STARTED, UNIT)))
    s.wait_started(5)
    d = Drain(s)
    sup.sendall(frames(*[(p.T.OUTPUT, b"x" * 1000)] * 50))
    d.until(lambda d: d.output_bytes >= 50_000, 5)
    assert d.output_bytes == 50_000 and d.max_frame == 1000 and d.output_sample == b"x" * 200
    assert s.outcome.output == b"" and [f.type for f in s.outcome.frames] == [p.T.STARTED]
    with pytest.raises(TimeoutError, match=r"not reached within 0.2 s: .* output_bytes=50000$"):
        d.until(lambda d: False, 0.2)
    sup.sendall(frames((p.T.ERROR, struct.pack(">H", p.Code.CAPACITY) + b"full")))
    sup.shutdown(socket.SHUT_WR)
    out = d.to_end(5)
    assert out.error is not None and out.error[0] == p.Code.CAPACITY and out.closed is None
    assert d.to_end(5).closed is None  # ended by its ERROR: nothing more is read
