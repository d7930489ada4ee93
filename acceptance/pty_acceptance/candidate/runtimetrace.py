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
(Tracer.end's problems): strace gone before the end, anything strace said on
its error output (-q: attaching and detaching are not reported), a trace
longer than TRACE_LIMIT, a process or thread of the runtime's tree at the end
that strace was not tracing.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from pty_acceptance.candidate.runtimeunit import HandoffError
from pty_acceptance.errors import AcceptanceError
from pty_acceptance.candidate.tracedholders import TRACED
from pty_acceptance.host import proc, programs, scratch, strace
from pty_acceptance.host.polling import poll
from pty_acceptance.host.terminal import escape

ATTACH_DEADLINE_S = 10.0
STRACE_EXIT_S = 5.0
TRACE_STRINGS = 2  # bytes of any string strace prints: enough to see an array was cut
TRACE_LIMIT = 16 << 20  # bytes of trace read; a longer one cannot say
ERR_LIMIT = 64 << 10

# 1234 sendmsg(3<UNIX-STREAM:[111->222]>, {... cmsg_data=[4</some/dir>]}], ...}, 0) = 10
# strace -f names the thread (tid, padded): a Go helper sends from a thread of its own.
# Only calls that returned a count (no errno, no "?") count, their arguments as below.
_RETURNED = re.compile(r"(.*)\) +=\s+(\d+)", re.S)
_EXECVE_ARGS = re.compile(r'"((?:[^"\\]|\\.)*)", .*')
_SENDMSG_ARGS = re.compile(r"(\d+)<UNIX-STREAM:\[(\d+)->(\d+)\]>, (.*)")
_SENT = re.compile(r"\) = \d+")
_RIGHTS = re.compile(r"cmsg_type=SCM_RIGHTS, cmsg_data=\[(.*?)\]\}")
_RIGHTS_FD = re.compile(r"^(\d+)<(.*)>$")


@dataclass
class Tracer:
    proc: subprocess.Popen
    out: str
    err: str
    workdir: str
    tids: dict[int, int] = field(default_factory=dict)  # every thread followed from the attach -> its process
    text: str | None = None
    problems: list[str] = field(default_factory=list)   # why the trace cannot say

    def stop(self) -> str:
        """Detach (SIGTERM: strace detaches from every tracee) and return the trace."""
        if self.text is not None:
            return self.text
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STRACE_EXIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STRACE_EXIT_S)
        try:
            self.text = self._read(self.out, TRACE_LIMIT, "the trace")
            said = self._read(self.err, ERR_LIMIT, "strace's error output").strip()
            if said:
                self.problems.append("strace said: " + escape(said[:300]))
        except OSError as e:
            self.text = ""
            self.problems.append(f"the trace cannot be read: {e.strerror}")
        finally:
            scratch.remove(self.workdir)
        return self.text

    def _read(self, path: str, limit: int, what: str) -> str:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            self.problems.append(f"{what} is longer than the {limit} bytes read: cut short")
            data = data[:limit]
        return data.decode("utf-8", "replace")

    def end(self, tree: Callable[[], set[int]]) -> str:
        """The trace, taken whole: before detaching, strace must still run and
        trace every thread of every process of `tree()` (the runtime's unit and
        descendants now); what it cannot say goes to `problems`."""
        if self.text is None:
            if self.proc.poll() is not None:
                self.problems.append(f"strace exited ({self.proc.returncode}) before the session ended: "
                                     "the trace stops there")
            else:
                try:
                    untraced = self.untraced(tree())
                except (OSError, ValueError, AcceptanceError) as e:
                    untraced = [f"the runtime's processes cannot be listed ({e})"]
                self.problems += [f"{u}: not traced" for u in untraced]
        return self.stop()

    def untraced(self, pids: set[int]) -> list[str]:
        """The threads of `pids` strace is not tracing (a process or thread gone
        meanwhile is left out, and so is one that has ended and waits to be
        reaped, state Z or X: it runs nothing more, and strace let go of it at
        its end, its +++ line in the trace (seen under load on the reference
        host: the fixed helper, killed by the session's end, not yet reaped by
        the runtime); one that cannot be read raises ProcUnreadable)."""
        out = []
        for pid, tids in proc.walk(proc.threads, "the threads", among=sorted(pids)).items():
            for t in sorted(tids):
                try:
                    st = proc.status(pid, t)
                    if st.get("State", "")[:1] in ("Z", "X"):
                        continue
                    by = int(st["TracerPid"])
                except OSError as e:
                    if proc.gone(e):
                        continue
                    raise proc.unreadable(pid, f"the status of thread {t}", e) from None
                except (KeyError, ValueError) as e:
                    raise proc.unreadable(pid, f"the TracerPid of thread {t}", e) from None
                if by != self.proc.pid:
                    out.append(f"pid {pid} thread {t} (traced by {by or 'nobody'})")
        return out


def tracer_of(tid: int, pid: int) -> int | None:
    try:
        return int(proc.status(pid, tid)["TracerPid"])
    except (OSError, ValueError, KeyError):
        return None


def attach(pid: int) -> Tracer:
    """strace -f on every thread of pid and of every descendant it has, until each
    thread reports strace as its tracer."""
    program = strace.installed()
    if program is None:
        raise HandoffError(f"{programs.path('strace')} is not installed: the helper hand-off cannot be "
                           "observed")
    pids = [pid] + [p.pid for p in proc.descendants(pid)]
    work = scratch.make("pty-acceptance-trace-")  # root 0700
    out, err = os.path.join(work, "trace"), os.path.join(work, "stderr")
    with open(err, "wb") as errf:
        # signals are printed (--- lines, skipped when read): with -e signal=none strace 6.1 also
        # leaves out "+++ killed by SIGKILL +++", and a process killed at once would never end
        child = subprocess.Popen([program, "-f", "-q", "-yy", "-s", str(TRACE_STRINGS),
                                  "-e", "trace=" + ",".join(TRACED), "-o", out]
                                 + [a for p in pids for a in ("-p", str(p))],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=errf, env=dict(programs.ROOT_ENV))
    tracer = Tracer(child, out, err, work)

    def attached():
        if child.poll() is not None:
            raise HandoffError(f"strace exited ({child.returncode}) before it attached to {pid}")
        threads = proc.walk(proc.threads, "the threads", among=pids)
        if pid not in threads:
            raise HandoffError(f"the runtime {pid} exited while strace attached")
        if all(tracer_of(t, p) == child.pid for p, ts in threads.items() for t in ts):
            tracer.tids = {t: p for p, ts in threads.items() for t in ts}
            return True
        return False

    try:
        poll(attached, ATTACH_DEADLINE_S, f"strace attached to every thread of {pid} and its descendants")
    except (HandoffError, TimeoutError, proc.ProcUnreadable):
        tracer.stop()
        raise
    return tracer


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
