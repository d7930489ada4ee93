"""The supervisor's wire format, and nothing else knows it.

This is our reading of the supervisor's PROTOCOL.md (we do not have it):
every frame is ``u32 length`` (big-endian, payload bytes), ``u8 type``, then
the payload. Matching the real document later is a change to this module and
its tests only.

Everything read from a socket is hostile bytes: lengths are checked against
the type's bound before a payload is read, nothing is decoded as text unless
a caller asks, and descriptors that arrive unasked are closed.
"""

from __future__ import annotations

import array
import os
import socket
import struct
from dataclasses import dataclass
from enum import IntEnum


HEADER = struct.Struct(">IB")


class T(IntEnum):
    HELLO = 0x01
    START = 0x02
    DATA = 0x03
    EOF = 0x04
    RESIZE = 0x05
    STOP = 0x06
    HELLO_OK = 0x81
    STARTED = 0x82
    OUTPUT = 0x83  # DATA from the supervisor
    EXIT = 0x84
    ERROR = 0x85


class Code(IntEnum):
    AUTH = 1
    PROTOCOL = 2
    LIMIT = 3
    CAPACITY = 4
    START_FAILED = 5
    RATE_LIMITED = 6
    INTERNAL = 7


TO_SUPERVISOR = frozenset({T.HELLO, T.START, T.DATA, T.EOF, T.RESIZE, T.STOP})
FROM_SUPERVISOR = frozenset({T.HELLO_OK, T.STARTED, T.OUTPUT, T.EXIT, T.ERROR})


@dataclass(frozen=True)
class Limits:
    command_bytes: int = 4096
    args: int = 128
    arg_bytes: int = 16384
    aggregate_arg_bytes: int = 65536
    runtime_max_s: int = 3600
    data_bytes: int = 32768


LIMITS = Limits()
START_BOUND = 4 + 2 + 2 + 2 + (4 + LIMITS.command_bytes) + LIMITS.args * 4 + LIMITS.aggregate_arg_bytes
BOUNDS = {
    T.HELLO: 0, T.START: START_BOUND, T.DATA: LIMITS.data_bytes, T.EOF: 0, T.RESIZE: 4,
    T.STOP: 0, T.HELLO_OK: 16, T.STARTED: 256, T.OUTPUT: LIMITS.data_bytes, T.EXIT: 8,
    T.ERROR: 2 + 4096,
}


class ProtocolError(Exception):
    """The peer sent something the format does not allow. A plain Exception:
    this module is staged beside probes/agent.py and imports nothing of the
    package (tests/test_import_graph.py)."""


@dataclass(frozen=True)
class Frame:
    type: int
    payload: bytes

    @property
    def name(self) -> str:
        try:
            return T(self.type).name
        except ValueError:
            return f"0x{self.type:02x}"


# ------------------------------------------------------------------ encoding
def encode(type_: int, payload: bytes = b"", *, check: bool = True) -> bytes:
    """One frame. `check=False` builds frames the format forbids (for tests
    that must show the supervisor refuses them)."""
    if check:
        bound = BOUNDS[T(type_)]
        if len(payload) > bound:
            raise ValueError(f"{T(type_).name} payload {len(payload)} > bound {bound}")
    return HEADER.pack(len(payload), type_) + payload


def start_payload(argv: list[bytes | str], runtime_s: int, rows: int = 24, cols: int = 80) -> bytes:
    """START: u32 runtime, u16 rows, u16 cols, u16 argc, then argc x (u32 len + bytes)."""
    items = [a.encode() if isinstance(a, str) else a for a in argv]
    return start_fields(len(items), items, runtime_s=runtime_s, rows=rows, cols=cols)


def start_fields(argc: int, items: list[bytes], tail: bytes = b"", *, runtime_s: int = 60,
                 rows: int = 24, cols: int = 80) -> bytes:
    """A START payload field by field; argc need not match the items and `tail`
    follows them (malformed STARTs for PROTO-3)."""
    return struct.pack(">IHHH", runtime_s, rows, cols, argc) + b"".join(u32(len(a)) + a for a in items) + tail


def u32(n: int) -> bytes:
    """A length field as the format writes it."""
    return struct.pack(">I", n)


def data_frames(data: bytes, *, size: int = LIMITS.data_bytes) -> list[bytes]:
    """A client write split the way PROTO-2 requires (65,536 -> 2 x 32,768)."""
    return [encode(T.DATA, data[i:i + size]) for i in range(0, len(data), size)] or []


def resize_payload(rows: int, cols: int) -> bytes:
    return struct.pack(">HH", rows, cols)


# ------------------------------------------------------------------ decoding
def parse_exit(f: Frame) -> tuple[int, int]:
    if f.type != T.EXIT or len(f.payload) != 8:
        raise ProtocolError(f"not an EXIT frame: {f.name} of {len(f.payload)} bytes")
    return struct.unpack(">ii", f.payload)


def parse_error(f: Frame) -> tuple[int, str]:
    if f.type != T.ERROR or len(f.payload) < 2:
        raise ProtocolError(f"not an ERROR frame: {f.name} of {len(f.payload)} bytes")
    (code,) = struct.unpack(">H", f.payload[:2])
    return code, f.payload[2:].decode("utf-8", "replace")


def parse_start(payload: bytes) -> tuple[int, int, int, list[bytes]]:
    """The inverse of start_payload, strict: lengths must account for every byte."""
    if len(payload) < 10:
        raise ProtocolError("START shorter than its fixed header")
    runtime, rows, cols, argc = struct.unpack(">IHHH", payload[:10])
    pos, argv = 10, []
    for _ in range(argc):
        if pos + 4 > len(payload):
            raise ProtocolError("START argc exceeds the payload")
        (n,) = struct.unpack(">I", payload[pos:pos + 4])
        pos += 4
        if pos + n > len(payload):
            raise ProtocolError("START argument length exceeds the payload")
        argv.append(payload[pos:pos + n])
        pos += n
    if pos != len(payload):
        raise ProtocolError(f"START has {len(payload) - pos} bytes after its last argument")
    return runtime, rows, cols, argv


class Decoder:
    """Frames from a byte stream, bound-checked before payloads are buffered."""

    def __init__(self, allowed: frozenset = FROM_SUPERVISOR):
        self.allowed = allowed
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self.buf += data
        out = []
        while len(self.buf) >= HEADER.size:
            length, type_ = HEADER.unpack_from(self.buf)
            if type_ not in self.allowed:
                raise ProtocolError(f"frame type 0x{type_:02x} not allowed in this direction")
            if length > BOUNDS[T(type_)]:
                raise ProtocolError(f"{T(type_).name} of {length} bytes exceeds its bound "
                                    f"{BOUNDS[T(type_)]}")
            if len(self.buf) < HEADER.size + length:
                break
            payload = bytes(self.buf[HEADER.size:HEADER.size + length])
            del self.buf[:HEADER.size + length]
            out.append(Frame(type_, payload))
        return out


# ------------------------------------------------------------------ the first exchange
HANDSHAKE_SHOWN = 64  # bytes of a reply shown when it does not parse


def handshake_problem(reply: bytes, closed: str | None = None) -> str | None:
    """Whether the supervisor's answer to HELLO is in this format: exactly one
    frame, HELLO_OK with a 16-byte InvocationID or ERROR with a code, and
    nothing after it but the end of the stream. None when it is; otherwise
    what does not fit, in words. A reply that stops early (the supervisor
    closed without a word, or is still silent) is not judged here."""
    if not reply:
        return None
    try:
        frames = Decoder(FROM_SUPERVISOR).feed(reply)
    except ProtocolError as e:
        return str(e)
    if not frames:
        return None if closed is None else f"the stream ended inside a frame ({closed})"
    first = frames[0]
    if first.type == T.HELLO_OK and len(first.payload) != BOUNDS[T.HELLO_OK]:
        return f"HELLO_OK carries {len(first.payload)} bytes, not a 16-byte InvocationID"
    if first.type not in (T.HELLO_OK, T.ERROR):
        return f"HELLO was answered with {first.name}, not HELLO_OK or ERROR"
    if first.type == T.ERROR:
        parse_error(first)
    return None


def shown(data: bytes, limit: int = HANDSHAKE_SHOWN) -> str:
    """Bytes from the wire, for a message: hex, at most `limit` bytes, and how many more."""
    more = len(data) - limit
    return data[:limit].hex(" ") + (f" (+{more} bytes)" if more > 0 else "")


# ------------------------------------------------------------------ sockets
def send_frame(sock: socket.socket, frame: bytes, fds: list[int] | tuple[int, ...] = ()) -> None:
    """Send one frame; `fds` go as one SCM_RIGHTS message with its first byte."""
    if fds:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        sent = sock.sendmsg([frame], anc)
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)


def recv_with_fds(sock: socket.socket, nbytes: int, maxfds: int = 4) -> tuple[bytes, list[int], bool]:
    """recvmsg: (data, received descriptors, MSG_CTRUNC seen)."""
    # CMSG_LEN, not CMSG_SPACE: room for exactly maxfds, so one more sets MSG_CTRUNC
    data, anc, flags, _ = sock.recvmsg(nbytes, socket.CMSG_LEN(maxfds * 4))
    fds: list[int] = []
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(blob[: len(blob) - len(blob) % arr.itemsize])
            fds += list(arr)
    return data, fds, bool(flags & socket.MSG_CTRUNC)


def close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
