"""A stop is TERM, then KILL, as the stopped command sees it.

CONC-3 (and CGROUP-1) two sessions whose command catches SIGTERM (noting it
       in its own comm), ignores it and ignores SIGHUP are ended side by side,
       one by a STOP frame and one by a disconnect. Watched from outside (a
       pidfd and its comm, from the moment the suite caused the end): the
       command sees SIGTERM first, lives at least the inventory's
       session_stop.term_grace_s after it, and is then killed; the unit, its
       cgroup and its processes are gone within the suite's bound
       (session_stop.timeout_s + script(1)'s 2 s + slack), never a bound read
       from the host. A supervisor that SIGKILLs a few ms after SIGTERM, or
       never sends SIGTERM, fails; so does one whose units end with no stop
       job of systemd's (session_endings: the service user may play the stop
       on its own processes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import cast

import pytest

from pty_acceptance.gate.checks import expect_none
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.host import scratch
from pty_acceptance.supervisor import session_probe, termgrace
from pty_acceptance.supervisor.session_clients import DEFAULT_CWD as SESSION_CWD
from pty_acceptance.supervisor.session_endings import Ending, asks_stop, run_endings
from pty_acceptance.supervisor.session_footprint import Footprint


@dataclass
class Watched(Ending):
    """An ending whose command is held (termgrace.hold) before the end is caused."""
    python: tuple[str, tuple[int, int]] = ("", (0, 0))  # the staged interpreter as the session names it
    held: termgrace.Held | None = None


def _hold(e: Watched) -> None:
    e.held = termgrace.hold(cast(Footprint, e.fp), e.token, e.python)


def _judge(e: Watched) -> None:
    """Watch the command from the moment the end was caused; its grace is judged."""
    fp = cast(Footprint, e.fp)
    if e.held is None:
        e.problems.append("the command never ran with its SIGTERM handler: no stop to watch")
        return
    seen = termgrace.watch(e.held, cast(float, e.t0), fp.stop_bound_s())
    e.facts.append(seen.describe() + f"; bounds: grace at least {fp.bounds.term_grace_s:g} s, "
                                     f"gone within {fp.stop_bound_s():g} s")
    e.problems.extend(seen.problems(fp.bounds))


@asks_stop
def stop_frame(e: Watched):
    e.caused()
    e.s.send(p.encode(p.T.STOP))
    _judge(e)
    e.want_exit(e.stream_end(deadline_s=e.fp.stop_bound_s()))


@asks_stop
def disconnect(e: Watched):
    e.caused()
    e.s.close()
    _judge(e)


@pytest.mark.requirement("CONC-3", "CGROUP-1")
def test_a_stopped_command_sees_sigterm_and_its_grace_before_sigkill(sessions, evidence):
    path, ident = session_probe.staged_interpreter("pty-acceptance-term-")
    python = (os.path.relpath(path, SESSION_CWD), ident)  # as the session's sh reaches it
    endings = [Watched("STOP frame", termgrace.command(python[0]), stop_frame, python=python),
               Watched("disconnect", termgrace.command(python[0]), disconnect, python=python)]
    try:
        problems = run_endings(sessions, endings, evidence, prepare=_hold)
    finally:
        for e in endings:  # a watch that never ran leaves its pidfd open
            if e.held is not None:
                e.held.close()
        scratch.remove(os.path.dirname(path))
    expect_none(problems, "CONC-3", sep=" | ")
