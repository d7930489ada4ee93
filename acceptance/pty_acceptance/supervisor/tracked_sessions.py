"""The raw sessions of one test and their footprints (CONC-2, CONC-3,
CGROUP-1; SUITE-4 for what the suite may stop or signal).

Sessions opens them, takes a footprint once each is STARTED (the unit it
names vouched for first: NotOurs fails the test) and, at close(), ends them
all, waits until they are gone and stops what the supervisor left running.
A session whose STARTED named a unit the suite refused is only closed: what
carries its token is waited for and reported, never signalled (end_refused).
Attempt is one start that may be refused at HELLO or at START.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import processes, terminal
from pty_acceptance.host.bus import Systemd
from pty_acceptance.host.polling import POLL_S
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.session_footprint import Footprint, HostReadError
from pty_acceptance.supervisor.session_gone import force_stop, wait_gone
from pty_acceptance.supervisor.session_clients import RawSession, SessionError
from pty_acceptance.supervisor.unit_vouch import NotOurs, Owner
from pty_acceptance.supervisor.stopbounds import SCRIPT_GRACE_S, STOP_SLACK_S
from pty_acceptance.supervisor.tokens import tagged_sh


class Sessions:
    """Raw sessions of one test and their footprints; close() ends them all, waits
    until they are gone and stops what the supervisor left running."""

    def __init__(self, bus: Systemd, peer, socket_path: str, owner: Owner):
        self.bus, self.peer, self.path, self.owner = bus, peer, socket_path, owner
        self.open_sessions: list[RawSession] = []
        self.footprints: list[Footprint] = []
        self.refused: list[str] = []  # tokens of sessions whose STARTED named a unit not ours

    def start(self, argv: list[str], runtime_s: int = 60, fds: list[int] | None = None) -> RawSession:
        """Open an authenticated session and send START (fds=None: one cwd descriptor)."""
        s = RawSession(self.peer, self.path).open()
        self.open_sessions.append(s)
        s.start(argv, runtime_s, fds=fds)
        return s

    def started(self, s: RawSession, token: str, deadline_s: float = 10) -> Footprint:
        """Wait for STARTED and take the footprint (fails the test if there is none)."""
        out = s.wait_started(deadline_s)
        try:
            fp = Footprint.capture(self.bus, cast(str, out.unit), token, self.owner)  # wait_started: named
        except HostReadError as e:
            raise Unreadable(f"SUITE-3: cannot read the live session: {e}") from None
        except NotOurs:
            s.close()  # the supervisor ends a session whose connection closes
            self.refused.append(token)
            raise
        self.footprints.append(fp)
        return fp

    def attempt(self, token: str, runtime_s: int = 60, deadline_s: float = 10) -> "Attempt":
        """One start attempt of `sleep 60` (tagged) that may be refused at HELLO or at
        START; a session that does start is taken into account like any other."""
        s = RawSession(self.peer, self.path)
        try:
            s.open()
        except SessionError:
            return Attempt.from_hello(s.hello or {})
        self.open_sessions.append(s)
        s.start(tagged_sh(f"exec sleep 60.{token}", token), runtime_s)
        out = s.read(lambda o: o.unit or o.error or o.exit, deadline_s)
        if out.unit:
            self.started(s, token)
        return Attempt(error=out.error, unit=out.unit, session=s,
                       text=f"START answered: {out.describe()}")

    def close(self) -> list[str]:
        """End every session (close its connection), wait until all are gone; stop
        leftover units. Returns what had to be removed by force."""
        for s in self.open_sessions:
            s.close()
        deadline = max([fp.stop_bound_s() for fp in self.footprints] or [0.0])
        _, left = wait_gone(self.bus, self.footprints, deadline)
        out = [f"{unit}: {what}" for unit, what in left.items()]
        for fp in self.footprints:  # killed first: a stop past the suite's bound may never end
            if fp.unit in left:     # by itself (TimeoutStopSec=infinity, CONC-3)
                out += [f"{fp.unit}: {spared}" for spared in fp.kill_survivors() or []]
        force_stop(self.bus, list(left))
        for token in self.refused:
            out += end_refused(token)
        return out


def end_refused(token: str, deadline_s: float = SCRIPT_GRACE_S + STOP_SLACK_S + 6) -> list[str]:
    """A session whose STARTED named a unit the suite refused: its connection is
    closed (the supervisor ends the session); what carries its token is waited
    for and reported, never signalled: it runs in no unit the suite vouched
    for, and any process of the service user may carry the token (SUITE-4)."""
    end = time.monotonic() + deadline_s
    while (left := processes.token_processes(token)) and time.monotonic() < end:
        time.sleep(POLL_S)  # poll interval
    if not left:
        return []
    shown = "; ".join(f"pid {pid} {line!r}" for pid, (_, line) in sorted(left.items()))
    return [terminal.escape(f"refused session {token}: still alive {deadline_s:g} s after its connection "
                            f"was closed, not signalled (in no unit of the suite's): {shown}")]


@dataclass
class Attempt:
    error: tuple[int, str] | None = None
    unit: str | None = None
    session: RawSession | None = None
    text: str = ""

    @classmethod
    def from_hello(cls, frame: dict) -> "Attempt":
        if frame.get("name") == "ERROR":
            err = p.parse_error(p.Frame(frame["type"], bytes.fromhex(frame["payload"])))
            return cls(error=err, text=f"HELLO answered ERROR {err}")
        return cls(text=f"HELLO answered {frame}")

    def refused_with(self, code: int) -> bool:
        return self.unit is None and self.error is not None and self.error[0] == code
