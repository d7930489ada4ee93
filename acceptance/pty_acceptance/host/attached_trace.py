"""strace (root, absolute path) attached to a running process tree, -f.

Both attached tracers of the suite start here: RUNTIME-2's trace of the
candidate runtime (candidate/runtimetrace.py) and PLUGIN-1's and BUILD-1's
trace of a run of the service user's (host/killtrace.py, through
host/userunit.py). attach() starts strace on every thread of a process and
of every descendant it has, and returns once each of those threads names
strace as its tracer (/proc's TracerPid); a process another tracer holds, or
one gone meanwhile, is the caller's error. The trace goes to a file in a
root-only directory of its own; Tracer.end() takes it whole.

A trace that cannot say is named, never taken for a clean one
(Tracer.problems): strace gone before the end, anything strace said on its
error output (-q: attaching and detaching are not reported), a trace longer
than TRACE_LIMIT, a thread of the tree at the end that strace was not
tracing.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import proc, programs, scratch, strace
from pty_acceptance.host.polling import poll
from pty_acceptance.host.terminal import escape

ATTACH_DEADLINE_S = 10.0
STRACE_EXIT_S = 5.0
TRACE_LIMIT = 16 << 20  # bytes of trace read; a longer one cannot say
ERR_LIMIT = 64 << 10


@dataclass
class Tracer:
    proc: subprocess.Popen
    out: str
    err: str
    workdir: str
    tids: dict[int, int] = field(default_factory=dict)  # every thread followed from the attach -> its process
    text: str | None = None
    problems: list[str] = field(default_factory=list)   # why the trace cannot say
    tolerated: tuple[re.Pattern, ...] = ()  # lines of strace's error output that are no problem

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
            said = self._read(self.err, ERR_LIMIT, "strace's error output")
            said = "\n".join(line for line in said.splitlines()
                             if line.strip() and not any(t.fullmatch(line) for t in self.tolerated))
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
        trace every thread of every process of `tree()` (the traced unit's
        processes now); what it cannot say goes to `problems`."""
        if self.text is None:
            if self.proc.poll() is not None:
                self.problems.append(f"strace exited ({self.proc.returncode}) before the traced run ended: "
                                     "the trace stops there")
            else:
                try:
                    untraced = self.untraced(tree())
                except (OSError, ValueError, AcceptanceError) as e:
                    untraced = [f"the traced processes cannot be listed ({e})"]
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


def attach(pid: int, options: Sequence[str], error: Callable[[str], Exception], what: str,
           tolerated: tuple[re.Pattern, ...] = ()) -> Tracer:
    """strace -f `options` on every thread of `pid` (`what`: "the runtime",
    words for errors) and of every descendant it has, until each thread
    reports strace as its tracer; every failure on the way is error(why);
    `tolerated`: lines of strace's error output that are no problem."""
    program = strace.installed()
    if program is None:
        raise error(f"{programs.path('strace')} is not installed: {what} cannot be traced")
    pids = [pid] + [p.pid for p in proc.descendants(pid)]
    work = scratch.make("pty-acceptance-trace-")  # root 0700
    out, err = os.path.join(work, "trace"), os.path.join(work, "stderr")
    with open(err, "wb") as errf:
        # signals are printed (--- lines): with -e signal=none strace 6.1 also leaves out
        # "+++ killed by SIGKILL +++", and a process killed at once would never end
        child = subprocess.Popen([program, "-f", "-q", *options, "-o", out]
                                 + [a for p in pids for a in ("-p", str(p))],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=errf, env=dict(programs.ROOT_ENV))
    tracer = Tracer(child, out, err, work, tolerated=tolerated)

    def attached():
        if child.poll() is not None:
            raise error(f"strace exited ({child.returncode}) before it attached to {what} ({pid})")
        threads = proc.walk(proc.threads, "the threads", among=pids)
        if pid not in threads:
            raise error(f"{what} ({pid}) exited while strace attached")
        if all(tracer_of(t, p) == child.pid for p, ts in threads.items() for t in ts):
            tracer.tids = {t: p for p, ts in threads.items() for t in ts}
            return True
        return False

    try:
        poll(attached, ATTACH_DEADLINE_S, f"strace attached to every thread of {what} ({pid}) and its descendants")
    except (TimeoutError, proc.ProcUnreadable) as e:
        tracer.stop()
        raise error(str(e)) from None
    except Exception:
        tracer.stop()
        raise
    return tracer
