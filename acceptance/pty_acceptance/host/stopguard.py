"""SUITE-5: the suite's own processes, watched for a stop from outside.

Everything the suite runs as the service user (the disposable peer's agent,
the isolation probe, the plugin harness, the candidate runtime, the session
units the supervisor starts for the suite's sessions) is a process of that
user, and any other process of the user may send it SIGSTOP. Each of the
suite's waits is bounded, but a wait on a stopped process lasts its whole
bound, and a user that stops every such process as it appears holds the run
for the sum of them all (an hour and more). So a stopped process of the
suite's own is named, never waited for:

A thread of its own (its own bus connection) looks every INTERVAL_S at the
suite's own units: every unit whose Description starts with the suite's tag
(userunit.DISPOSABLE), and every strict-name session unit whose BindsTo= is
the supervisor; in each unit's cgroup every thread of every process, its
/proc/<pid>/task/<tid>/stat state (a thread of its own, not only the leader: a
blind red team's ninth pass parked an injected thread in a ptrace stop behind a
leader that had exited, a zombie whose own state is never T, and held the whole
process, and with it the session's unit, past every bound). A thread in state T
or t (stopped, or stopped under a tracer) is judged by its tracer (TracerPid):
traced by the suite's own process, one of its descendants or a
process of its own units (the strace the suite runs, which stops its
tracees on purpose: helpertrace.py), the stop is the suite's; traced by any
other process, it is recorded (a tracer holds it: it cannot be continued);
untraced, it is recorded and sent SIGCONT through a pidfd, only while it is
still inside that unit's cgroup (cgroupkill.signal_inside). The first such stop trips the
guard: the gate runs no further test (each is reported not run, naming the
stop), and the stop is a SUITE-5 blocker; the test in progress ends within
its own bounds, its process continued.

A stop the suite makes itself (ISO-3 stops the disposable peer's MainPID on
purpose) is declared first (`deliberate`) and not counted while declared.

What the guard cannot read is not a stop: a unit gone between its listing
and its reading, a process gone between its cgroup's listing and its stat.
A guard that cannot watch at all (no bus, an error of its own) says so, and
that too is a blocker: a run whose processes were not watched cannot say
that none was stopped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil

from pty_acceptance.host import cgroupkill, cgroups, proc, terminal
from pty_acceptance.host.bus import SERVICE_IFACE, UNIT_IFACE, BusError, Systemd
from pty_acceptance.host.systemd import STRICT_SESSION
from pty_acceptance.host.userunit import DISPOSABLE

INTERVAL_S = 0.25
connect: Callable[[], Systemd] = Systemd.connect  # how the guard reaches the bus (a fake host's tests replace it)
RELEASE_S = 1.0  # how long a tracee of a tracer that is gone may stay stopped by it
POLL_RELEASE_S = 0.01
LISTED_UNITS = 10_000  # units looked at per round: the host's own units are never more
STOPS_KEPT = 100  # stops recorded one by one; past them only counted


@dataclass(frozen=True)
class Stop:
    """One process of the suite's own found stopped from outside."""
    unit: str
    pid: int
    comm: str  # escaped
    how: str   # "stopped (state T)" or "in a tracing stop by pid N, not the suite's"
    after_s: float  # seconds after the guard started
    during: str  # the test in progress ("" between tests)
    continued: str  # what the guard did: "continued (SIGCONT)" or why not

    def describe(self) -> str:
        during = f" during {self.during}" if self.during else ""
        return (f"pid {self.pid} ({self.comm}) of the suite's own unit {self.unit} was {self.how} "
                f"{self.after_s:.1f} s into the run{during}; {self.continued}")


class Guard:
    """Start once per run (`start`), `halt` when the verdict is decided."""

    def __init__(self, supervisor_unit: str, connect: Callable[[], Systemd] = Systemd.connect,
                 interval_s: float = INTERVAL_S):
        self.supervisor_unit = supervisor_unit
        self.connect = connect
        self.interval_s = interval_s
        self.during = ""  # the test in progress: the gate sets it
        self.stops: list[Stop] = []
        self.broken: str | None = None  # why the guard could not watch
        self._windows: dict[int, list[list[float | None]]] = {}  # pid -> [declared, taken back] times
        self._seen: set[tuple[int, float]] = set()  # (pid, create time) already recorded
        self._groups: dict[str, str | None] = {}  # unit -> its ControlGroup (None: not the suite's)
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self.rounds = 0
        self.uncounted = 0  # stops past STOPS_KEPT

    # -- the gate's side
    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="pty-acceptance-stopguard", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=10 * self.interval_s + 5)
            if self._thread.is_alive():
                self._note_broken("the guard's thread did not end within its bound")
            self._thread = None

    @property
    def tripped(self) -> Stop | None:
        with self._lock:
            return self.stops[0] if self.stops else None

    def said(self) -> list[str]:
        """Each stop, in words (the SUITE-5 blockers)."""
        with self._lock:
            said = [s.describe() for s in self.stops]
            return said + ([f"{self.uncounted} more processes stopped, not listed"] if self.uncounted else [])

    @contextlib.contextmanager
    def deliberate(self, pid: int):
        """A stop of `pid` the suite makes itself (ISO-3): a state read while it
        was declared is not counted, even when the guard judges that reading
        after the declaration ended (a loaded host delays the guard's thread)."""
        window: list[float | None] = [time.monotonic(), None]
        with self._lock:
            self._windows.setdefault(pid, []).append(window)
        try:
            yield
        finally:
            with self._lock:
                window[1] = time.monotonic()

    def _declared(self, pid: int, read_at: float) -> bool:
        """`pid`'s state, read at `read_at`, fell in a declared window (under the lock)."""
        return any(start is not None and start <= read_at and (end is None or read_at <= end)
                   for start, end in self._windows.get(pid, ()))

    # -- the thread
    def _note_broken(self, why: str) -> None:
        with self._lock:
            if self.broken is None:
                self.broken = terminal.escape(why)

    def _run(self) -> None:
        try:
            bus = self.connect()
        except (OSError, BusError) as e:
            self._note_broken(f"no system bus connection: {e}")
            return
        try:
            while not self._halt.is_set():
                self.look(bus)
                self.rounds += 1
                self._halt.wait(self.interval_s)
        except Exception as e:  # noqa: BLE001  # any error of its own: the run was not watched, said
            self._note_broken(f"{type(e).__name__}: {e}")
        finally:
            with contextlib.suppress(OSError):
                bus.close()

    def own_units(self, bus: Systemd) -> dict[str, str]:
        """{unit: its ControlGroup} of the suite's own units now."""
        out = {}
        listed = bus.call("ListUnits")[0][:LISTED_UNITS]
        names = {row[0] for row in listed}
        for stale in set(self._groups) - names:
            del self._groups[stale]
        for row in listed:
            name, description, active = row[0], row[1], row[3]
            if active not in ("active", "activating", "deactivating", "reloading"):
                continue
            if not (description.startswith(DISPOSABLE) or STRICT_SESSION.match(name)):
                continue
            if name not in self._groups:
                found = self._control_group(bus, name)
                if found is None:
                    continue  # not readable now (starting, or gone): looked at again next round
                self._groups[name] = found
            group = self._groups[name]
            if group:
                out[name] = group
        return out

    def _control_group(self, bus: Systemd, name: str) -> str | None:
        """The unit's ControlGroup, if it is one the suite may signal: its own
        (tagged), or a strict-name session unit bound to the supervisor."""
        try:
            unit = bus.properties(name, UNIT_IFACE) or {}
            kind = SERVICE_IFACE if name.endswith(".service") else "org.freedesktop.systemd1.Scope"
            svc = bus.properties(name, kind) or {}
        except BusError:
            return None  # gone meanwhile, or not readable: looked at again next round
        if STRICT_SESSION.match(name) and list(unit.get("BindsTo") or []) != [self.supervisor_unit]:
            return ""  # a strict name, not bound to the supervisor alone: never the suite's to signal
        if not STRICT_SESSION.match(name) and not str(unit.get("Description", "")).startswith(DISPOSABLE):
            return ""
        group = svc.get("ControlGroup")
        return group if isinstance(group, str) and group.startswith("/") else None

    def look(self, bus: Systemd) -> None:
        """One round: every process of the suite's own units, its state."""
        for unit, group in self.own_units(bus).items():
            path = cgroups.cgroup_dir(group)
            if path is None:
                self._groups.pop(unit, None)
                continue
            try:
                pids = cgroups.cgroup_pids(path)
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENODEV):
                    continue
                raise
            for pid in pids:
                try:
                    tids = proc.threads(pid)
                except OSError:
                    continue  # gone between the cgroup's listing and its tasks: gone is gone
                for tid in tids:
                    self._judge(unit, group, pid, tid)

    def _judge(self, unit: str, group: str, pid: int, tid: int | None = None) -> None:
        """Thread `tid` of process `pid` (the leader when None), in `unit`'s cgroup."""
        tid = pid if tid is None else tid
        # the time is taken before the read: a reading taken after the read could
        # fall past a declared window's end although the state was read inside it
        # (the GIL passed to the test, which continued the process and closed the
        # window, between the read and the clock)
        read_at = time.monotonic()
        try:
            data = proc.stat_line(pid, tid)
            state = proc.stat_field(data, 3)
            if state not in (b"T", b"t"):
                return
            created = proc.create_time(tid)
        except (OSError, ValueError, psutil.Error):
            return  # gone between the cgroup's listing and its stat: gone is gone
        with self._lock:
            if self._declared(pid, read_at) or (tid, created) in self._seen:
                return
        tracer = self._tracer(pid, tid)
        if tracer is None:
            return  # gone meanwhile, or no longer stopped: a stop judged needs state and tracer read together
        if tracer and self._suites(tracer):
            return  # traced by the suite's own strace: its stops are the tracer's (helpertrace.py)
        if tracer and self._let_go(pid, tid, tracer):
            return  # a tracer gone, its tracee released: the suite's strace detaching at its end
        if tracer:
            how, continued = f"in a stop while traced by pid {tracer}, not a process of the suite's", \
                "not continued (a tracer holds it)"
        else:
            how = "stopped (state T: SIGSTOP or another stop signal, not the suite's)"
            why = cgroupkill.signal_inside(pid, created, group, signal.SIGCONT)
            continued = "continued (SIGCONT), never waited for" if why is None else f"not continued: {why}"
        if tid != pid:
            how = f"{how} (its thread {tid}; the process's own state {self._leader_state(pid)})"
        try:
            comm = terminal.escape(proc.comm(pid))
        except OSError:
            comm = "?"
        stop = Stop(unit, pid, comm, how, time.monotonic() - self._t0, self.during, continued)
        with self._lock:
            self._seen.add((tid, created))
            if len(self.stops) < STOPS_KEPT:
                self.stops.append(stop)
            else:
                self.uncounted += 1

    @staticmethod
    def _leader_state(pid: int) -> str:
        """The state letter of the process (its leader thread), for the record."""
        try:
            return proc.stat_field(proc.stat_line(pid), 3).decode("ascii", "replace")
        except (OSError, ValueError):
            return "unread"

    def _let_go(self, pid: int, tid: int, tracer: int) -> bool:
        """The tracer is gone and `pid`, stopped by it, is released within
        RELEASE_S: the suite's own strace detaching (SIGTERM) stops each tracee
        to let go of it, and was reaped before its parent could be read (seen on
        the reference host: RUNTIME-2's tracer at the session's end). An
        outside tracer that stays holds its tracee, and is named."""
        if os.path.exists(f"/proc/{tracer}"):
            return False
        end = time.monotonic() + RELEASE_S
        while True:
            if self._tracer(pid, tid) != tracer:
                return True
            if time.monotonic() > end:
                return False
            time.sleep(POLL_RELEASE_S)  # poll interval while the kernel releases the tracee

    def _tracer(self, pid: int, tid: int) -> int | None:
        """The TracerPid of thread `tid` of `pid` while it is still stopped (0: none;
        None: gone, unreadable or running again). State and TracerPid come from one read of
        /proc/<pid>/status: a tracee of the suite's own strace, read in its
        tracing stop just before strace let it go, is never judged untraced."""
        try:
            status = proc.status(pid, tid)
            if status.get("State", "")[:1] not in ("T", "t"):
                return None
            return int(status.get("TracerPid", "0"))
        except (OSError, ValueError):
            return None

    def _suites(self, tracer: int) -> bool:
        """The tracer is the suite's process, one of its descendants (the strace
        it runs), or a process of one of its own units."""
        if _descends_from(tracer, os.getpid()):
            return True
        try:
            groups = proc.cgroups(tracer)
        except OSError:
            return False
        return any(cgroups.inside(groups, g) for g in self._groups.values() if g)


def _descends_from(pid: int, ancestor: int) -> bool:
    """`pid` is `ancestor` or one of its descendants (bounded walk up the ppid chain)."""
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            pid = proc.ppid(pid)
        except (OSError, KeyError, ValueError):
            return False
    return False
