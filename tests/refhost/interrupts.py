"""SUITE-5 on a reference host: the suite interrupted at several points.

Inside the guest (``python interrupts.py guest``, root, the guest's venv), a
short subset of modules is run again and again, each time signalled when the
run reaches a point that the guest itself shows (a stand-in socket exists, a
test has begun); then, once it exited:

- it exited within EXIT_DEADLINE_S of the signal (no worker thread kept it);
- its last line is NOT READY and it says it was interrupted (SIGINT/SIGTERM);
- no marker; nothing of the run is left: no unit, no new process, nothing
  new or changed under /run, /tmp, /var/tmp, /dev/shm (guestsnap.py), and
  the run directory /run/pty-acceptance holds only its lock.

While the first run is at its point, a second run is started: it must fail
within OVERLAP_DEADLINE_S, naming the first run's pid. After a SIGKILL the
stand-in socket is still there (this is what the next run must clean); once
the supervisor has ended the killed run's sessions (their client is gone), the
next run (complete, no signal) removes it first, says so, and passes the
module whose UNIT-7 test failed on that leftover before.

Prints one JSON document between BEGIN and END lines; `problems` empty is a
pass. The host side (`run_matrix`) boots, deploys, runs it, returns it.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

SRC = "/opt/pty-acceptance/src"
PYTHON = "/opt/pty-acceptance/venv/bin/python"
REPORTS = "/root/interrupt-reports"
MARKER = "/etc/opencode/pty-supervisor-verified"
RUN_DIR = "/run/pty-acceptance"
STANDIN = "/run/docker.sock"  # the Docker stand-in test_session_units makes (none on a reference host)
SUBSET = ["acceptance/test_session_units.py", "acceptance/test_concurrency.py"]
POINT_DEADLINE_S = 240.0
EXIT_DEADLINE_S = 60.0
OVERLAP_DEADLINE_S = 30.0
VOLATILE = ("/run", "/tmp", "/var/tmp", "/dev/shm", "/etc", "/home")  # where a run could leave things
SESSIONS_GONE_S = 30.0  # the killed run's sessions ended by the supervisor within this
SETTLE_S = 10.0  # what is left must be gone within this after the run exited (systemd's async stops)
BEGIN, END = "----- interrupt matrix -----", "----- end of interrupt matrix -----"


# ------------------------------------------------------------------ guest side
def _pids() -> dict:
    """(pid, start ticks) -> [uid, comm, cmdline] of every process now."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
            uid = os.stat(f"/proc/{d}").st_uid
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat.rsplit(")", 1)[1].split()
        if rest[0] == "Z":
            continue
        out[f"{d}:{rest[19]}"] = [uid, comm, cmd]
    return out


def _state() -> dict:
    import guestsnap

    return {"tree": guestsnap.tree(roots=VOLATILE, content=False,
                                   excluded=guestsnap.NOT_COMPARED + (RUN_DIR,)),
            "units": guestsnap.units(), "procs": _pids()}


def _left(before: dict, me: set) -> list[str]:
    """What is new or changed since `before` (processes: only new ones)."""
    import guestsnap

    now = _state()
    found = guestsnap.diff({"tree": before["tree"], "units": before["units"]},
                           {"tree": now["tree"], "units": now["units"]})
    found += [f"process {k} {v} new" for k, v in now["procs"].items()
              if k not in before["procs"] and int(k.split(":")[0]) not in me]
    try:
        extra = sorted(set(os.listdir(RUN_DIR)) - {"lock"})
    except FileNotFoundError:
        extra = []
    found += [f"{RUN_DIR}/{n} left" for n in extra]
    if os.path.lexists(MARKER):
        found.append(f"a marker at {MARKER}")
    return found


def _settled(before: dict, me: set) -> list[str]:
    """Nothing left, polled until SETTLE_S; returns what was still there then."""
    end = time.monotonic() + SETTLE_S
    while True:
        left = _left(before, me)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.5)  # poll interval


class Run:
    def __init__(self, label: str, paths=SUBSET):
        self.label = label
        self.out = pathlib.Path(f"{REPORTS}/{label}.txt")
        self.out.parent.mkdir(exist_ok=True)
        self.f = open(self.out, "wb")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
        self.p = subprocess.Popen(
            [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-v", *paths,
             "--inventory", "inventories/reference.yml", "--report-dir", f"{REPORTS}/{label}"],
            cwd=SRC, stdout=self.f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, what: str, predicate, deadline_s: float = POINT_DEADLINE_S) -> str | None:
        """Poll until predicate(); None, or why not."""
        end = time.monotonic() + deadline_s
        while not predicate():
            if self.p.poll() is not None:
                return f"{self.label}: exited ({self.p.returncode}) before {what}: " \
                       f"{self.text()[-800:]}"
            if time.monotonic() > end:
                return f"{self.label}: not at {what} within {deadline_s:g} s: {self.text()[-800:]}"
            time.sleep(0.1)  # poll interval
        return None

    def exit_within(self, deadline_s: float) -> tuple[int | None, float]:
        t0 = time.monotonic()
        try:
            rc = self.p.wait(deadline_s)
        except subprocess.TimeoutExpired:
            rc = None
            self.p.kill()
            self.p.wait()
        self.f.close()
        return rc, time.monotonic() - t0

    def last_line(self) -> str:
        lines = [l for l in self.text().splitlines() if l.strip()]
        return lines[-1] if lines else "(no output)"


def _byk_processes(comms) -> int:
    import pwd

    uid = pwd.getpwnam("byk").pw_uid
    return sum(1 for v in _pids().values() if v[0] == uid and v[1] in comms)


SESSION_CGROUPS = "/sys/fs/cgroup/opencode.slice/opencode-pty.slice/opencode-pty-*.service"


def _session_units() -> int:
    """Session units alive (their cgroups). A stopped session's commands die at
    once, but its unit stays about 2 s more (script(1) waits after SIGTERM): the
    eight endings' units are there together for seconds, their processes for as
    little as a tenth of one, which a 0.1 s poll can miss (seen once in CI)."""
    return len(glob.glob(SESSION_CGROUPS))


POINTS = {
    # name: (signal, the point, as the guest shows it)
    "SIGINT with the stand-ins up": (signal.SIGINT, lambda r: os.path.lexists(STANDIN)),
    "SIGTERM with the stand-ins up": (signal.SIGTERM, lambda r: os.path.lexists(STANDIN)),
    "SIGTERM at collection": (signal.SIGTERM, lambda r: "collected " in r.text()),
    "SIGINT while the endings are driven (worker threads)": (
        signal.SIGINT, lambda r: "test_every_ending_the_suite_can_cause_ends_clean" in r.text()
        and (_session_units() >= 7 or _byk_processes({"yes", "sleep", "head", "tr"}) >= 7)),
}


def matrix() -> dict:
    me = {os.getpid()}
    results, problems = [], []
    before = _state()
    if os.path.lexists(STANDIN):
        problems.append(f"{STANDIN} exists before any run: the stand-in point cannot be seen")
    for n, (name, (sig, point)) in enumerate(POINTS.items()):
        r = Run(f"run-{n}")
        res = {"point": name, "signal": sig.name}
        why = r.wait_for(name, lambda point=point, r=r: point(r))
        if why is None and n == 0:  # the second run, while the first is at its point
            other = Run(f"run-{n}-overlap", paths=SUBSET[:1])
            rc, took = other.exit_within(OVERLAP_DEADLINE_S)
            text = other.text()
            res["overlap"] = {"exit": rc, "seconds": round(took, 1), "last": other.last_line()}
            if rc in (None, 0):
                problems.append(f"a second run while {r.label} ran: exit {rc} after {took:.1f} s")
            if f"pid {r.p.pid}," not in text or "SUITE-5" not in text:
                problems.append(f"the second run does not name the first (pid {r.p.pid}): {text[-600:]}")
        if why is not None:
            problems.append(why)
        r.p.send_signal(sig)
        rc, took = r.exit_within(EXIT_DEADLINE_S)
        res.update(exit=rc, seconds=round(took, 1), last=r.last_line())
        if rc is None:
            problems.append(f"{name}: still running {EXIT_DEADLINE_S:g} s after {sig.name}")
        elif rc == 0:
            problems.append(f"{name}: exit status 0 after {sig.name}")
        if not r.last_line().startswith("NOT READY") or "the session was interrupted" not in r.text():
            problems.append(f"{name}: the run does not end NOT READY, interrupted: {r.text()[-600:]}")
        left = _settled(before, me)
        res["left"] = left
        problems += [f"{name}: left {x}" for x in left]
        results.append(res)

    # SIGKILL: nothing of the run's teardown runs; the next run cleans first.
    r = Run("run-kill", paths=SUBSET[:1])
    res = {"point": "SIGKILL with the stand-ins up", "signal": "SIGKILL"}
    why = r.wait_for("the stand-ins", lambda: os.path.lexists(STANDIN))
    if why:
        problems.append(why)
    r.p.kill()
    r.exit_within(EXIT_DEADLINE_S)
    res["left"] = _left(before, me)
    if not os.path.lexists(STANDIN):
        problems.append(f"after SIGKILL {STANDIN} is gone already: the next run's cleaning is not shown")
    # The killed run's sessions are the supervisor's to end (its client is gone:
    # CONC-3), not the next run's: one still starting when the run was killed
    # outlived it by seconds, and the next run's UNIT-7 test then rightly found
    # the stand-in it had just made reachable through that session's
    # /proc/<pid>/root (its namespace was set up before the stand-in existed).
    t0 = time.monotonic()
    while (alive := _session_units()) and time.monotonic() - t0 < SESSIONS_GONE_S:
        time.sleep(0.2)  # poll interval
    res["sessions_gone_s"] = round(time.monotonic() - t0, 1)
    if alive:
        problems.append(f"after SIGKILL: {alive} session units of the killed run still there "
                        f"{SESSIONS_GONE_S:g} s later (the supervisor ends a session whose client is gone)")
    results.append(res)
    nxt = Run("run-after-kill", paths=SUBSET[:1])
    rc, took = nxt.exit_within(POINT_DEADLINE_S)
    text = nxt.text()
    res = {"point": "the run after SIGKILL", "exit": rc, "seconds": round(took, 1),
           "last": nxt.last_line()}
    if f"stand-in socket {STANDIN}: removed" not in text:
        problems.append(f"the run after SIGKILL does not say it removed {STANDIN}: {text[-1500:]}")
    if " FAILED" in text or " ERROR" in text or " passed" not in text:
        problems.append(f"the run after SIGKILL did not pass its module: {text[-3000:]}")
    res["left"] = _settled(before, me)
    problems += [f"after the run after SIGKILL: left {x}" for x in res["left"]]
    results.append(res)
    return {"results": results, "problems": problems}


def guest_main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    report = matrix()
    print(BEGIN)
    print(json.dumps(report, indent=1))
    print(END)
    return 0


# ------------------------------------------------------------------ host side
def parse(output: bytes) -> dict | None:
    text = output.decode(errors="replace")
    if BEGIN not in text or END not in text:
        return None
    return json.loads(text.split(BEGIN, 1)[1].split(END, 1)[0])


def run_matrix(repo_root: pathlib.Path, out: pathlib.Path) -> tuple[dict | None, str, str]:
    """Boot, deploy, run the matrix inside; (the report, the output, the
    machine's name). The runs' outputs and the journal are copied into `out`."""
    from . import nodedist, npmdist, pinnedvenv
    from .machine import Machine
    from .run import DEPLOY, GUEST_PYTHON, GUEST_SRC
    from .tree import ensure_tree

    npmdist.ensure_all()
    nodedist.ensure_sea(repo_root / "tests/reference/src/candidate/server.js")
    out.mkdir(parents=True, exist_ok=True)
    tree = ensure_tree()
    with Machine(tree, binds=[(str(repo_root), GUEST_SRC, True), *npmdist.binds(),
                              *pinnedvenv.binds(repo_root, tree)],
                 console_log=out / "console.log") as m:
        r = m.run(["/bin/sh", f"{GUEST_SRC}/{DEPLOY}"], cwd=GUEST_SRC)
        if r.returncode != 0:
            return None, f"deploy failed ({r.returncode}): {r.stdout[-2000:]!r} {r.stderr[-2000:]!r}", m.name
        r = m.run([GUEST_PYTHON, "-B", f"{GUEST_SRC}/tests/refhost/interrupts.py", "guest"],
                  cwd=GUEST_SRC, timeout=1500)
        text = r.stdout.decode(errors="replace") + (r.stderr or b"").decode(errors="replace")
        (out / "matrix-output.txt").write_text(text)
        if m.guest_exists(REPORTS):
            m.copy_out(REPORTS, out / "runs")
        m.journal(out / "journal.log")
        return parse(r.stdout), text, m.name


if __name__ == "__main__":
    if sys.argv[1:] == ["guest"]:
        sys.exit(guest_main())
    print(__doc__, file=sys.stderr)
    sys.exit(2)
