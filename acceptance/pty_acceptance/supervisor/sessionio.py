"""A session's stream at full speed (CONC-2, CONC-3, FLOOD-4): Drain reads
its output, counting rather than keeping it (RawSession.read keeps every
frame; a saturated session is megabytes a second), until its end;
fill_input writes DATA frames until the supervisor stops taking them (its
input is blocked by backpressure)."""
from __future__ import annotations

import select
import socket
from typing import cast

from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.session import RawSession


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
