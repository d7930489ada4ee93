"""Who ended the processes of a run of the service user's, from strace's record.

A run the suite judges by what its processes did (PLUGIN-1's harness runs:
nothing left running after the run's main process exited) is a run the
service user could judge for it: every process of the run is the user's, so
any other process of the user's may signal it. A watcher that SIGKILLs what
the harness left running, the moment it appears or the moment the harness
exits, empties the unit's cgroup before the suite looks, and a run that left
a process behind reads as one that did not (a blind red team's round seven,
issue 37: 31 % of runs ended READY).

So the run is traced from its first instruction (host/userunit.py's gate:
root's strace attached before the program is exec'd, following every child,
-f; host/attached_trace.py), and the trace, not a later look at /proc,
says what happened (judge()):

- **from outside**: a signal delivered to a process of the run that a
  process outside the run sent (si_code SI_USER, SI_QUEUE or SI_TKILL, its
  si_pid not a process of the run), or a process of the run killed by
  SIGKILL that no process of the run sent (SIGKILL's delivery is never
  shown; the run's kill(2)-family calls are: kill, tkill, tgkill,
  rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_send_signal);
- **left running**: a process of the run whose end the trace does not show
  before the main process's end;
- **cannot say**: the main process's end not in the trace, a line the trace
  cannot be read as, whatever the tracer itself could not say
  (attached_trace.Tracer.problems).

The trace is read up to the moment the suite detaches strace, which is
before the suite kills what is left: the suite's own kill is never in it.
Everything in the trace is hostile text: only pids, signal names and the
escaped, cut path of an exec are ever shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from pty_acceptance.host import strace
from pty_acceptance.host.terminal import escape

KILLS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal")
FORKS = ("clone", "clone3", "fork", "vfork")
EXECS = ("execve", "execveat")
CALLS = KILLS + FORKS + EXECS
PATH_SHOWN = 48  # bytes of an exec'd path strace prints (-s), and shows here, escaped
OPTIONS = ("-s", str(PATH_SHOWN), "-e", "trace=" + ",".join(CALLS))
FROM_USERS = ("SI_USER", "SI_QUEUE", "SI_TKILL")  # si_code of a signal a process sent
# strace's own word when it meets the exec of a process whose clone it has not seen yet (bun's
# posix_spawn, under load on the reference host: one run in ten); it adopts the process and goes
# on, and what is judged here (signals, ends, kill calls) is still every line of it
TOLERATED = (re.compile(r"(?:/usr/bin/)?strace: Stray PTRACE_EVENT_EXEC from pid \d+, trying to recover\.\.\."),)

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_SIGNAL = re.compile(r"^--- (SIG[A-Z0-9+]+) \{si_signo=[A-Z0-9+]+, si_code=([A-Z_0-9]+|-?\d+)"
                     r"(?:, si_pid=(\d+))?")
_STOPPED = re.compile(r"^--- stopped by SIG[A-Z0-9+]+ ---$")
_KILLED = re.compile(r"^killed by (SIG[A-Z0-9+]+)")
_RETURNED = re.compile(r"(.*)\)\s+=\s+(-?\d+)(?:\s.*)?$", re.S)
_INTS = re.compile(r"-?\d+")
_EXEC_PATH = re.compile(r'^(?:[^",]*, )?"((?:[^"\\]|\\.)*)"')  # execve's path, or execveat's after its dirfd


@dataclass
class Verdict:
    """What the trace says of one run; `passed` only when it said everything."""
    from_outside: list[str] = field(default_factory=list)
    left_running: list[str] = field(default_factory=list)
    cannot_say: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.from_outside or self.left_running or self.cannot_say)

    def problems(self) -> list[str]:
        return ([f"from outside the run: {w}" for w in self.from_outside]
                + [f"left running after the run's main process exited (its trace): {w}"
                   for w in self.left_running]
                + [f"its trace cannot say: {w}" for w in self.cannot_say])


@dataclass
class _Kill:
    line: int
    sender: int  # the sending process (tgid)
    name: str
    targets: list[int]  # the pid-like arguments before the signal
    signal: str


def _signal_arg(args: str) -> str:
    m = re.search(r"\b(SIG[A-Z0-9+]+)\b", args)
    return m.group(1) if m else ""


def judge(text: str, main: int, tids: dict[int, int] | None = None) -> Verdict:
    """The run whose main process is `main` (a pid) read from its trace `text`
    (strace -f -q OPTIONS, attached from before its first fork); `tids`: the
    threads attached at the start -> their process."""
    v = Verdict()
    tgid: dict[int, int] = dict(tids or {})
    tgid.setdefault(main, main)
    execs: dict[int, str] = {}
    kills: list[_Kill] = []
    calls, ended, unread = strace.events(text)
    by_line = sorted(calls, key=lambda c: c.done if c.done >= 0 else c.entered)
    for c in by_line:  # who is whose: each thread's creator (threads resolved below)
        t = c.tid
        tgid.setdefault(t, t)
        done = _RETURNED.fullmatch(c.body) if c.done >= 0 else None
        if not done:
            continue
        args, ret = done.group(1), int(done.group(2))
        if c.name in FORKS and ret > 0:
            tgid[ret] = t if "CLONE_THREAD" in args else ret
        elif c.name in EXECS and ret == 0 and (m := _EXEC_PATH.match(args)):
            execs[t] = m.group(1)
        elif c.name in KILLS and ret == 0:
            head = args.split("SIG", 1)[0]
            kills.append(_Kill(c.done, t, c.name, [int(x) for x in _INTS.findall(head)], _signal_arg(args)))
    # a thread's process, through its creators: a new thread's own clones may complete before
    # its creator's clone returns (strace -f under load: a good host's PLUGIN-1 run named bun's
    # thread "left running", its own threads taken for a process's)
    tgid = {t: _leader(t, tgid) for t in tgid}
    execs = {tgid.get(t, t): path for t, path in execs.items()}
    kills = [replace(k, sender=tgid.get(k.sender, k.sender)) for k in kills]
    members = set(tgid.values())

    def named(pid: int) -> str:
        path = execs.get(pid)
        return f"pid {pid}" + (f" ({escape(path[:PATH_SHOWN])})" if path else "")

    # signals delivered, and the +++ lines, in the trace's order
    end_of: dict[int, tuple[int, str]] = {}
    for e in ended:
        if e.tid == tgid.get(e.tid, e.tid) and e.superseded_by is None:
            end_of.setdefault(e.tid, (e.line, e.what))
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m or not m.group(2).startswith("---"):
            continue
        rest = m.group(2)
        if _STOPPED.match(rest):
            continue
        s = _SIGNAL.match(rest)
        if not s:
            v.cannot_say.append(f"a signal line it cannot read ({escape(rest[:80])})")
            continue
        sig, code, sender = s.group(1), s.group(2), s.group(3)
        if code in FROM_USERS and (sender is None or int(sender) not in members):
            to = tgid.get(int(m.group(1)), int(m.group(1)))
            v.from_outside.append(f"{named(to)} got {sig} from pid {sender or 'unknown'}, "
                                  "not a process of the run")
    for pid, (line, what) in sorted(end_of.items()):
        k = _KILLED.match(what)
        if not k or k.group(1) != "SIGKILL" or pid not in members:
            continue
        if not any(_sent_to(kill, pid, tgid) for kill in kills if kill.signal == "SIGKILL" and kill.line < line):
            v.from_outside.append(f"{named(pid)} was killed by SIGKILL, which no process of the run sent")
    main_end = end_of.get(main)
    if main_end is None:
        v.cannot_say.append(f"the end of the run's main process (pid {main}) is not in it")
    else:
        for pid in sorted(members - {main}):
            end = end_of.get(pid)
            if end is None or end[0] > main_end[0]:
                v.left_running.append(named(pid))
    v.cannot_say += [f"a line it cannot read ({escape(line[:80])})" for line in unread]
    return v


def _leader(tid: int, creator: dict[int, int]) -> int:
    """The process of `tid`: its creators followed to one that is its own (a cycle,
    which no trace holds, ends where it closes)."""
    seen = {tid}
    while (up := creator.get(tid, tid)) != tid and up not in seen:
        seen.add(up)
        tid = up
    return tid


def _sent_to(kill: _Kill, pid: int, tgid: dict[int, int]) -> bool:
    """Could `kill` (a SIGKILL sent by a process of the run) have reached `pid`?
    A process group, every process, or a pidfd: taken as yes (the run kills
    its own that way; a process of the run is no outsider)."""
    if kill.name == "pidfd_send_signal":
        return True
    if not kill.targets:
        return False
    first = kill.targets[0]
    if kill.name in ("kill", "rt_sigqueueinfo"):
        return first <= 0 or first == pid
    if kill.name in ("tgkill", "rt_tgsigqueueinfo"):
        return first == pid
    return tgid.get(first, first) == pid  # tkill: a thread
