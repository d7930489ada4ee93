"""userunit.run_all without systemd, for the suite's own tests on the lab machine
(PID 1 there is not systemd: no transient unit can be started).

It keeps userunit's contract where a process can: the argv as given, the
account with no supplementary groups, the working directory, exactly the
environment given, the umask, stdin /dev/null, stdout and stderr together,
the deadline; what is still running at the deadline, or left in the process
group after the main process exited, is named and killed. What only a unit
gives (a /tmp of its own, bind mounts, a cgroup nothing escapes) it refuses:
tests of those run on a reference host (tests/test_userunit.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time

from pty_acceptance.host import userunit


def _group(pgid: int) -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getpgid(int(pid)) == pgid:
                with open(f"/proc/{pid}/comm") as f:
                    out.append(f"pid {pid} {f.read().strip()}")
        except OSError:
            pass
    return out


def run_all(jobs, deadline_s: float, word: str = "run") -> list[userunit.Ended]:
    for j in jobs:
        if j.binds or j.read_only or j.private_tmp:
            raise NotImplementedError(f"{j.purpose}: binds and a private /tmp need systemd (a reference host)")
    started = []
    for j in jobs:
        out = tempfile.TemporaryFile()
        p = subprocess.Popen(list(j.argv), cwd=j.cwd, env=dict(j.env), user=j.account.pw_uid,
                             group=j.account.pw_gid, extra_groups=[], umask=j.umask, start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        started.append((j, p, out, time.monotonic()))
    end = time.monotonic() + deadline_s
    results = []
    for j, p, out, t0 in started:
        e = userunit.Ended(f"(the lab's stand-in for a unit: pid {p.pid})", j.argv, deadline_s)
        try:
            p.wait(max(0.0, end - time.monotonic()))
            if p.returncode < 0:
                e.signal = -p.returncode
            else:
                e.exit_status = p.returncode
            e.left_behind = _group(p.pid)
        except subprocess.TimeoutExpired:
            e.still_running = _group(p.pid)
        e.duration_s = time.monotonic() - t0
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        out.seek(0)
        data = out.read()
        out.close()
        e.output_bytes, e.output = len(data), data[-j.output_kept:]
        results.append(e)
    return results
