"""A stop as the stopped command sees it: SIGTERM first, then at least the
inventory's grace before SIGKILL (CONC-3, CGROUP-1).

The session's command (COMMAND, the suite's execute-only Python carrying the
session's token, judged untraced, not dumpable and one thread once it runs) catches
SIGTERM and keeps running, and ignores SIGHUP (the hangup of its PTY when
script(1) goes, or a unit's SendSIGHUP=). On each SIGTERM it renames itself
(prctl PR_SET_NAME) to NOTICE. The suite watches it from outside: it holds the
command by a pidfd (readable the moment it exits, whatever its pid becomes
later) and reads its comm every TICK_S from the moment it caused the stop.
So it knows when the TERM arrived (the comm changed), when the command was
killed (the pidfd) and whether the command saw SIGTERM at all; of the
command it reads only its comm, bounded. A command killed with its comm
unchanged never saw SIGTERM (KillSignal=SIGKILL, or SIGHUP it would have
obeyed).

script(1) sits between the unit and the command (script -> sh -c -> the
command): the command's SIGTERM is systemd's (KillMode=control-group signals
every process of the cgroup). script(1) itself, on SIGTERM, SIGKILLs its
child, the sh, after 2 s and exits; systemd then gives the rest of the cgroup
a fresh TimeoutStopSec before its SIGKILL. So on the reference host (5 s) the
command lives about 7 s after its SIGTERM, 5 s where script(1) dies at once
(SendSIGHUP=); the least it can get is the unit's TimeoutStopSec.
"""
from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass

from pty_acceptance.host import proc
from pty_acceptance.host.polling import poll
from pty_acceptance.host.processes import processes_in, token_processes
from pty_acceptance.supervisor import session_probe
from pty_acceptance.supervisor.session_footprint import Footprint, HostReadError
from pty_acceptance.supervisor.stopbounds import StopBounds

NOTICE = "pty-acc-TERM"  # the command's comm once it has seen SIGTERM (at most 15 bytes)
TICK_S = 0.005           # how often the comm is read while the stop runs
READY_S = 10.0           # the command runs with its handlers in place by then
SIGHUP, SIGTERM = 1, 15
# prctl(PR_SET_NAME), not a write of /proc/self/comm: the command is not dumpable, so its
# /proc files are root's
PROGRAM = f"""import ctypes, signal, time
libc = ctypes.CDLL(None)
def seen(signum, frame):
    libc.prctl(15, b"{NOTICE}", 0, 0, 0)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.signal(signal.SIGTERM, seen)
while True:
    time.sleep(60)
"""


def argv(python: str, token: str) -> list[str]:
    """The command's argv once the session's sh exec'd it (`python`: as the sh names it)."""
    return [python, "-I", "-c", PROGRAM, f"pty-acceptance-term-{token}"]


def command(python: str, token_field: str = "{t}") -> str:
    """The sh script of a session whose command notes SIGTERM and ignores it
    (an Ending's script: `{t}` becomes the session's token, in the argv): `python` is
    the suite's execute-only interpreter as the session's working directory reaches it
    (session_probe.staged_interpreter), so that no process of the service user's can
    attach to the command after its exec (a blind red team's ninth pass attached to an
    ordinary python3, named it NOTICE and parked an injected thread past the SIGKILL)."""
    return f"exec {python} " + " ".join(f"'{a}'" for a in argv(python, token_field)[1:])


def _mask(status: dict[str, str], key: str) -> int:
    return int(status.get(key, "0"), 16)


@dataclass
class Held:
    """The session's command, held by a pidfd from before the stop."""
    pid: int
    created: float
    pidfd: int
    comm: str  # its comm when it was held

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


def hold(fp: Footprint, token: str, python: tuple[str, tuple[int, int]], deadline_s: float = READY_S) -> Held:
    """The command in the session's cgroup that carries the token, once it
    catches SIGTERM and ignores SIGHUP (/proc/<pid>/status SigCgt, SigIgn), and
    is the suite's own (`python`: the interpreter as the sh names it, its
    identity): not dumpable, untraced, one thread (session_probe.admission_problems).
    TimeoutError when it does not come to be; NotHeld when it is not the suite's."""
    def ready():
        inside = processes_in(fp.path)
        for pid, (created, _) in token_processes(token).items():
            if pid not in inside:  # the token only finds: the command runs in the session's cgroup
                continue
            try:
                st = proc.status(pid)
            except OSError:
                continue
            if _mask(st, "SigCgt") >> (SIGTERM - 1) & 1 and _mask(st, "SigIgn") >> (SIGHUP - 1) & 1:
                return pid, created
        return None

    pid, created = poll(ready, deadline_s, f"{fp.unit}: its command catching SIGTERM",
                        lambda: f"processes in its cgroup: {processes_in(fp.path)}")
    pidfd = proc.pidfd_open(pid)
    if not proc.alive(pid, created):  # the pid named another process by the time it was held
        os.close(pidfd)
        raise TimeoutError(f"{fp.unit}: its command (pid {pid}) ended before the stop")
    try:
        wrong = session_probe.admission_problems(pid, python[1], argv(python[0], token))
    except OSError as e:
        wrong = [f"it cannot be read ({e.strerror or e})"]
    if wrong:
        os.close(pidfd)
        raise NotHeld(f"{fp.unit}: its command (pid {pid}) is not the one the suite started: {'; '.join(wrong)}")
    fp.remember()
    try:
        comm = proc.comm(pid)
    except OSError:
        comm = "?"
    return Held(pid, created, pidfd, comm)


class NotHeld(HostReadError):  # run_endings takes it as the ending's problem
    """The session's command is not one whose comm the suite can believe."""


@dataclass
class Seen:
    """What the command went through, in seconds from the moment the stop was caused."""
    term_s: float | None   # its comm said NOTICE (it had seen SIGTERM)
    killed_s: float | None  # it was gone (None: still alive at the deadline)
    comm: str              # its last comm read
    deadline_s: float

    def describe(self) -> str:
        term = "never" if self.term_s is None else f"{self.term_s:.3f} s"
        end = f"still alive at {self.deadline_s:g} s" if self.killed_s is None else \
            f"killed at {self.killed_s:.3f} s"
        grace = "" if self.term_s is None or self.killed_s is None else \
            f", {self.killed_s - self.term_s:.3f} s after SIGTERM"
        return f"command: SIGTERM seen {term}, {end}{grace} (last comm {self.comm!r})"

    def problems(self, bounds: StopBounds) -> list[str]:
        """CONC-3: SIGTERM first, then at least bounds.term_grace_s before the kill."""
        if self.killed_s is None:
            return [f"the command was still alive {self.deadline_s:g} s after the stop was caused "
                    f"(comm {self.comm!r}; SIGTERM "
                    f"{'never seen' if self.term_s is None else f'seen at {self.term_s:.3f} s'})"]
        if self.term_s is None:
            return [f"the command was killed {self.killed_s:.3f} s after the stop was caused without "
                    f"having noted a SIGTERM (its comm stayed {self.comm!r}): no SIGTERM came first, or "
                    f"SIGKILL followed it too soon to act on; a stop is TERM, then KILL"]
        if self.killed_s - self.term_s < bounds.term_grace_s:
            return [f"the command saw SIGTERM {self.term_s:.3f} s after the stop was caused and was "
                    f"killed {self.killed_s - self.term_s:.3f} s later, less than "
                    f"session_stop.term_grace_s = {bounds.term_grace_s:g} s"]
        return []


def watch(held: Held, since: float, deadline_s: float) -> Seen:
    """From `since` (the moment the stop was caused) until the command is gone
    or deadline_s has passed: when it saw SIGTERM, when it was killed. Closes
    the pidfd."""
    term_s, comm, end = None, held.comm, since + deadline_s
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return Seen(term_s, None, comm, deadline_s)
            if select.select([held.pidfd], [], [], min(TICK_S, left))[0]:
                return Seen(term_s, time.monotonic() - since, comm, deadline_s)
            if term_s is None:
                try:
                    comm = proc.comm(held.pid)
                except OSError:
                    continue  # gone: the pidfd says so next
                if comm == NOTICE and proc.pidfd_alive(held.pidfd):  # still that very process
                    term_s = time.monotonic() - since
    finally:
        held.close()
