"""Orphan cleanup: nothing of a session survives the supervisor, and the
cleanup touches nothing but strict session units bound to it.

ORPHAN-1 (static) every loaded unit matching `opencode-pty-*.service` other
         than the supervisor is named `opencode-pty-<32 lowercase hex>.service`
         and has exactly one BindsTo=, the supervisor.
ORPHAN-1 (dynamic) with two live sessions and five units of the suite's
         (tagged), the supervisor is restarted (RestartUnit). Once the new
         invocation is ready: the old sessions' units, cgroups and processes
         are gone; a planted strict-name unit bound to the supervisor (the
         orphan a crashed invocation would leave; systemd restarts it with
         the supervisor, so only the new invocation's cleanup ends it) is not
         active; a look-alike `opencode-pty-lookalike-<tag>` bound to the
         supervisor is active; a strict-name unit bound to the supervisor
         and to an anchor unit of the suite's as well (BindsTo= contains the
         supervisor but is not exactly it: CONC-3's exact BindsTo) is active
         (systemd restarts it with the supervisor too, so only a cleanup that
         matches "contains" ends it); a strict-name unit not bound to it is
         untouched (same invocation). The suite removes all of them and
         brings the supervisor back on every path.
"""

import time

import pytest

from pty_acceptance.host.polling import poll
from pty_acceptance.supervisor.decoy_units import Decoy, strict_session_name
from pty_acceptance.supervisor.session_footprint import Footprint
from pty_acceptance.supervisor.session_gone import wait_gone
from pty_acceptance.supervisor.supervisor_up import wait_supervisor_ready
from pty_acceptance.supervisor.tokens import new_token, tagged_sh
from pty_acceptance.host.systemd import STRICT_SESSION, SystemdError, show_or_fail, units_matching
from pty_acceptance.gate.checks import collect, expect, reading


@pytest.mark.requirement("ORPHAN-1")
def test_every_session_like_unit_is_strict_and_bound_to_the_supervisor(inv, evidence):
    supervisor = inv.units.supervisor
    with reading("ORPHAN-1", "cannot list units", SystemdError):
        names = [n for n in units_matching("opencode-pty-*.service") if n != supervisor]
    evidence("loaded opencode-pty-*.service units", names or "none")
    with collect("ORPHAN-1") as problems:
        for name in names:
            unit = show_or_fail(name, "ORPHAN-1")  # not Testinfra's systemd_properties: it drops empty values
            binds = unit.words("BindsTo")
            evidence(name, f"BindsTo={binds} ActiveState={unit.get('ActiveState')}")
            problems.when(not STRICT_SESSION.match(name), f"{name} is not a strict session name")
            problems.when(binds != [supervisor], f"{name} has BindsTo={binds}, expected exactly [{supervisor}]")


# ------------------------------------------------------------------ dynamic part
ACTIVE_AGAIN_S = 10   # units bound to the supervisor are restarted by systemd with it


@pytest.mark.requirement("ORPHAN-1")
def test_a_restart_leaves_no_old_session_and_touches_no_other_unit(inv, bus, run_tag, sessions,
                                                                   supervisor_guard, evidence):
    name = supervisor_guard
    tokens = [new_token(), new_token()]
    live = [sessions.start(tagged_sh(f"exec sleep 60.{t}", t)) for t in tokens]
    fps = [sessions.started(s, t) for s, t in zip(live, tokens, strict=True)]
    orphan = Decoy(bus, strict_session_name(), run_tag, [name], new_token())  # must be cleaned
    lookalike = Decoy(bus, f"opencode-pty-lookalike-{run_tag}.service", run_tag, [name])
    unbound = Decoy(bus, strict_session_name(), run_tag)              # strict name, not bound
    anchor = Decoy(bus, f"pty-acceptance-anchor-{run_tag}.service", run_tag)
    bound_twice = Decoy(bus, strict_session_name(), run_tag, [name, anchor.name])  # not exactly bound
    decoys = [orphan, lookalike, unbound, anchor, bound_twice]  # started in this order
    try:
        for unit in decoys:
            unit.start()
        bound = max(fp.stop_bound_s() for fp in fps)   # the sessions' bound holds for all
        fps.append(Footprint.capture(bus, orphan.name, orphan.token, None))  # the suite's own decoy
        before = {u.name: u.state() for u in decoys}
        evidence("suite units before", before)
        old = bytes(bus.properties(name)["InvocationID"])
        t0 = time.monotonic()
        bus.call("RestartUnit", "ss", (name, "replace"))
        wait_supervisor_ready(bus, name, inv.socket, invocation=old)
        evidence("supervisor ready again", f"{time.monotonic() - t0:.2f} s after RestartUnit")
        took, left = wait_gone(bus, fps, bound, since=t0)
        evidence("old sessions and the planted orphan",
                 [f"{fp.describe()} gone after {took.get(fp.unit, -1):.2f} s" for fp in fps])
        after = {lookalike.name: _active_again(lookalike), bound_twice.name: _active_again(bound_twice),
                 unbound.name: unbound.state()}
        evidence("suite units after", after)
    finally:
        for unit in reversed(decoys):
            unit.remove()
    expect(not left, "ORPHAN-1", f"expected no session of the old supervisor invocation (nor the "
                                 f"planted orphan {orphan.name}, strict name bound to {name}, which systemd "
                                 f"restarts with it) once the new one is ready, the host still had: {left}")
    expect(after[lookalike.name] and after[lookalike.name]["ActiveState"] == "active", "ORPHAN-1",
           f"{lookalike.name} (not a strict session name, bound to {name}) must never be "
           f"touched by the cleanup; after the restart it was {after[lookalike.name]}")
    expect(after[bound_twice.name] and after[bound_twice.name]["ActiveState"] == "active", "ORPHAN-1",
           f"{bound_twice.name} (strict name, BindsTo={bound_twice.binds_to}: bound to "
           f"{name} and to another unit, not exactly to {name}) must never be touched by the "
           f"cleanup; after the restart it was {after[bound_twice.name]}")
    expect(after[unbound.name] == before[unbound.name], "ORPHAN-1",
           f"{unbound.name} (strict name, not bound to {name}) must not be cleaned; it was "
           f"{before[unbound.name]} before the restart and {after[unbound.name]} after")


def _active_again(unit):
    """The state once systemd has restarted the unit (its last state at the deadline)."""
    try:
        return poll(lambda: (st := unit.state()) and st["ActiveState"] == "active" and st,
                    ACTIVE_AGAIN_S, "active")
    except TimeoutError:
        return unit.state()
