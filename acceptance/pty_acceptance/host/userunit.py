"""A program run as the service user in a transient unit of its own (SUITE-4).

Whatever the suite runs as the service user (PLUGIN-1's smoke harness under
bun, BUILD-1's go builds, `systemd-analyze`) runs here: a transient service
unit the suite starts over D-Bus, as that user and group with no
supplementary groups, no new privileges, the environment the caller built
(systemd adds USER, LOGNAME, SHELL, INVOCATION_ID and SYSTEMD_EXEC_PID, never
anything the user chose), stdin from /dev/null, stdout and stderr into a pipe
whose reading end only the suite holds. `RemainAfterExit=yes` keeps the unit
(and so its cgroup) after its main process exits, so what the program left
running is seen and named before the suite kills the cgroup and waits until
the unit is gone. Only then is the run judged: nothing it started outlives it,
and nothing it started can still write into its output.

A job with a `gate` (PLUGIN-1's harness runs) is traced from its first
instruction: its unit runs an execute-only copy of the host's Python (not
dumpable, so no process of the user's can attach to it) that waits for one
line on its standard input, a pipe only the suite writes; the suite attaches
root's strace to it, following every child (host/attached_trace.py), and
only then writes the line; the gate puts /dev/null on its standard input and
exec's the job's program. When the main process has exited, the trace is
taken (before the suite kills anything) and judged (host/killtrace.py):
a signal or a SIGKILL from outside the run, a process left running after
the main process, a trace that cannot say, each makes the run not clean.

The output is read from the raw descriptor with a bounded wait (poll), never
through a buffered reader another thread could block; only its last
`output_kept` bytes are kept (and counted). Once the unit is gone, a pipe that
still has a writer belongs to a process outside the unit (one that reopened it
through /proc): that is reported (`held_open`), the rest is not waited for.

Every deadline here is the caller's or this module's own, never a value read
from the host. The unit's name carries no user text; its Description starts
with DISPOSABLE, so that a later run removes what a SIGKILLed one left
(peer.cleanup_leftovers).
"""

from __future__ import annotations

import errno
import os
import pwd
import secrets
import select
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import attached_trace, cgroups, hostfs, killtrace, proc, scratch
from pty_acceptance.host.bus import SERVICE_IFACE, BusError, Systemd
from pty_acceptance.host.polling import poll

DISPOSABLE = "pty-acceptance disposable"  # every unit the suite makes: Description's first words
OUTPUT_KEPT = 64 * 1024
STOP_DEADLINE_S = 15.0  # kill, stop and wait until the unit and its cgroup are gone
START_DEADLINE_S = 10.0  # StartTransientUnit's job until the main process runs (or ended)
DRAIN_S = 1.0  # after the unit is gone: how long the rest of the output may take to arrive
POLL_S = 0.05  # one wait on the pipe between two looks at the unit
MS_REC = 16384  # BindPaths=' flag for a recursive bind (what systemd-run's -p BindPaths= gives)
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3
NOT_COUNTED = (1 << 64) - 1  # systemd's "no value" for a counter
SIGNALS = tuple(int(s) for s in signal.valid_signals() if 0 < int(s) < 32)
INTERPRETER = "/usr/bin/python3"  # the host's, run by absolute path
INTERPRETER_LIMIT = hostfs.Limit(64 << 20, "the suite's bound on the Python interpreter it copies")
# the gate (Job.gate): one line on stdin, then /dev/null there (and Job.stderr_dir on fd 2: Python
# itself cannot start with a directory there) and the job's program exec'd
GATE_PY = ("import os, sys\n"
           "if os.read(0, 1) != b'\\n':\n    os._exit(125)\n"
           "fd = os.open('/dev/null', os.O_RDONLY)\nos.dup2(fd, 0)\nos.close(fd)\n"
           "if sys.argv[1]:\n"
           "    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)\n"
           "    os.dup2(fd, 2)\n    os.close(fd)\n"
           "os.execv(sys.argv[2], sys.argv[2:])\n")


def copy_interpreter(dfd: int, name: str) -> None:
    """A root-owned, execute-only (0711) copy of the host's Python as `name` in
    the directory `dfd`: the kernel makes a process not dumpable at its exec
    when its user cannot read what it runs, so no other process of the
    service user can attach to it while it starts (a blind red team's round
    seven: a host without Yama lets a process of the user attach to any
    dumpable process of the user's).

    Beside it, a root-owned PYVENV_CFG naming the host interpreter's directory as
    its home: Python finds its standard library by walking up from its
    executable's directory for lib/python3.X/os.py, and a copy staged under /tmp
    would take /tmp itself, where the service user may plant a library of its own
    with a sitecustomize that runs at every start, -I or not (a blind red team's
    round ten). With the file there, the walk starts at the host's own Python."""
    real = os.path.realpath(INTERPRETER)
    hostfs.create_at(dfd, name, hostfs.read_file(real, INTERPRETER_LIMIT.value), 0o711)
    hostfs.create_at(dfd, PYVENV_CFG, venv_config(real), 0o644)


PYVENV_CFG = "pyvenv.cfg"  # Python reads it in its executable's directory before any search


def venv_config(real: str) -> bytes:
    """The pyvenv.cfg of a staged copy of the interpreter at `real`: home is its directory, the
    site-packages of the system are not read."""
    return (f"home = {os.path.dirname(real)}\ninclude-system-site-packages = false\n").encode()


class UnitError(Unreadable):
    """The unit could not be started, read or removed."""


@dataclass(frozen=True)
class Job:
    """What to run, as whom, where, with what; paths are as the program sees them."""
    purpose: str  # words for the Description and the evidence: "plugin smoke 3/10"
    argv: tuple[str, ...]
    account: pwd.struct_passwd
    cwd: str
    env: Mapping[str, str]
    umask: int = 0o077
    private_tmp: bool = False  # a /tmp and /var/tmp of its own, empty
    binds: tuple[tuple[str, str], ...] = ()  # (host path, path inside), read-write
    read_only: tuple[tuple[str, str], ...] = ()  # (host path, path inside), read-only
    # an empty read-only tmpfs over /home, /root and /run/user (ProtectHome=tmpfs), and over
    # each of `hide` (TemporaryFileSystem=): the program sees nothing there but what is bound
    # below them (systemd makes the mount points on the empty tmpfs)
    protect_home: bool = False
    hide: tuple[str, ...] = ()
    output_kept: int = OUTPUT_KEPT
    # the path, as the program sees it, of a copy_interpreter() copy: the run starts behind
    # it and is traced from its first instruction (module docstring)
    gate: str = ""
    # a directory (root's: nothing else may be at that name) as the program's fd 2 instead of
    # the output pipe (the launcher's contract: fd 2 is the session's working directory,
    # TARGET-CONTRACT 5); the gate opens it, or root when there is no gate
    stderr_dir: str = ""

    def command(self) -> list[str]:
        """What the unit exec's: the argv, behind the gate when there is one."""
        if not self.gate:
            return list(self.argv)
        return [self.gate, "-I", "-S", "-c", GATE_PY, self.stderr_dir, *self.argv]

    def properties(self, unit: str, out_fd: int, in_fd: int = -1, err_fd: int = -1) -> list:
        command = self.command()
        props = [
            ("Description", ("s", f"{DISPOSABLE} {unit[:-len('.service')]}: {self.purpose}")),
            ("Type", ("s", "exec")),
            ("User", ("s", self.account.pw_name)),
            ("Group", ("s", str(self.account.pw_gid))),
            ("SupplementaryGroups", ("as", [])),
            ("NoNewPrivileges", ("b", True)),
            ("WorkingDirectory", ("s", self.cwd)),
            ("Environment", ("as", [f"{k}={v}" for k, v in self.env.items()])),
            ("UMask", ("u", self.umask)),
            # no-env-expand: systemd would replace $NAME in the arguments with the environment's
            ("ExecStartEx", ("a(sasas)", [(command[0], command, ["no-env-expand"])])),
            ("StandardInput", ("s", "null")) if in_fd < 0 else ("StandardInputFileDescriptor", ("h", in_fd)),
            ("StandardOutputFileDescriptor", ("h", out_fd)),
            ("StandardErrorFileDescriptor", ("h", out_fd if err_fd < 0 else err_fd)),
            ("RemainAfterExit", ("b", True)),
            # every exit counts as success to systemd, so that the unit stays (RemainAfterExit)
            # whatever the status: the suite reads it and names what is left before it kills
            ("SuccessExitStatus", ("(aiai)", (list(range(1, 256)), list(SIGNALS)))),
            ("KillMode", ("s", "control-group")),
            ("TimeoutStopUSec", ("t", int(STOP_DEADLINE_S * 1e6) // 3)),
            ("CollectMode", ("s", "inactive-or-failed")),
            ("CPUAccounting", ("b", True)),
        ]
        if self.private_tmp:
            props.append(("PrivateTmp", ("b", True)))
        if self.protect_home:
            props.append(("ProtectHome", ("s", "tmpfs")))
        if self.hide:
            props.append(("TemporaryFileSystem", ("a(ss)", [(p, "ro") for p in self.hide])))
        if self.binds:
            props.append(("BindPaths", ("a(ssbt)", [(s, d, False, MS_REC) for s, d in self.binds])))
        if self.read_only:
            props.append(("BindReadOnlyPaths", ("a(ssbt)", [(s, d, False, MS_REC) for s, d in self.read_only])))
        return props


@dataclass
class Ended:
    """How one run ended, read before its unit was removed."""
    unit: str
    argv: tuple[str, ...]
    deadline_s: float
    exit_status: int | None = None  # the main process exited with this status
    signal: int | None = None  # ... or was killed by this signal
    duration_s: float = 0.0  # from its exec to its exit (or to the deadline)
    output: bytes = b""  # the last Job.output_kept bytes of stdout and stderr
    output_bytes: int = 0
    still_running: list[str] = field(default_factory=list)  # at the deadline, killed then
    left_behind: list[str] = field(default_factory=list)  # after the main process exited, killed then
    held_open: bool = False  # a process outside the unit still held its output open once it was gone
    not_gone: str = ""  # why the unit or its cgroup could not be seen gone (empty: gone)
    cpu_s: float = 0.0  # the unit's CPU time when its main process ended, as systemd counted it (0: not)
    traced: killtrace.Verdict | None = None  # a gated job's trace, judged (None: not gated)

    @property
    def timed_out(self) -> bool:
        return self.exit_status is None and self.signal is None

    @property
    def clean(self) -> bool:
        """Exited with 0, left nothing running, nothing outside wrote into its output, gone."""
        return (self.exit_status == 0 and not self.still_running and not self.left_behind
                and not self.held_open and not self.not_gone and (self.traced is None or self.traced.passed))

    def ending(self) -> str:
        if self.timed_out:
            return f"still running at its {self.deadline_s:g} s deadline (killed)"
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"exit {self.exit_status}"


def unit_name(purpose_word: str) -> str:
    return f"pty-acceptance-{purpose_word}-{secrets.token_hex(8)}.service"


class _Run:
    """One started job: its unit, the reading end of its output, what was read."""

    def __init__(self, bus: Systemd, job: Job, word: str, deadline_s: float):
        self.bus, self.job = bus, job
        self.unit = unit_name(word)
        self.ended = Ended(self.unit, job.argv, deadline_s)
        self.fd: int | None = None
        self.eof = False
        self.t0 = time.monotonic()
        self.main_done = False
        self.started = False
        self.tracer: attached_trace.Tracer | None = None
        self.main_pid = 0

    def start(self) -> None:
        r, w = os.pipe2(os.O_CLOEXEC)
        gate_r, gate_w = os.pipe2(os.O_CLOEXEC) if self.job.gate else (-1, -1)
        self.fd = r
        err = -1
        try:
            try:
                if self.job.stderr_dir and not self.job.gate:  # else the gate opens it (GATE_PY)
                    err = os.open(self.job.stderr_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                self.started = True  # from here on, the name may exist: stop() may touch it
                self.bus.start_transient(self.unit, self.job.properties(self.unit, w, gate_r, err))
            except (BusError, OSError) as e:
                raise UnitError(f"{self.job.purpose}: the unit {self.unit} did not start: {e}") from None
            finally:
                os.close(w)  # systemd holds its own copy: end of file comes when the unit's last writer goes
                for fd in (gate_r, err):
                    if fd >= 0:
                        os.close(fd)
            os.set_blocking(r, False)
            if gate_w >= 0:
                self._trace()
                os.write(gate_w, b"\n")  # traced from here on: the gate exec's the program
        finally:
            if gate_w >= 0:
                os.close(gate_w)
        self.t0 = time.monotonic()

    def _trace(self) -> None:
        """strace on the gated main process, every thread of it seen traced."""
        try:
            pid = poll(lambda: self.service().get("MainPID", 0), START_DEADLINE_S,
                       f"{self.unit}'s main process behind its gate")
        except TimeoutError as e:
            raise UnitError(f"{self.job.purpose}: {e}") from None
        self.main_pid = pid
        self.tracer = attached_trace.attach(pid, killtrace.OPTIONS, lambda why: UnitError(
            f"{self.job.purpose}: the run cannot be traced: {why}"), "the run's gate", killtrace.TOLERATED)

    def end_trace(self) -> None:
        """Take the trace (strace detached, nothing killed yet) and judge it."""
        if self.tracer is None:
            return
        tracer, self.tracer = self.tracer, None
        # strace -f ends by itself, status 0, once every process it traced has ended: the run
        # left nothing (the trace must still show the main process's end, killtrace.judge)
        done = tracer.proc.poll() == 0
        text = tracer.stop() if done else tracer.end(lambda: set(self.pids()))
        verdict = killtrace.judge(text, self.main_pid, tracer.tids)
        verdict.cannot_say += tracer.problems
        self.ended.traced = verdict

    def read(self) -> None:
        """Whatever the pipe holds now (never blocks)."""
        while self.fd is not None and not self.eof:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            if not chunk:
                self.eof = True
                return
            got = self.ended
            got.output_bytes += len(chunk)
            got.output = (got.output + chunk)[-self.job.output_kept:]

    def service(self) -> dict:
        props = self.bus.properties(self.unit, SERVICE_IFACE)
        if props is None:
            raise UnitError(f"{self.job.purpose}: the unit {self.unit} is gone before the suite read how it ended")
        return props

    def look(self) -> bool:
        """True once the main process has exited (its status recorded)."""
        if self.main_done:
            return True
        svc = self.service()
        code = svc.get("ExecMainCode", 0)
        if not code:
            return False
        status = svc.get("ExecMainStatus", 0)
        e = self.ended
        if code == CLD_EXITED:
            e.exit_status = status
        elif code in (CLD_KILLED, CLD_DUMPED):
            e.signal = status
        else:
            raise UnitError(f"{self.job.purpose}: ExecMainCode {code!r} of {self.unit} is not an exit or a signal")
        start, end = svc.get("ExecMainStartTimestampMonotonic", 0), svc.get("ExecMainExitTimestampMonotonic", 0)
        e.duration_s = (end - start) / 1e6 if start and end >= start else time.monotonic() - self.t0
        cpu = svc.get("CPUUsageNSec", NOT_COUNTED)
        e.cpu_s = cpu / 1e9 if cpu != NOT_COUNTED else 0.0
        self.main_done = True
        return True

    def pids(self) -> list[int]:
        """The processes in the unit's cgroup now."""
        cg = self.service().get("ControlGroup") or ""
        path = cgroups.cgroup_dir(cg)
        return list(cgroups.cgroup_pids(path)) if path else []

    def left(self) -> list[str]:
        """The processes in the unit's cgroup now, as 'pid N comm' (comm is the
        process's own: callers escape it)."""
        try:
            pids = self.pids()
        except UnitError:
            return []
        out = []
        for pid in pids:
            try:
                out.append(f"pid {pid} {proc.comm(pid)}")
            except OSError:
                out.append(f"pid {pid}")
        return out

    def stop(self) -> None:
        """Kill the cgroup, stop the unit, wait until it and its cgroup are gone,
        then take what is left in the pipe; never raises for a unit that
        ended by itself."""
        if not self.started:
            return
        cg = ""
        try:
            props = self.bus.properties(self.unit, SERVICE_IFACE)
            cg = (props or {}).get("ControlGroup") or ""
            if props is not None:
                self.bus.kill(self.unit, signal.SIGKILL)
                self.bus.stop(self.unit)
        except BusError as e:
            if not e.name.endswith(("NoSuchUnit", "UnknownObject")):
                self.ended.not_gone = f"stopping {self.unit}: {e}"
        end = time.monotonic() + STOP_DEADLINE_S
        while True:
            self.read()
            try:
                props = self.bus.properties(self.unit)
            except BusError as e:
                self.ended.not_gone = f"reading {self.unit}: {e}"
                break
            unit_gone = props is None or props.get("ActiveState") in ("inactive", "failed")
            if unit_gone and not (cg and cgroups.cgroup_dir(cg)):
                if props is not None:
                    self.bus.reset_failed(self.unit)
                break
            if time.monotonic() > end:
                self.ended.not_gone = (f"{self.unit} still {props.get('ActiveState')}/{props.get('SubState')}"
                                       if props is not None else f"{self.unit}'s cgroup {cg} still there")
                self.ended.not_gone += f" {STOP_DEADLINE_S:g} s after it was killed and stopped"
                break
            self._wait(min(POLL_S, max(0.0, end - time.monotonic())))
        self.started = False
        self._drain()

    def _drain(self) -> None:
        end = time.monotonic() + DRAIN_S
        while self.fd is not None and not self.eof and time.monotonic() < end:
            self._wait(min(POLL_S, max(0.0, end - time.monotonic())))
            self.read()
        if self.fd is not None and not self.eof and not self.ended.not_gone:
            self.ended.held_open = True
        self.close()

    def _wait(self, timeout: float) -> None:
        """Until the pipe has something or `timeout` passed (a poll, not a sleep)."""
        if self.fd is None or self.eof:
            time.sleep(timeout)  # poll interval: nothing left to read, only the unit to look at
            return
        select.select([self.fd], [], [], timeout)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def run_all(jobs: Sequence[Job], deadline_s: float, word: str = "run") -> list[Ended]:
    """Run `jobs` side by side, each in a unit of its own, against one
    deadline; each ends as Ended once its unit and cgroup are gone. An
    interrupt or an error on the way kills and removes every unit started."""
    bus = Systemd.connect()
    runs = [_Run(bus, j, word, deadline_s) for j in jobs]
    try:
        for r in runs:
            r.start()
        end = time.monotonic() + deadline_s
        for r in runs:
            r.read()
        while not all(r.look() for r in runs):
            if time.monotonic() > end:
                break
            fds = [r.fd for r in runs if r.fd is not None and not r.eof]
            wait = min(POLL_S, max(0.0, end - time.monotonic()))
            if fds:
                select.select(fds, [], [], wait)
            else:
                time.sleep(wait)  # poll interval: no output left to read, only the units to look at
            for r in runs:
                r.read()
        for r in runs:
            names = r.left()
            if r.main_done:
                r.ended.left_behind = names
            else:
                r.ended.still_running = names
                r.ended.duration_s = time.monotonic() - r.t0
            r.end_trace()
            r.stop()
        return [r.ended for r in runs]
    finally:
        for r in runs:  # an interrupt or an error half way: nothing of it stays (SUITE-5)
            try:
                if r.tracer is not None:
                    r.tracer.stop()
                r.stop()
            except Exception:  # noqa: BLE001 - best effort on the way out; the first error stands
                pass
            r.close()
        bus.close()


def run(job: Job, deadline_s: float, word: str = "run") -> Ended:
    return run_all([job], deadline_s, word)[0]


GATE_NAME = "gate-python3"  # the execute-only interpreter's name in a gated run's stage


def run_gated(job: Job, deadline_s: float, word: str = "run") -> Ended:
    """`job` behind a gate of its own (a stage in the run's scratch area holding
    the execute-only interpreter, removed afterwards): traced by root from its
    first instruction. The caller judges `Ended.traced`: a run another process
    interfered with is no answer."""
    stage = scratch.make(f"pty-acceptance-{word}-", mode=0o755)  # root's: the user may enter, not change
    try:
        dfd = hostfs.open_dir(stage)
        try:
            copy_interpreter(dfd, GATE_NAME)
        finally:
            os.close(dfd)
        return run(replace(job, gate=os.path.join(stage, GATE_NAME)), deadline_s, word)
    finally:
        scratch.remove(stage)


# ------------------------------------------------------------------ a scope
GATE_FD = 5
# the gate: the child waits for one line on GATE_FD (the suite writes it once the
# child is in its scope), closes it, and only then runs what it was started for
GATE_SH = f'read -r _ <&{GATE_FD} || exit 125; exec {GATE_FD}<&-; exec "$@"'


class Scope:
    """A program the suite must start itself (root's strace, which runs the
    service user's helper: its descriptors are arranged by the suite) in a
    transient scope unit of its own: started behind a gate (/bin/sh waiting
    for a line on fd GATE_FD), moved into the scope, and only then let go, so
    that everything it starts is in the scope's cgroup; close() kills that
    cgroup and waits until the scope and its cgroup are gone."""

    def __init__(self, purpose: str):
        self.purpose = purpose
        self.unit = f"pty-acceptance-scope-{secrets.token_hex(8)}.scope"
        self.gate_r, self.gate_w = os.pipe2(os.O_CLOEXEC)
        self.bus: Systemd | None = None
        self.started = False
        self.control_group = ""

    def argv(self, argv: Sequence[str]) -> list[str]:
        """What to start instead of `argv`; the child must get gate_r at fd GATE_FD."""
        return ["/bin/sh", "-c", GATE_SH, "sh", *argv]

    def enter(self, pid: int) -> None:
        """Move `pid` (the gated child) into the scope, check it is there, open the gate."""
        os.close(self.gate_r)  # the child has its own copy
        self.gate_r = -1
        self.bus = Systemd.connect()
        props = [("Description", ("s", f"{DISPOSABLE} {self.unit[:-len('.scope')]}: {self.purpose}")),
                 ("PIDs", ("au", [pid])), ("CollectMode", ("s", "inactive-or-failed"))]
        try:
            self.started = True
            self.bus.start_transient(self.unit, props)
            self.bus.wait_for(self.unit, lambda p: p is not None and p.get("ActiveState") == "active",
                              START_DEADLINE_S, "active")
            svc = self.bus.properties(self.unit, "org.freedesktop.systemd1.Scope") or {}
            self.control_group = svc.get("ControlGroup") or ""
        except (BusError, TimeoutError) as e:
            raise UnitError(f"{self.purpose}: the scope {self.unit} did not start: {e}") from None
        if not self.control_group or not cgroups.inside(proc.cgroups(pid), self.control_group):
            raise UnitError(f"{self.purpose}: pid {pid} is not in the scope {self.unit}'s cgroup "
                            f"{self.control_group or '(none)'}")
        os.write(self.gate_w, b"go\n")
        os.close(self.gate_w)
        self.gate_w = -1

    def close(self) -> str:
        """Kill the scope's cgroup, wait until the scope and its cgroup are gone;
        '' when they are, else why not (never raises)."""
        for fd in (self.gate_r, self.gate_w):
            if fd >= 0:
                os.close(fd)
        self.gate_r = self.gate_w = -1
        if self.bus is None:
            return ""
        why = ""
        try:
            if self.started:
                try:
                    self.bus.kill(self.unit, signal.SIGKILL)
                except BusError as e:
                    if not e.name.endswith(("NoSuchUnit", "UnknownObject")):
                        why = f"killing {self.unit}: {e}"
                end = time.monotonic() + STOP_DEADLINE_S
                while True:
                    props = self.bus.properties(self.unit)
                    gone = props is None or props.get("ActiveState") in ("inactive", "failed")
                    if gone and not (self.control_group and cgroups.cgroup_dir(self.control_group)):
                        break
                    if time.monotonic() > end:
                        why = (f"the scope {self.unit} or its cgroup {self.control_group} still there "
                               f"{STOP_DEADLINE_S:g} s after its processes were killed")
                        break
                    time.sleep(POLL_S)  # poll interval, not a wait for an outcome
        except BusError as e:
            why = f"reading {self.unit}: {e}"
        finally:
            self.bus.close()
            self.bus = None
        return why
