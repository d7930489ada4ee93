"""PTY sessions as the suite drives them.

HelperSession: the real path. The peer agent connects and authenticates,
then spawns the fixed helper with fd 3 and fd 4; the suite holds the other
ends of the helper's stdin and stdout.

RawSession: the suite speaks the protocol itself on the authenticated
socket (the agent hands over its connected socket after HELLO_OK), so it can
see STARTED and EXIT frames and send what the helper never would.

All session output is hostile bytes: kept as bytes, bounded, never decoded
into anything but evidence text with errors replaced.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass, field
from typing import cast

from pty_acceptance.errors import Refused, Unreadable
from pty_acceptance.host import unixdiag
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.peer import Agent, DisposableUnit, open_cwd

DEFAULT_CWD = "/tmp"  # a session's working directory unless a test gives one (the host's, passed by descriptor)
MAX_OUTPUT = 8 << 20  # what the suite keeps of one session's output
MAX_FRAMES = 1024  # OUTPUT frames kept as frames (their bytes are in Outcome.output)


class SessionError(Unreadable):
    pass


class NotTheSupervisor(Refused):
    """A descriptor an agent (a process of the service user's) handed over as its
    connection to the supervisor that is no such connection: the suite judges
    nothing it would say (a blind red team's round ten handed over one end of a
    socketpair and relayed the real connection, mending the supervisor's defects)."""
    requirements = ("SUITE-4",)


def handed_connection(fds: list[int], socket_path: str, who: str) -> socket.socket:
    """The one descriptor an agent handed over, once the kernel says it is a
    connection to the socket file at `socket_path` (unixdiag.connected_to: its other
    end accepted there, and root's process that holds it); NotTheSupervisor
    otherwise, the descriptors closed."""
    if len(fds) != 1:
        p.close_all(fds)
        raise SessionError(f"{who} handed over {len(fds)} descriptors, expected 1")
    sock = socket.socket(fileno=fds[0])
    try:
        why = unixdiag.connected_to(sock.fileno(), socket_path)
    except OSError as e:
        why = f"it cannot be read ({e.strerror or e})"
    if why is not None:
        sock.close()
        raise NotTheSupervisor(f"SUITE-4: the descriptor {who} handed over is not a connection to "
                               f"{socket_path}: {why}")
    return sock


@dataclass
class Outcome:
    frames: list[p.Frame] = field(default_factory=list)
    output: bytes = b""
    exit: tuple[int, int] | None = None
    error: tuple[int, str] | None = None
    closed: str | None = None  # why the stream ended, if it did
    unit: str | None = None

    def describe(self) -> str:
        return (f"unit={self.unit} exit={self.exit} error={self.error} closed={self.closed} "
                f"output[:200]={self.output[:200]!r}")

    def note(self, f: p.Frame) -> None:
        """What a STARTED, EXIT or ERROR frame says (other frames say nothing here)."""
        if f.type == p.T.STARTED:
            self.unit = f.payload.decode("ascii", "replace")
        elif f.type == p.T.EXIT:
            self.exit = p.parse_exit(f)
        elif f.type == p.T.ERROR:
            self.error = p.parse_error(f)


class RawSession:
    """One authenticated connection, spoken to frame by frame."""

    def __init__(self, peer: DisposableUnit, socket_path: str):
        self.peer = peer
        self.path = socket_path
        self.sock: socket.socket | None = None
        self.hello: dict | None = None
        self.decoder = p.Decoder(p.FROM_SUPERVISOR)
        self.outcome = Outcome()

    def open(self) -> "RawSession":
        a = cast(Agent, self.peer.agent)  # the peer was started
        a("connect", path=self.path)
        self.hello = a("hello")["frame"]
        if self.hello.get("name") != "HELLO_OK":
            raise SessionError(f"HELLO was answered with {self.hello}")
        _, fds = a.call("take")
        self.sock = handed_connection(fds, self.path, f"the agent of {self.peer.name}")
        return self

    def send(self, frame: bytes, fds: list[int] | tuple[int, ...] = ()) -> None:
        p.send_frame(cast(socket.socket, self.sock), frame, list(fds))

    def start(self, argv: list, runtime_s: int = 60, cwd: str = DEFAULT_CWD, rows: int = 24,
              cols: int = 80, fds: list[int] | None = None) -> None:
        """START with one descriptor (an O_DIRECTORY of `cwd`) unless `fds` is given."""
        own = fds is None
        if fds is None:
            fds = [open_cwd(cwd)]
        try:
            self.send(p.encode(p.T.START, p.start_payload(argv, runtime_s, rows, cols), check=False), fds)
        finally:
            if own:
                p.close_all(fds)

    def receive(self, done, deadline_s: float, timeout, chunk: int = 65536):
        """The frames that arrive until done() is true or the stream ends
        (outcome.closed says how); TimeoutError(timeout()) at the deadline."""
        end = time.monotonic() + deadline_s
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(timeout())
            ready, _, _ = select.select([cast(socket.socket, self.sock)], [], [], left)
            if not ready:
                continue
            try:
                data = cast(socket.socket, self.sock).recv(chunk)
            except ConnectionResetError:
                self.outcome.closed = "reset"
                return
            if not data:
                self.outcome.closed = "eof"
                return
            yield from self.decoder.feed(data)

    def read(self, until, deadline_s: float) -> Outcome:
        """Read frames until until(outcome) is true, the stream ends, or the deadline."""
        out = self.outcome
        for f in self.receive(lambda: until(out), deadline_s, lambda: (
                f"session did not reach the expected state in {deadline_s} s: {out.describe()}")):
            if f.type != p.T.OUTPUT or len(out.frames) < MAX_FRAMES:
                out.frames.append(f)  # output is kept below, bounded; frames too
            if f.type != p.T.OUTPUT:
                out.note(f)
            elif len(out.output) < MAX_OUTPUT:
                out.output += f.payload
        return out

    def wait_started(self, deadline_s: float = 10) -> Outcome:
        out = self.read(lambda o: o.unit or o.error or o.exit, deadline_s)
        if not out.unit:
            raise SessionError(f"no STARTED: {out.describe()}")
        return out

    def wait_end(self, deadline_s: float = 30) -> Outcome:
        return self.read(lambda o: o.exit or o.error or o.closed, deadline_s)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()


class HelperSession:
    """A session through the fixed helper, as the real peer runs it."""

    def __init__(self, peer: DisposableUnit, socket_path: str, helper: str, argv: list[str],
                 runtime_s: int = 60, cwd: str = "/tmp", rows: int = 24, cols: int = 80):
        self.peer, self.path, self.helper = peer, socket_path, helper
        self.argv, self.runtime_s, self.cwd, self.rows, self.cols = argv, runtime_s, cwd, rows, cols
        self.stdin: socket.socket | None = None
        self.stdout: socket.socket | None = None
        self.pid: int | None = None
        self.hello: dict | None = None

    def open(self) -> "HelperSession":
        a = cast(Agent, self.peer.agent)  # the peer was started
        a("connect", path=self.path)
        self.hello = a("hello")["frame"]
        if self.hello.get("name") != "HELLO_OK":
            raise SessionError(f"HELLO was answered with {self.hello}")
        in_mine, in_theirs = socket.socketpair()
        out_mine, out_theirs = socket.socketpair()
        args = [self.helper, "--runtime", str(self.runtime_s), "--rows", str(self.rows),
                "--cols", str(self.cols), "--", *self.argv]
        try:
            reply, _ = a.call("spawn", fds=[in_theirs.fileno(), out_theirs.fileno(),
                                            out_theirs.fileno()], argv=args, cwd=self.cwd)
        finally:
            in_theirs.close()
            out_theirs.close()
        in_mine.shutdown(socket.SHUT_RD)
        self.stdin, self.stdout, self.pid = in_mine, out_mine, reply["pid"]
        return self

    def write(self, data: bytes) -> None:
        cast(socket.socket, self.stdin).sendall(data)

    def close_input(self) -> None:
        if self.stdin is not None:
            self.stdin.close()
            self.stdin = None

    def read_all(self, deadline_s: float = 30) -> bytes:
        out = b""
        end = time.monotonic() + deadline_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"helper output did not end within {deadline_s} s; "
                                   f"so far {out[-200:]!r}")
            ready, _, _ = select.select([cast(socket.socket, self.stdout)], [], [], left)
            if ready:
                chunk = cast(socket.socket, self.stdout).recv(65536)
                if not chunk:
                    return out
                if len(out) < MAX_OUTPUT:
                    out += chunk

    def wait(self, deadline_s: float = 30) -> int | None:
        return cast(Agent, self.peer.agent)("wait", pid=self.pid, timeout=deadline_s)["status"]

    def run(self, input_: bytes | None = b"", deadline_s: float = 30) -> tuple[bytes, int | None]:
        """Feed input (None: leave stdin open), read to the end, return (output, status)."""
        if input_ is not None:
            if input_:
                self.write(input_)
            self.close_input()
        out = self.read_all(deadline_s)
        return out, self.wait(deadline_s)

    def close(self) -> None:
        self.close_input()
        if self.stdout is not None:
            self.stdout.close()
            self.stdout = None

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()
