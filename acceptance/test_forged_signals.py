"""Forged systemd signals: cleanup is forge-proof (CONC-2).

CONC-2 a systemd signal (PropertiesChanged, JobRemoved, UnitRemoved) sent to
       the supervisor's bus connections by any sender other than systemd
       neither ends a live session, nor makes the supervisor send EXIT, nor
       frees the session's slot.

Sixteen sessions run (every slot taken), each a shell that echoes the lines
it reads. Processes of the service user and of another local user (nobody,
when the host has one), each in a transient unit of its own, send for every
session unit systemd's own signals saying it ended cleanly
(PropertiesChanged ActiveState=inactive SubState=dead, and ExecMainCode=1
ExecMainStatus=0 Result=success; JobRemoved done; UnitRemoved), addressed
to every unique bus name the supervisor's processes hold (`busctl emit
--destination`): half the sessions by one user, half by the other. A copy
of every forgery goes to a connection of the suite's own, which shows
whether this host's bus delivers them at all (recorded). Then, for as long
as the suite gives a real end to be reported, no session gets EXIT or ERROR
and no stream ends; after that every session still echoes a line, every
unit is still active, and a seventeenth start is still refused with
CAPACITY.
"""

from __future__ import annotations

import grp
import pwd
import secrets
from typing import cast

import pytest

from pty_acceptance.gate.failures import fail
from pty_acceptance.host import terminal
from pty_acceptance.host.bus import BusError
from pty_acceptance.supervisor import forgery
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.peer import Agent
from pty_acceptance.supervisor.tokens import new_token, tagged_sh

CAPACITY = 16
ECHO = "while read -r l; do printf 'echo:%s\\n' \"$l\"; done"  # sh's $0 keeps the token
ECHO_DEADLINE_S = 10
OTHER_USER = "nobody"


def _other_user(service_user: str) -> tuple[str, str] | None:
    """(user, group) of a local user that is neither root nor the service user."""
    try:
        pw = pwd.getpwnam(OTHER_USER)
    except KeyError:
        return None
    if pw.pw_uid == 0 or pw.pw_name == service_user:
        return None
    return pw.pw_name, grp.getgrgid(pw.pw_gid).gr_name


def _echoes(s, line: str) -> bool:
    """The session's command reads `line` and its answer comes back (within ECHO_DEADLINE_S)."""
    want = f"echo:{line}".encode()
    s.send(p.encode(p.T.DATA, line.encode() + b"\n"))
    try:
        s.read(lambda o: want in o.output or o.exit or o.error or o.closed, ECHO_DEADLINE_S)
    except TimeoutError:
        pass
    return want in s.outcome.output


@pytest.mark.requirement("CONC-2")
def test_forged_systemd_signals_neither_end_a_session_nor_free_its_slot(inv, bus, sessions, units, run_tag,
                                                                         evidence):
    tokens = [new_token() for _ in range(CAPACITY)]
    live = [sessions.start(tagged_sh(ECHO, t)) for t in tokens]
    fps = [sessions.started(s, t) for s, t in zip(live, tokens, strict=True)]
    try:
        names = forgery.supervisor_names(bus, inv.units.supervisor)
    except BusError as e:
        fail(f"CONC-2: the supervisor's bus connections cannot be listed: {e}")
    evidence("the supervisor's bus connections", names or "none")
    if not names:
        fail(f"CONC-2: no process of {inv.units.supervisor} holds a system bus connection: the "
             "supervisor could not hear systemd at all")

    forgers = [(inv.service_user, inv.service_group)]
    other = _other_user(inv.service_user)
    forgers += [other] if other else []
    evidence("forging users", [u for u, _ in forgers] + ([] if other else [f"(no user {OTHER_USER})"]))
    share = -(-CAPACITY // len(forgers))
    with forgery.Witness() as witness:
        sent = 0
        for i, (user, group) in enumerate(forgers):
            mine = fps[i * share:(i + 1) * share]
            unit = units(f"pty-acceptance-forger-{i}-{run_tag}.service", user, group)
            argvs = forgery.emit_argvs([witness.name, *names], [fp.unit for fp in mine])
            results = cast(Agent, unit.agent).call("run", argvs=argvs, timeout=10)[0]["results"]
            failed = [(a[3], a[6], r) for a, r in zip(argvs, results, strict=True) if r["status"] != 0]
            sent += len(argvs) - len(failed)
            evidence(f"forged by {user} (uid {unit.info['uid']}, {unit.name})",
                     f"{len(argvs)} signals for {len(mine)} sessions to {1 + len(names)} connections, "
                     f"{len(failed)} not sent" + (f": {terminal.escape(repr(failed[:3]))}" if failed else ""))
        to_witness = sum(len(forgery.forgeries(fp.unit)) for fp in fps)
        delivered = witness.collect(to_witness)
        evidence("delivered by the bus to a connection of the suite's (root)",
                 f"{delivered} of {to_witness}; {dict((k, sorted(v)) for k, v in witness.got.items())}")
    if not sent:
        evidence("forgery", "nothing could be sent: this host's bus refuses the forgers")

    ended = forgery.quiet_for(live, forgery.WATCH_S)
    evidence(f"sessions ended within {forgery.WATCH_S:g} s of the forgery", len(ended))
    problems = [f"{fp.unit} ended: {terminal.escape(ended[s])}" for s, fp in zip(live, fps, strict=True)
                if s in ended]
    for s, fp in zip(live, fps, strict=True):
        if s in ended:
            continue
        line = f"ping-{secrets.token_hex(4)}"
        if not _echoes(s, line):
            problems.append(f"{fp.unit} no longer echoes: {s.outcome.describe()}")
        state = (bus.properties(fp.unit) or {}).get("ActiveState")
        if state != "active":
            problems.append(f"{fp.unit} is {state or 'no longer loaded'}, not active")
    seventeenth = sessions.attempt(new_token())
    evidence("a 17th start after the forgery", seventeenth.text)
    if not seventeenth.refused_with(p.Code.CAPACITY):
        problems.append(f"a 17th start was not refused with CAPACITY (a forgery freed a slot): "
                        f"{seventeenth.text}")
    if problems:
        fail("CONC-2: forged systemd signals (sent by " + ", ".join(u for u, _ in forgers) + "): "
             + " | ".join(problems))
