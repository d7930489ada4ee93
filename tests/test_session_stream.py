"""A session's stream read from a socket pair standing in for the supervisor
(CONC-2, FLOOD-4): RawSession.read keeps frames and output within bounds,
Drain counts output at full speed; both note STARTED, EXIT and ERROR, say
how the stream ended and name what was not reached by the deadline;
read_to_close keeps the output before EXIT and names what came after it,
first_difference says where the counted lines a command wrote and the stream
part (CONC-2: every byte before EXIT)."""
import socket
import struct

import pytest

from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.session_clients import RawSession
from pty_acceptance.supervisor.session_stream import (Drain, counted_lines, first_difference, queued_bytes,
                                                 read_to_close)

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


def test_read_to_close_waits_for_the_close_and_says_so_at_its_deadline(stream):
    s, sup = stream
    want = counted_lines("123456789012", 3)
    assert want == b"123456789012:00000001\n123456789012:00000002\n123456789012:00000003\n"
    sent = frames((p.T.OUTPUT, want[:30]), (p.T.OUTPUT, want[30:]), (p.T.EXIT, struct.pack(">ii", 0, 0)))
    sup.sendall(sent)
    assert queued_bytes(s.sock) == len(sent)  # nothing read yet
    with pytest.raises(TimeoutError, match=r"did not close within 0.2 s: .*exit=\(0, 0\).* after 66 output"):
        read_to_close(s, 0.2, 1000)
    assert queued_bytes(s.sock) == 0


def test_read_to_close_reads_to_the_close(stream):
    s, sup = stream
    want = counted_lines("123456789012", 3)
    sup.sendall(frames((p.T.OUTPUT, want), (p.T.EXIT, struct.pack(">ii", 0, 0)), (p.T.OUTPUT, b"late")))
    sup.shutdown(socket.SHUT_WR)
    got = read_to_close(s, 5, len(want) + 1)
    assert got.output == want and got.after_end == ["OUTPUT"] and s.outcome.exit == (0, 0)
    assert first_difference(got.output, want) is None


def test_first_difference_names_the_byte_and_the_line_where_the_stream_parts():
    want = counted_lines("123456789012", 4)
    got = want[:22] + want[44:]  # line 2 dropped
    assert first_difference(got, want) == (
        "received 66 of 88 bytes; they part at byte 42 (line 2): the command wrote b'2\\n123456789012:00000003\\n', "
        "the stream carried b'3\\n123456789012:00000004\\n'")
    assert first_difference(want[:50], want).startswith("received 50 of 88 bytes; they part at byte 50 (line 3)")
