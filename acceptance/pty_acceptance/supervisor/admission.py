"""Who gets in: handshakes and attempts against the supervisor socket, read
from outside (PEER and FLOOD modules).

An attempt is made by a process whose identity is the point of the test (a
disposable unit's agent, a child of it, or the suite itself as root); the
suite then speaks on that connection: HELLO, and if the supervisor wrongly
answers HELLO_OK, a START, so that a failure shows what the impostor got.
"""

from __future__ import annotations

from collections.abc import Iterable

import os
import select
import socket
import time
from dataclasses import dataclass, field
from typing import cast

from pty_acceptance.supervisor import protocol as p
from pty_acceptance.host import proc
from pty_acceptance.host.bus import SERVICE_IFACE, Systemd
from pty_acceptance.errors import Finding
from pty_acceptance.supervisor.peer import Agent, ChildAgent, DisposableUnit, open_cwd
from pty_acceptance.supervisor.session_clients import NotTheSupervisor, handed_connection
from pty_acceptance.host.systemd import ANY_SESSION
from pty_acceptance.host.unitwatch import UnitWatch

ANSWER_DEADLINE_S = 10


@dataclass
class AuthAttempt:
    who: str
    connect_error: str | None = None
    frames: list[p.Frame] = field(default_factory=list)
    closed: str | None = None
    seconds: float = 0.0

    @property
    def first(self) -> p.Frame | None:
        return self.frames[0] if self.frames else None

    def error_code(self) -> int | None:
        f = self.first
        return p.parse_error(f)[0] if f is not None and f.type == p.T.ERROR else None

    def started(self) -> bool:
        return any(f.type in (p.T.HELLO_OK, p.T.STARTED) for f in self.frames)

    def describe(self) -> str:
        if self.connect_error:
            return f"{self.who}: connect failed: {self.connect_error}"
        shown = []
        for f in self.frames[:4]:
            if f.type == p.T.ERROR:
                code, text = p.parse_error(f)
                shown.append(f"ERROR {code} {text[:120]!r}")
            elif f.type in (p.T.HELLO_OK, p.T.STARTED):
                shown.append(f"{f.name} {f.payload[:64]!r}")
            else:
                shown.append(f.name)
        return f"{self.who}: frames={shown} closed={self.closed} in {self.seconds:.3f} s"


def assert_refused(ids, a: AuthAttempt, created, evidence, allow_connect_error=False):
    """ERROR AUTH (or, where allowed, a refused connect), nothing started, no new session
    unit (created() -> the session units created meanwhile). Messages start with `ids`.
    Raises errors.Finding, never a bare assert (python -O would strip it: SUITE-3)."""
    evidence("attempt", a.describe())
    new = created()
    evidence("new session units", sorted(new))
    if a.started():
        raise Finding(f"{ids}: expected ERROR AUTH, the supervisor accepted: {a.describe()}; "
                      f"session units created: {sorted(new) or 'none'}")
    if new:
        raise Finding(f"{ids}: a rejected attempt left session units {sorted(new)}: {a.describe()}")
    if a.connect_error and allow_connect_error:
        return
    if a.error_code() != p.Code.AUTH:
        raise Finding(f"{ids}: expected ERROR AUTH ({int(p.Code.AUTH)}), the host answered: {a.describe()}")
    if a.closed not in ("eof", "reset"):
        raise Finding(f"{ids}: the connection was not closed after ERROR AUTH: {a.describe()}")


def watch_sessions(known: Iterable[str] = ()) -> UnitWatch:
    """Which session units get created meanwhile (systemd's UnitNew signals). `known`:
    session units of the test's own from before, never counted as created (a unit that
    ended and was collected is loaded again, UnitNew and all, by whoever reads it by
    its object path afterwards: a good trixie host, ISO-3's session of the killed peer)."""
    return UnitWatch(ANY_SESSION, exclude=known)


def invocation_id(bus: Systemd, name: str) -> bytes:
    return bytes((bus.properties(name) or {}).get("InvocationID") or b"")


def peer_invocation(bus: Systemd, name: str, pid: int) -> tuple[bytes, str]:
    """The InvocationID of unit `name` whose MainPID is `pid`, and how it was
    read. systemd 257 and later: from a pidfd of that very process
    (GetUnitByPIDFD: its unit and invocation in one answer, no pid to race;
    b"" when the process is not `name`'s MainPID). Before 257: by the unit's
    name."""
    fd = proc.pidfd_open(pid)
    try:
        main = (bus.properties(name, SERVICE_IFACE) or {}).get("MainPID")
        got = bus.unit_by_pidfd(fd) if main == pid else None
    finally:
        os.close(fd)
    if main != pid:
        return b"", f"{name}'s MainPID is {main}, not {pid}"
    if got is None:
        return invocation_id(bus, name), "by the unit's name (no GetUnitByPIDFD on this systemd: before 257)"
    unit, invocation = got
    if unit != name:
        return b"", f"GetUnitByPIDFD: the process {pid} is in {unit}, not {name}"
    return invocation, f"GetUnitByPIDFD(pidfd of MainPID {pid}): {unit}"


def read_frames(sock: socket.socket, until, deadline_s: float) -> tuple[list[p.Frame], str | None]:
    """Frames from the supervisor until until(frames), end of stream or the deadline."""
    dec, frames = p.Decoder(p.FROM_SUPERVISOR), cast(list[p.Frame], [])
    end = time.monotonic() + deadline_s
    while not until(frames):
        left = end - time.monotonic()
        if left <= 0:
            return frames, f"still open after {deadline_s} s"
        if not select.select([sock], [], [], left)[0]:
            continue
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return frames, "reset"
        if not data:
            return frames, "eof"
        frames += dec.feed(data)
    return frames, None


def speak(sock: socket.socket, who: str, argv=("/bin/sleep", "30")) -> AuthAttempt:
    """HELLO on an unauthenticated connection; if it is accepted, START too."""
    a, t0 = AuthAttempt(who), time.monotonic()
    try:
        sock.sendall(p.encode(p.T.HELLO))
        a.frames, a.closed = read_frames(sock, lambda fs: fs, ANSWER_DEADLINE_S)
        if a.first is not None and a.first.type == p.T.HELLO_OK:
            send_start(sock, list(argv))
            more, a.closed = read_frames(sock, lambda fs: fs, ANSWER_DEADLINE_S)
            a.frames += more
        elif a.first is not None:
            _, a.closed = read_frames(sock, lambda fs: False, ANSWER_DEADLINE_S)
    except OSError as e:
        a.closed = f"{type(e).__name__}: {e}"
    a.seconds = time.monotonic() - t0
    return a


def send_start(sock: socket.socket, argv: list, runtime_s: int = 60, cwd: str = "/tmp") -> None:
    fd = open_cwd(cwd)
    try:
        p.send_frame(sock, p.encode(p.T.START, p.start_payload(argv, runtime_s)), [fd])
    finally:
        os.close(fd)


def take_connection(unit: DisposableUnit | ChildAgent, socket_path: str) -> socket.socket:
    """The unit's agent (or a child agent) connects (its credentials are on the connection) and
    hands the socket to the suite before saying anything."""
    cast(Agent, unit.agent)("connect", path=socket_path)  # a started unit's
    _, fds = cast(Agent, unit.agent).call("take")
    return handed_connection(fds, socket_path, f"the agent of {unit.name}")


def attempt_as(unit: DisposableUnit | ChildAgent, socket_path: str, who: str) -> AuthAttempt:
    try:
        sock = take_connection(unit, socket_path)
    except NotTheSupervisor:  # a descriptor that is no connection to it: nothing to observe
        raise
    except Exception as e:  # an agent-side connect error is the observation
        return AuthAttempt(who, connect_error=str(e))
    with sock:
        return speak(sock, who)


def attempt_as_root(socket_path: str) -> AuthAttempt:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_DEADLINE_S)
        try:
            sock.connect(socket_path)
        except OSError as e:
            return AuthAttempt("root (the suite)", connect_error=f"{type(e).__name__}: {e}")
        sock.settimeout(None)
        return speak(sock, "root (the suite)")
    finally:
        sock.close()


def reported_error(frame: dict) -> int | None:
    """The ERROR code of a frame as the agent reports it (None: not an ERROR)."""
    if frame.get("name") != "ERROR":
        return None
    return p.parse_error(p.Frame(frame["type"], bytes.fromhex(frame["payload"])))[0]


def timed_hello(unit: DisposableUnit, socket_path: str) -> tuple[dict, float]:
    """connect + HELLO by the unit's agent: (first frame, seconds), as the real peer does it."""
    t0 = time.monotonic()
    cast(Agent, unit.agent)("connect", path=socket_path)  # a started unit's
    frame = cast(Agent, unit.agent)("hello")["frame"]
    return frame, time.monotonic() - t0


def kernel_has_so_peerpidfd() -> tuple[bool, str]:
    """Whether this kernel hands out SO_PEERPIDFD (checked on a socketpair)."""
    a, b = socket.socketpair()
    try:
        fd = int.from_bytes(a.getsockopt(socket.SOL_SOCKET, 77, 4), "little")
        os.close(fd)
        return True, f"SO_PEERPIDFD returned a pidfd on {os.uname().release}"
    except OSError as e:
        return False, f"SO_PEERPIDFD: {e} on {os.uname().release}"
    finally:
        a.close()
        b.close()
