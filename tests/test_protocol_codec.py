"""The wire-format module on its own: layouts, bounds, streams, descriptors."""

import os
import socket
import struct

import pytest

from pty_acceptance.supervisor import protocol as p


def test_frame_layout_is_length_type_payload():
    assert p.encode(p.T.HELLO) == b"\x00\x00\x00\x00\x01"
    assert p.encode(p.T.RESIZE, p.resize_payload(24, 80)) == b"\x00\x00\x00\x04\x05\x00\x18\x00\x50"


def test_start_payload_layout():
    payload = p.start_payload(["ls", "-l"], runtime_s=60, rows=24, cols=80)
    assert payload == (struct.pack(">IHHH", 60, 24, 80, 2) + b"\x00\x00\x00\x02ls"
                       + b"\x00\x00\x00\x02-l")
    assert p.parse_start(payload) == (60, 24, 80, [b"ls", b"-l"])


def test_start_bound_is_the_contract_bound():
    assert p.START_BOUND == 70158
    biggest = p.start_payload(["c" * 4096] + ["a" * 512] * 127 + ["a" * 512], 3600)
    assert len(biggest) <= p.START_BOUND + 4 * 128  # argv bytes over budget are the test's, not the codec's


@pytest.mark.parametrize("payload,why", [
    (b"\x00" * 9, "fixed header"),
    (struct.pack(">IHHH", 1, 1, 1, 1), "argc exceeds"),
    (struct.pack(">IHHH", 1, 1, 1, 1) + b"\x00\x00\x00\x05ab", "length exceeds"),
    (struct.pack(">IHHH", 1, 1, 1, 0) + b"x", "after its last"),
])
def test_parse_start_is_strict(payload, why):
    with pytest.raises(p.ProtocolError, match=why):
        p.parse_start(payload)


def test_encode_refuses_oversize_unless_asked():
    with pytest.raises(ValueError):
        p.encode(p.T.DATA, b"x" * 32769)
    assert len(p.encode(p.T.DATA, b"x" * 32769, check=False)) == 32774


def test_65536_bytes_travel_as_two_32768_frames():
    frames = p.data_frames(b"z" * 65536)
    assert [len(f) for f in frames] == [32773, 32773]
    dec = p.Decoder(p.TO_SUPERVISOR)
    got = dec.feed(b"".join(frames))
    assert [(f.type, len(f.payload)) for f in got] == [(p.T.DATA, 32768)] * 2


def test_decoder_handles_partial_frames():
    dec = p.Decoder()
    wire = p.encode(p.T.OUTPUT, b"hello") + p.encode(p.T.EXIT, struct.pack(">ii", 3, 0))
    out = []
    for i in range(len(wire)):
        out += dec.feed(wire[i:i + 1])
    assert [f.name for f in out] == ["OUTPUT", "EXIT"]
    assert p.parse_exit(out[1]) == (3, 0)


def test_decoder_rejects_oversize_before_the_payload_arrives():
    dec = p.Decoder()
    with pytest.raises(p.ProtocolError, match="exceeds its bound"):
        dec.feed(struct.pack(">IB", 40000, p.T.OUTPUT))


@pytest.mark.parametrize("type_", [0x00, 0x07, 0x7f, 0x86, 0xff, p.T.HELLO, p.T.START])
def test_decoder_rejects_unknown_types_and_wrong_direction(type_):
    with pytest.raises(p.ProtocolError, match="not allowed"):
        p.Decoder(p.FROM_SUPERVISOR).feed(struct.pack(">IB", 0, type_))


def test_error_frame():
    f = p.Decoder().feed(p.encode(p.T.ERROR, struct.pack(">H", p.Code.CAPACITY) + "full \u2014".encode()))[0]
    assert p.parse_error(f) == (4, "full \u2014")


def test_descriptor_passing_and_ctrunc_detection():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        p.send_frame(a, p.encode(p.T.HELLO), [r1])
        data, fds, trunc = p.recv_with_fds(b, 64, maxfds=1)
        assert data == p.encode(p.T.HELLO) and len(fds) == 1 and not trunc
        p.close_all(fds)
        p.send_frame(a, p.encode(p.T.HELLO), [r1, r2])
        data, fds, trunc = p.recv_with_fds(b, 64, maxfds=1)
        assert trunc, "two descriptors into room for one must set MSG_CTRUNC"
        p.close_all(fds)
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)
        a.close()
        b.close()


# -- the first exchange: does the supervisor speak this framing at all?
def test_a_hello_ok_or_an_error_is_the_contracts_framing():
    assert p.handshake_problem(p.encode(p.T.HELLO_OK, bytes(16))) is None
    assert p.handshake_problem(p.encode(p.T.ERROR, b"\x00\x01no")) is None
    assert p.handshake_problem(b"") is None  # closed without a word: not a framing question


@pytest.mark.parametrize("reply, why", [
    (struct.pack("<BI", 0x81, 16) + bytes(16), "frame type 0x00 not allowed"),       # type first, little-endian
    (struct.pack("<IB", 16, 0x81) + bytes(16), "exceeds its bound 16"),              # little-endian length
    (b'{"ok": true, "invocation": "x"}\n', "not allowed in this direction"),        # a JSON line
    (p.encode(p.T.HELLO_OK, bytes(8)), "not a 16-byte InvocationID"),
    (p.encode(p.T.EXIT, bytes(8)), "not HELLO_OK or ERROR"),
])
def test_another_framing_is_named(reply, why):
    assert why in (p.handshake_problem(reply) or "")


def test_shown_bytes_are_bounded_hex():
    assert p.shown(b"\x81\x10") == "81 10"
    assert p.shown(bytes(100)).endswith("(+36 bytes)") and p.shown(bytes(100)).count("00") == 64
