"""RUNTIME-2's tracer: strace (root, absolute path) attached to every thread
of the candidate runtime and of every process it already has, following their
children (-f), from before the session until the session is gone: every
process created, every exec, every call that gives, copies, moves, takes or
ends a descriptor, and what each sent, with descriptors decoded (-yy) and
strings cut to TRACE_STRINGS bytes (tracedholders.TRACED names the calls;
tracedholders.py replays them into who held the connection and the
directory). Read back here too (host/strace.py's parse) as which thread
exec'd what, and what each sent on which descriptor. No payload byte is
kept; the trace is parsed, never shown.

A trace that cannot say is named, never taken for a clean one
(host/attached_trace.py's Tracer.end: strace gone before the end, anything
it said, a trace cut short, a thread of the runtime's tree it was not
tracing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pty_acceptance.candidate.runtimeunit import HandoffError
from pty_acceptance.candidate.tracedholders import TRACED
from pty_acceptance.host import attached_trace, strace
from pty_acceptance.host.attached_trace import Tracer

TRACE_STRINGS = 2  # bytes of any string strace prints: enough to see an array was cut

# 1234 sendmsg(3<UNIX-STREAM:[111->222]>, {... cmsg_data=[4</some/dir>]}], ...}, 0) = 10
# strace -f names the thread (tid, padded): a Go helper sends from a thread of its own.
# Only calls that returned a count (no errno, no "?") count, their arguments as below.
_RETURNED = re.compile(r"(.*)\) +=\s+(\d+)", re.S)
_EXECVE_ARGS = re.compile(r'"((?:[^"\\]|\\.)*)", .*')
_SENDMSG_ARGS = re.compile(r"(\d+)<UNIX-STREAM:\[(\d+)->(\d+)\]>, (.*)")
_SENT = re.compile(r"\) = \d+")
_RIGHTS = re.compile(r"cmsg_type=SCM_RIGHTS, cmsg_data=\[(.*?)\]\}")
_RIGHTS_FD = re.compile(r"^(\d+)<(.*)>$")


def attach(pid: int) -> Tracer:
    """strace -f on every thread of the runtime `pid` and of every descendant it
    has (host/attached_trace.py), until each reports strace as its tracer."""
    return attached_trace.attach(pid, ["-yy", "-s", str(TRACE_STRINGS), "-e", "trace=" + ",".join(TRACED)],
                                 HandoffError, "the runtime")


Send = tuple[int, int, int, "list[tuple[int, str]] | None"]
# (fd, local socket inode, peer inode, SCM_RIGHTS [(fd, path)] or None)


@dataclass
class Trace:
    """What the traced threads did: tid -> executable exec'd, tid -> sendmsg calls."""
    execs: dict[int, str] = field(default_factory=dict)
    sends: dict[int, list[Send]] = field(default_factory=dict)

    def of(self, tids: set[int]) -> tuple[list[str], list[Send]]:
        """The execs and sends of one process, given its thread ids."""
        return ([self.execs[t] for t in sorted(tids) if t in self.execs],
                [s for t in sorted(tids) for s in self.sends.get(t, [])])


def parse(text: str) -> Trace:
    """Which thread exec'd what, and what each sent (a call printed in two halves,
    another thread's line between them, is read joined: strace.events)."""
    trace = Trace()
    calls, _, _ = strace.events(text)
    for c in calls:
        done = _RETURNED.fullmatch(c.body) if c.done >= 0 else None
        if not done:
            continue
        args, ret = done.group(1), int(done.group(2))
        if c.name == "execve" and ret == 0 and (m := _EXECVE_ARGS.fullmatch(args)):
            trace.execs[c.tid] = m.group(1)
        elif c.name == "sendmsg" and ret >= 0 and (m := _SENDMSG_ARGS.fullmatch(args)):
            rights = None
            if r := _RIGHTS.search(m.group(4)):
                rights = []
                for item in r.group(1).split(", "):
                    fm = _RIGHTS_FD.match(item)
                    rights.append((int(fm.group(1)), fm.group(2)) if fm else (-1, item[:80]))
            trace.sends.setdefault(c.tid, []).append(
                (int(m.group(1)), int(m.group(2)), int(m.group(3)), rights))
    return trace
