"""`systemd-analyze verify`, `security` and `syscall-filter`, run as the
unprivileged build user in a unit of its own (userunit.py, SUITE-4):
reading unit definitions needs no root. The run is behind userunit's gate
(userunit.run_gated: an execute-only copy of the host's Python, staged for
the run) and traced by root from its first instruction: systemd-analyze is an ordinary
dumpable program of the user's, and a blind red team's eighth pass attached
to it with ptrace and made `verify` exit 0 on a defective drop-in (CUT-4);
a run another process interfered with (host/killtrace.py) is no answer."""

from __future__ import annotations

import pwd
import re
from dataclasses import dataclass

from pty_acceptance.host import programs, userunit

EXPOSURE = re.compile(r"Overall exposure level for (\S+): ([0-9.]+) (\S+)")
DEADLINE_S = 60.0


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    output: str


def _run(user: str, argv: list[str], deadline_s: float = DEADLINE_S) -> Result:
    try:
        acct = pwd.getpwnam(user)
    except KeyError:
        return Result(argv, 1, f"user {user!r} does not exist on this host")
    job = userunit.Job(purpose=f"systemd-analyze {argv[1]}", argv=tuple(argv), account=acct, cwd="/",
                       env={**programs.ROOT_ENV, "HOME": "/"}, umask=0o077, output_kept=1 << 20)
    try:
        ended = userunit.run_gated(job, deadline_s, "analyze")
    except userunit.UnitError as e:
        return Result(argv, 125, f"could not be run: {e}")
    if ended.traced is not None and not ended.traced.passed:
        return Result(argv, 125, "its run cannot be taken for an answer: " + "; ".join(ended.traced.problems()))
    text = ended.output.decode("utf-8", "replace")
    if ended.timed_out:
        return Result(argv, 124, f"no answer within {deadline_s:g} s")
    if ended.signal is not None:
        return Result(argv, 128 + ended.signal, text)
    return Result(argv, ended.exit_status if ended.exit_status is not None else 125, text)


def verify(user: str, unit_file: str) -> Result:
    return _run(user, [programs.path("systemd-analyze"), "verify", "--", unit_file])


def security(user: str, unit: str) -> tuple[Result, tuple[float, str] | None]:
    res = _run(user, [programs.path("systemd-analyze"), "security", "--no-pager", "--", unit])
    m = EXPOSURE.search(res.output)
    return res, ((float(m.group(2)), m.group(3)) if m else None)


def syscall_groups(user: str) -> tuple[Result, dict[str, list[str]]]:
    """This host's systemd's system call groups (`systemd-analyze syscall-filter`):
    {"@group": [its members, system calls and @groups]}, empty when unreadable."""
    res = _run(user, [programs.path("systemd-analyze"), "syscall-filter", "--no-pager"])
    groups: dict[str, list[str]] = {}
    members: list[str] | None = None
    for line in res.output.splitlines() if res.returncode == 0 else []:
        word = line.strip()
        if line.startswith("@"):
            members = groups.setdefault(word, [])
        elif members is not None and word and not word.startswith("#"):
            members.append(word)
    return res, groups


def expand_syscalls(words: list[str], groups: dict[str, list[str]]) -> set[str]:
    """The system calls `words` (names and @groups, SystemCallFilter='s form) allow;
    KeyError for a group the host's systemd does not know."""
    out: set[str] = set()
    todo, seen = list(words), set()
    while todo:
        w = todo.pop()
        if not w.startswith("@"):
            out.add(w)
        elif w not in seen:
            seen.add(w)
            todo += groups[w]
    return out
