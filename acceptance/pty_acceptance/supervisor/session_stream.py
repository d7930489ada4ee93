"""A session's stream at full speed (CONC-2, CONC-3, FLOOD-4): Drain reads
its output, counting rather than keeping it (RawSession.read keeps every
frame; a saturated session is megabytes a second), until its end;
fill_input writes DATA frames until the supervisor stops taking them (its
input is blocked by backpressure). Counted lines (CONC-2: every byte before
EXIT): a command that writes numbered lines carrying its token, the stream
read to its close, and where it differs from what the command wrote."""
from __future__ import annotations

import fcntl
import select
import shlex
import socket
import termios
from dataclasses import dataclass, field
from typing import cast

from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.session_clients import RawSession


class Drain:
    """Read a session at full speed, counting output rather than keeping it
    (RawSession.read keeps every frame; a saturated session is megabytes a second)."""

    def __init__(self, s: RawSession):
        self.s = s
        # what RawSession.read already took (with STARTED, say) counts too
        self.output_bytes = len(s.outcome.output)
        self.output_sample = s.outcome.output[:200]   # first bytes only, as evidence
        self.max_frame = max([len(f.payload) for f in s.outcome.frames if f.type == p.T.OUTPUT],
                             default=0)

    def until(self, done, deadline_s: float):
        out = self.s.outcome
        for f in self.s.receive(lambda: done(self), deadline_s, lambda: (
                f"not reached within {deadline_s:g} s: {out.describe()} output_bytes={self.output_bytes}"),
                chunk=262144):
            if f.type == p.T.OUTPUT:
                self.output_bytes += len(f.payload)
                self.max_frame = max(self.max_frame, len(f.payload))
                if len(self.output_sample) < 200:
                    self.output_sample = (self.output_sample + f.payload)[:200]
                continue
            out.frames.append(f)
            out.note(f)

    def to_end(self, deadline_s: float):
        self.until(lambda d: d.s.outcome.exit or d.s.outcome.error or d.s.outcome.closed, deadline_s)
        return self.s.outcome


def fill_input(s: RawSession, limit: int = 4 << 20) -> int:
    """Send DATA frames without blocking until the supervisor stops taking them
    (or `limit` bytes). Returns the bytes sent."""
    chunk = p.encode(p.T.DATA, b"i" * p.LIMITS.data_bytes)
    sent = 0
    cast(socket.socket, s.sock).setblocking(False)  # an open session's
    try:
        view = memoryview(b"")
        while sent < limit:
            if not view:
                view = memoryview(chunk)
            try:
                n = cast(socket.socket, s.sock).send(view)
            except (BlockingIOError, InterruptedError):
                ready = select.select([], [cast(socket.socket, s.sock)], [], 0.5)[1]
                if not ready:
                    break   # nobody takes input any more: blocked
                continue
            except OSError:   # the supervisor closed the connection
                break
            view = view[n:]
            sent += n
    finally:
        cast(socket.socket, s.sock).setblocking(True)
    return sent


# ------------------------------------------------------------------ counted lines
def counted_lines_sh(token: str, lines: int) -> str:
    """sh: no output processing (a newline stays one byte) and no echo, then
    counted_lines_waiting: one line of input, then `lines` lines
    "<token>:<8-digit number>\\n", numbered from 1, written in blocks (cat
    from a pipe; seq alone writes a terminal line by line, and a small write
    takes as much room in a socket's buffer as a large one). The suite sends
    the line once counted_lines_waiting runs (the terminal is set by then:
    nothing is echoed), so the command writes only after its footprint was
    taken."""
    return f"stty -opost -echo; exec {shlex.join(counted_lines_waiting(token, lines))}"


def counted_lines_waiting(token: str, lines: int) -> list[str]:
    """The argv that waits for the line of input and then writes the lines."""
    return ["/bin/sh", "-c", f"read go && seq -f '{token}:%08.0f' 1 {lines} | cat", f"pty-acceptance-{token}"]


def counted_lines(token: str, lines: int) -> bytes:
    """What counted_lines_sh(token, lines) writes."""
    return b"".join(b"%s:%08d\n" % (token.encode(), i) for i in range(1, lines + 1))


def first_difference(got: bytes, want: bytes) -> str | None:
    """None when got is want; else where they part: the byte offset, the line the
    command wrote there and the (hostile, bounded, escaped) bytes received there."""
    if got == want:
        return None
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    line = want.count(b"\n", 0, at) + 1
    return (f"received {len(got)} of {len(want)} bytes; they part at byte {at} (line {line}): "
            f"the command wrote {want[at:at + 24]!r}, the stream carried {got[at:at + 24]!r}")


def queued_bytes(sock: socket.socket) -> int:
    """Bytes waiting in the suite's end of a connection, not yet read (SIOCINQ)."""
    return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"), "little")


@dataclass
class Stream:
    """A session's stream read to its close: the output before the end (EXIT or
    ERROR) and the frames that came after it."""
    output: bytes = b""
    after_end: list[str] = field(default_factory=list)


def read_to_close(s: RawSession, deadline_s: float, keep: int) -> Stream:
    """Every frame until the supervisor closes the connection (TimeoutError at the
    deadline); output before the end is kept up to `keep` bytes."""
    out, got, chunks = s.outcome, Stream(), bytearray()

    def still_open() -> str:
        return f"the stream did not close within {deadline_s:g} s: {out.describe()} after {len(chunks)} output bytes"

    for f in s.receive(lambda: False, deadline_s, still_open):
        ended = out.exit is not None or out.error is not None
        if ended:
            got.after_end.append(f.name)
        elif f.type == p.T.OUTPUT:
            chunks += f.payload[:max(0, keep - len(chunks))]
        else:
            out.frames.append(f)
            out.note(f)
    got.output = bytes(chunks)
    return got
