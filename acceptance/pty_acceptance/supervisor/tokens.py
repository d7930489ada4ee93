"""Tagged commands: a random token the suite puts in a session's argv, so that
its processes, descendants that escaped its cgroup included, are found and
reported when it ends (CONC-2, CONC-3, CGROUP-1). The token only finds and
reports: any process of the service user may carry it, so nothing is
signalled for carrying it (SUITE-4)."""
from __future__ import annotations

import secrets


def new_token() -> str:
    """Twelve random digits: usable inside a number, so `sleep 300.<token>1`
    is a sleep of 300 s whose own argv carries the token."""
    return f"{secrets.randbelow(10 ** 12):012d}"


def tagged_sh(script: str, token: str) -> list[str]:
    """argv of `/bin/sh -c script` whose $0 carries the token."""
    return ["/bin/sh", "-c", script, f"pty-acceptance-{token}"]
