"""RUNTIME-2's tracer: strace (root, absolute path) attached to every thread
of the candidate runtime, following its children, recording only execve and
sendmsg with descriptors decoded (-yy) and strings cut to TRACE_STRINGS
bytes; read back (host/strace.py's parse) as which thread exec'd what, and
what each sent on which descriptor. No payload byte is kept; the trace is
parsed, never shown.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

from pty_acceptance.candidate.runtimeunit import HandoffError
from pty_acceptance.host import proc, programs, scratch, strace
from pty_acceptance.host.polling import poll

ATTACH_DEADLINE_S = 10.0
STRACE_EXIT_S = 5.0
TRACE_STRINGS = 2  # bytes of any string strace prints: enough to see an array was cut

# 1234 sendmsg(3<UNIX-STREAM:[111->222]>, {... cmsg_data=[4</some/dir>]}], ...}, 0) = 10
# strace -f names the thread (tid, padded): a Go helper sends from a thread of its own.
# Only calls printed whole (one line) with the result exactly as below count.
_EXECVE_ARGS = re.compile(r'"((?:[^"\\]|\\.)*)", .*')
_SENDMSG_ARGS = re.compile(r"(\d+)<UNIX-STREAM:\[(\d+)->(\d+)\]>, (.*)")
_SENT = re.compile(r"\) = \d+")
_RIGHTS = re.compile(r"cmsg_type=SCM_RIGHTS, cmsg_data=\[(.*?)\]\}")
_RIGHTS_FD = re.compile(r"^(\d+)<(.*)>$")


@dataclass
class Tracer:
    proc: subprocess.Popen
    out: str
    workdir: str
    text: str | None = None

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
            with open(self.out, "rb") as f:
                self.text = f.read(4 << 20).decode("utf-8", "replace")
        except OSError:
            self.text = ""
        finally:
            scratch.remove(self.workdir)
        return self.text


def tracer_of(tid: int, pid: int) -> int | None:
    try:
        return int(proc.status(pid, tid)["TracerPid"])
    except (OSError, ValueError, KeyError):
        return None


def attach(pid: int) -> Tracer:
    """strace -f on every thread of pid, until each thread reports strace as its tracer."""
    program = strace.installed()
    if program is None:
        raise HandoffError(f"{programs.path('strace')} is not installed: the helper hand-off cannot be "
                           "observed")
    work = scratch.make("pty-acceptance-trace-")  # root 0700
    out = os.path.join(work, "trace")
    child = subprocess.Popen([program, "-f", "-qq", "-yy", "-s", str(TRACE_STRINGS), "-e", "signal=none",
                              "-e", "trace=execve,sendmsg", "-o", out, "-p", str(pid)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=dict(programs.ROOT_ENV))
    tracer = Tracer(child, out, work)

    def attached():
        if child.poll() is not None:
            raise HandoffError(f"strace exited ({child.returncode}) before it attached to {pid}")
        try:
            tids = proc.threads(pid)
        except OSError:
            raise HandoffError(f"the runtime {pid} exited while strace attached") from None
        return tids and all(tracer_of(t, pid) == child.pid for t in tids)

    try:
        poll(attached, ATTACH_DEADLINE_S, f"strace attached to every thread of {pid}")
    except (HandoffError, TimeoutError):
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
    trace = Trace()
    calls, _ = strace.parse(text)
    for c in calls:
        if not c.whole:
            continue
        if c.name == "execve" and c.result == ") = 0" and (m := _EXECVE_ARGS.fullmatch(c.args)):
            trace.execs[c.pid] = m.group(1)
        elif c.name == "sendmsg" and _SENT.fullmatch(c.result) and (m := _SENDMSG_ARGS.fullmatch(c.args)):
            rights = None
            if r := _RIGHTS.search(m.group(4)):
                rights = []
                for item in r.group(1).split(", "):
                    fm = _RIGHTS_FD.match(item)
                    rights.append((int(fm.group(1)), fm.group(2)) if fm else (-1, item[:80]))
            trace.sends.setdefault(c.pid, []).append(
                (int(m.group(1)), int(m.group(2)), int(m.group(3)), rights))
    return trace
