"""Orphan cleanup (static part): every loaded session-like unit is a strict
session unit bound to the supervisor, so the supervisor's cleanup can find it.

ORPHAN-1 every loaded unit matching `opencode-pty-*.service` other than the
         supervisor is named `opencode-pty-<32 lowercase hex>.service` and has
         exactly one BindsTo=, the supervisor.
"""

import pytest

from pty_acceptance.systemd import STRICT_SESSION, SystemdError, show_or_fail, units_matching


@pytest.mark.requirement("ORPHAN-1")
def test_every_session_like_unit_is_strict_and_bound_to_the_supervisor(inv, evidence):
    supervisor = inv.units["supervisor"]
    try:
        names = [n for n in units_matching("opencode-pty-*.service") if n != supervisor]
    except SystemdError as e:
        pytest.fail(f"ORPHAN-1: cannot list units: {e}", pytrace=False)
    evidence("loaded opencode-pty-*.service units", names or "none")
    problems = []
    for name in names:
        unit = show_or_fail(name, "ORPHAN-1")
        binds = unit.words("BindsTo")
        evidence(name, f"BindsTo={binds} ActiveState={unit.get('ActiveState')}")
        if not STRICT_SESSION.match(name):
            problems.append(f"{name} is not a strict session name")
        if binds != [supervisor]:
            problems.append(f"{name} has BindsTo={binds}, expected exactly [{supervisor}]")
    assert not problems, "ORPHAN-1: " + "; ".join(problems)
