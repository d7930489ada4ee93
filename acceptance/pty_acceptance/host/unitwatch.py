"""Watches on systemd's Manager signals. UnitWatch: which session units were
created while it was open, so "a rejected START created no unit" is seen
even for a unit that existed only for a moment. JobWatch: which units had a
job queued while it was open, so "the supervisor stopped the unit" (a stop
job ran) is told apart from "its processes ended" (none did).

It has a bus connection of its own (signals never mix with another caller's
replies). Every read is ordered after the signals systemd sent before it by a
round trip, so nothing created earlier is missed.
"""

from __future__ import annotations

import re
import time
from collections import deque
from typing import Self, cast

from jeepney import HeaderFields, MatchRule
from jeepney.bus_messages import message_bus

from pty_acceptance.host.bus import Systemd, _unwrap
from pty_acceptance.host.systemd import SESSION_GLOB, STRICT_SESSION

POLL_MAX_S = 0.1


class ManagerSignals:
    """One of systemd's Manager signals (`MEMBER`), watched on a bus connection of
    its own from __enter__ on. Only what systemd's own connection sent counts: a
    signal may also be sent to this connection directly by anyone on the bus (a
    unicast signal needs no match rule), so each is checked against the unique
    name that owns org.freedesktop.systemd1."""

    MEMBER = ""

    def __init__(self) -> None:
        self.queue: deque = deque()
        self.sd: Systemd | None = None
        self.handle = None
        self.owner = ""

    @property
    def rule(self) -> dict:
        return dict(type="signal", interface="org.freedesktop.systemd1.Manager",
                    member=self.MEMBER, path="/org/freedesktop/systemd1")

    def open(self) -> None:
        self.sd = Systemd.connect()
        try:
            conn = self.sd.conn
            self.handle = conn.filter(MatchRule(**self.rule), queue=self.queue)
            rule = MatchRule(sender="org.freedesktop.systemd1", **self.rule)
            _unwrap("AddMatch", conn.send_and_get_reply(message_bus.AddMatch(rule), timeout=5))
            (self.owner,) = _unwrap("GetNameOwner", conn.send_and_get_reply(
                message_bus.GetNameOwner("org.freedesktop.systemd1"), timeout=5))
            self.sd.call("Subscribe")
        except BaseException:
            self.close()
            raise

    def taken(self) -> list[tuple]:
        """The bodies of the signals systemd sent that arrived since the last call."""
        out = []
        while self.queue:
            msg = self.queue.popleft()
            if msg.header.fields.get(HeaderFields.sender) == self.owner:
                out.append(msg.body)
        return out

    def round_trip(self):
        """ListUnitsByPatterns of the session units: its reply comes after every
        signal systemd sent before it, so they have all arrived."""
        return cast(Systemd, self.sd).call("ListUnitsByPatterns", "asas", ([], [SESSION_GLOB]))[0]

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        if self.sd is not None:
            self.sd.close()
            self.sd = None

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class UnitWatch(ManagerSignals):
    """Use as a context manager. `pattern` chooses the names counted (strict
    session names by default); `exclude` names never counted (the supervisor)."""

    MEMBER = "UnitNew"

    def __init__(self, pattern: re.Pattern = STRICT_SESSION, exclude=()):
        super().__init__()
        self.pattern, self.exclude = pattern, frozenset(exclude)
        self.seen: list[str] = []   # every counted name since open, in order, once
        self.taken_n = 0            # how many of them new_units() has returned

    def counted(self, name: str) -> bool:
        return bool(self.pattern.match(name)) and name not in self.exclude

    def _sync(self) -> set[str]:
        """Take every UnitNew that arrived; return the counted units loaded now."""
        rows = self.round_trip()
        for body in self.taken():
            name = body[0]
            if self.counted(name) and name not in self.seen:
                self.seen.append(name)
        return {r[0] for r in rows if self.counted(r[0])}

    def new_units(self) -> list[str]:
        """Names created since the last call (since open, the first time)."""
        self._sync()
        new, self.taken_n = self.seen[self.taken_n:], len(self.seen)
        return new

    def sync(self) -> tuple[set[str], set[str]]:
        """(every name created since open, the counted units loaded now)."""
        loaded = self._sync()
        return set(self.seen), loaded

    def wait_gone(self, names: set[str], deadline_s: float) -> set[str]:
        """Poll until none of `names` is loaded; return those still loaded at the deadline."""
        end = time.monotonic() + deadline_s
        delay = 0.01
        while True:
            left = names & self._sync()
            if not left or time.monotonic() > end:
                return left
            time.sleep(delay)  # poll interval, not a wait for an outcome
            delay = min(delay * 2, POLL_MAX_S)


class JobWatch(ManagerSignals):
    """Use as a context manager: every unit a job was queued for (JobNew) from
    __enter__ on. Opened once the sessions are STARTED, so their start jobs are
    behind it: a job for a running session unit is a stop (only root may queue
    one; StopUnit is how the supervisor ends a session, CONC-3). The service
    user, who may end the processes of a session itself, never makes one."""

    MEMBER = "JobNew"

    def __init__(self) -> None:
        super().__init__()
        self.units: set[str] = set()

    def jobs_for(self) -> set[str]:
        """Every unit a job was queued for since open (a round trip first)."""
        self.round_trip()
        self.units.update(str(body[2]) for body in self.taken())
        return set(self.units)


def watch_problems(created: set[str], accepted: set[str]) -> list[str]:
    """What a UnitWatch saw around STARTs: every accepted unit must have been
    announced (otherwise the watch was blind, and "no unit for a rejected
    START" proves nothing), and nothing else may have been created."""
    problems = []
    unseen = accepted - created
    if unseen:
        problems.append(f"the unit watch never saw UnitNew for the accepted {sorted(unseen)}, so it "
                        "cannot show that a rejected START created no unit")
    extra = created - accepted
    if extra:
        problems.append(f"session units were created beyond the accepted ones: {sorted(extra)}")
    return problems

