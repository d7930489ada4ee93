"""How a session ends, read from the host: its unit, its cgroup and its
processes (CONC-2, CONC-3, CGROUP-1, ORPHAN-1).

A session leaves a Footprint, taken while it is live: the unit name, the
ControlGroup systemd reports, the cgroup directory that holds it on this host
(unified hierarchy or systemd's named one), the processes in it (pid and
create_time, so a reused pid is never taken for a survivor) and a token that
the suite put in the session's argv, so that descendants are found even if
they were never seen in the cgroup. A footprint is gone when the unit is no
longer loaded, the directory no longer exists and no recorded or tagged
process is alive. The token only finds and reports: any process of the
service user may carry it. What is left is signalled only when it is, at
that moment, inside the cgroup of a unit the suite owns (a vouched session
unit, or one of its own disposable units): a pidfd is taken, then its cgroup
and start time are read, then the signal goes to the pidfd (SUITE-4).

Also here: the supervisor's readiness (conftest's `supervisor_guard` brings
it back on every path), decoy units for the orphan cleanup, and the machinery
that drives several endings side by side. The cgroup reads are cgroups.py's,
the watch on systemd's UnitNew signals is unitwatch.py's.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import stat
import threading
import time
from dataclasses import dataclass, field

import psutil
from pty_acceptance.host import cgroups, terminal
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.host.bus import SERVICE_IFACE, BusError, Systemd
from pty_acceptance.host.cgroups import CGROUP_ROOTS, cgroup_dir, cgroup_pids
from pty_acceptance.errors import Unreadable
from pty_acceptance.supervisor.peer import TAG_PREFIX
from pty_acceptance.supervisor.session import RawSession, SessionError
from pty_acceptance.supervisor.sessionunit import NotLoaded, NotOurs, Owner, vouch

POLL_S = 0.02
STOP_GRACE_S = 2.0   # script(1) acts on SIGTERM after about 2 s (notes: Stopping)
STOP_SLACK_S = 2.0   # scheduling: sessions are stopped side by side on a small host
STOP_BOUND_MAX_S = 30.0  # "a few seconds": an unbounded or huge TimeoutStopSec is a finding
ENDINGS_DEADLINE_S = 120.0  # run_endings: every case driven side by side ends within this
JOIN_SLICE_S = 0.1  # run_endings: how late an interrupt that lands mid-join may be acted on


class HostReadError(Unreadable):
    pass


# --------------------------------------------------------------- tokens
def new_token() -> str:
    """Twelve random digits: usable inside a number, so `sleep 300.<token>1`
    is a sleep of 300 s whose own argv carries the token."""
    return f"{secrets.randbelow(10 ** 12):012d}"


def tagged_sh(script: str, token: str) -> list[str]:
    """argv of `/bin/sh -c script` whose $0 carries the token."""
    return ["/bin/sh", "-c", script, f"pty-acceptance-{token}"]


def token_processes(token: str) -> dict[int, tuple[float, str]]:
    """Every live (non-zombie) process whose argv contains the token (read from
    /proc directly: psutil's process_iter shares a cache between threads)."""
    needle = token.encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read(65536)
        except OSError:
            continue
        if needle not in argv:
            continue
        try:
            proc = psutil.Process(int(entry))
            if proc.status() != psutil.STATUS_ZOMBIE:
                found[proc.pid] = (proc.create_time(), argv.replace(b"\0", b" ")[:200].decode(
                    "utf-8", "replace"))
        except psutil.NoSuchProcess:
            continue
    return found


def alive(pid: int, create_time: float) -> bool:
    """The very process seen earlier (same pid AND same create_time) still runs."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == create_time and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_inside(pid: int, created: float | None, control_group: str) -> str | None:
    """SIGKILL process `pid` (the one started at `created`; None: whichever
    has the pid) only if it is now inside `control_group`, a unit the suite
    owns: a pidfd first, then its cgroup and start time (read after the
    cgroup: a pid reused meanwhile is caught), then pidfd_send_signal.
    Returns why it was not signalled; None when it was, or when that process
    is gone."""
    if not control_group:
        return "no cgroup of the suite's to check it against"
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError as e:
        return f"no pidfd for it ({e.strerror or e})"
    try:
        try:
            groups = cgroups.of_process(pid)
            if created is not None and psutil.Process(pid).create_time() != created:
                return None  # that process is gone; another has its pid
        except (OSError, psutil.NoSuchProcess):
            return None
        if not cgroups.inside(groups, control_group):
            return f"outside {control_group} (in {', '.join(groups) or 'no cgroup of systemd'})"
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return None
    except ProcessLookupError:
        return None
    finally:
        os.close(fd)


# --------------------------------------------------------------- cgroups
def processes_in(path: str) -> dict[int, tuple[float, str]]:
    out = {}
    for pid in cgroup_pids(path):
        try:
            proc = psutil.Process(pid)
            out[pid] = (proc.create_time(), " ".join(proc.cmdline())[:200])
        except psutil.NoSuchProcess:
            pass
    return out


# --------------------------------------------------------------- footprint
@dataclass
class Footprint:
    unit: str
    token: str
    control_group: str = ""
    path: str = ""            # the cgroup directory on this host
    timeout_stop_s: float = 0.0
    main_pid: int = 0
    procs: dict[int, tuple[float, str]] = field(default_factory=dict)

    @classmethod
    def capture(cls, bus: Systemd, unit: str, token: str, owner: Owner | None) -> "Footprint":
        """Read a live session's unit, cgroup and processes. Raises HostReadError.

        A footprint is what the suite may later stop and kill: a name from a
        reply is vouched for first (sessionunit.vouch: NotOurs fails the test,
        SUITE-4). owner=None only for the suite's own disposable units (decoys)."""
        if owner is not None:
            try:
                vouch(bus, unit, owner)
            except NotLoaded:
                raise HostReadError(f"{unit} is not loaded right after STARTED") from None
        props = bus.properties(unit, SERVICE_IFACE)
        if props is None:
            raise HostReadError(f"{unit} is not loaded right after STARTED")
        fp = cls(unit, token, control_group=props.get("ControlGroup") or "",
                 timeout_stop_s=(props.get("TimeoutStopUSec") or 0) / 1e6,
                 main_pid=props.get("MainPID") or 0)
        fp.path = cgroup_dir(fp.control_group) or ""
        if not fp.path:
            raise HostReadError(f"{unit}: ControlGroup {fp.control_group!r} is under none of "
                                f"{CGROUP_ROOTS}")
        fp.remember()
        return fp

    def remember(self) -> None:
        """Add what runs now (in the cgroup or tagged) to the processes to account for."""
        self.procs.update(processes_in(self.path) if self.path else {})
        self.procs.update(token_processes(self.token))

    def leftovers(self, bus: Systemd) -> list[str]:
        """What of the session is still there; [] when it is completely gone."""
        left = []
        props = bus.properties(self.unit)
        if props is not None:
            left.append(f"unit {self.unit} still loaded (ActiveState={props.get('ActiveState')} "
                        f"SubState={props.get('SubState')})")
        if self.path and os.path.isdir(self.path):
            left.append(f"cgroup {self.path} still exists with pids {cgroup_pids(self.path)}")
        survivors = {pid: v for pid, v in self.procs.items() if alive(pid, v[0])}
        survivors.update(token_processes(self.token))
        if survivors:
            left.append("processes alive: " + "; ".join(f"pid {pid} {line!r}" for pid, (_, line)
                                                         in sorted(survivors.items())))
        return left

    def kill_survivors(self) -> list[str]:
        """SIGKILL what is left of the session: only processes inside its unit's
        cgroup at that moment (kill_inside: pid reuse guarded, and a process
        outside that carries the token is never hit). Returns the processes
        left alone, described (escaped)."""
        procs = dict(self.procs)
        procs.update(processes_in(self.path) if self.path else {})
        procs.update(token_processes(self.token))
        spared = []
        for pid, (created, line) in sorted(procs.items()):
            why = kill_inside(pid, created, self.control_group)
            if why:
                spared.append(terminal.escape(f"pid {pid} {line!r}: {why}: not signalled"))
        return spared

    def describe(self) -> str:
        return (f"unit={self.unit} cgroup={self.path} TimeoutStopSec={self.timeout_stop_s:g} "
                f"processes={ {pid: line for pid, (_, line) in self.procs.items()} }")

    def stop_bound_s(self) -> float:
        """How long a stop may take: the unit's own TimeoutStopSec, then SIGKILL, plus
        script(1)'s grace and scheduling slack."""
        return self.timeout_stop_s + STOP_GRACE_S + STOP_SLACK_S


def bounded_stop_problem(fp: Footprint) -> str | None:
    """CONC-3: a StopUnit of a session is bounded by a finite TimeoutStopSec."""
    if not 0 < fp.timeout_stop_s <= STOP_BOUND_MAX_S:
        return (f"{fp.unit} has TimeoutStopSec={fp.timeout_stop_s:g} s: a stop is bounded only by a "
                f"finite TimeoutStopSec of at most {STOP_BOUND_MAX_S:g} s")
    return None


def wait_gone(bus: Systemd, footprints: list[Footprint], deadline_s: float,
              since: float | None = None) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Poll until every footprint is gone or the deadline passes.
    Returns (unit -> seconds from `since` until gone, unit -> what was left at the deadline)."""
    start = time.monotonic() if since is None else since
    end = time.monotonic() + deadline_s
    pending = {fp.unit: fp for fp in footprints}
    took: dict[str, float] = {}
    last: dict[str, list[str]] = {}
    while pending:
        for unit, fp in list(pending.items()):
            left = fp.leftovers(bus)
            if not left:
                took[unit] = time.monotonic() - start
                del pending[unit]
                last.pop(unit, None)
            else:
                last[unit] = left
        if not pending or time.monotonic() > end:
            break
        time.sleep(POLL_S)  # poll interval, not a wait for an outcome
    return took, last


def poll(predicate, deadline_s: float, what: str, state=lambda: ""):
    """Call predicate() until it returns something true; TimeoutError names `what`
    and state() at the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not reached within {deadline_s:g} s; {state()}")
        time.sleep(POLL_S)  # poll interval


def write_chars(path: str, name: str) -> int | None:
    """Bytes written so far by the process called `name` in a cgroup (None: none there)."""
    for pid in cgroup_pids(path):
        try:
            proc = psutil.Process(pid)
            if proc.name() == name:
                return proc.io_counters().write_chars
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def wait_stalled(path: str, name: str, deadline_s: float, quiet_s: float = 0.3) -> int:
    """Until the writer `name` in the cgroup has written nothing for quiet_s (it is
    blocked by backpressure). Returns its byte count then."""
    seen: list = [None, time.monotonic()]

    def stalled():
        now, n = time.monotonic(), write_chars(path, name)
        if n is None or n != seen[0]:
            seen[0], seen[1] = n, now
            return None
        return n if now - seen[1] >= quiet_s else None

    return poll(stalled, deadline_s, f"{name} blocked by backpressure",
                lambda: f"{name} write_chars={seen[0]}")


# --------------------------------------------------------------- sessions
class Drain:
    """Read a session at full speed, counting output rather than keeping it
    (RawSession.read keeps every frame; a saturated session is megabytes a second)."""

    def __init__(self, s: RawSession):
        self.s = s
        # what RawSession.read already took (with STARTED, say) counts too
        self.output_bytes = len(s.outcome.output)
        self.output_sample = s.outcome.output[:200]   # first bytes only, as evidence
        self.max_frame = max([len(f.payload) for f in s.outcome.frames if f.type == p.T.OUTPUT],
                             default=0)

    def until(self, done, deadline_s: float):
        out = self.s.outcome
        end = time.monotonic() + deadline_s
        while not done(self):
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"not reached within {deadline_s:g} s: {out.describe()} "
                                   f"output_bytes={self.output_bytes}")
            ready, _, _ = select.select([self.s.sock], [], [], left)
            if not ready:
                continue
            try:
                data = self.s.sock.recv(262144)
            except ConnectionResetError:
                out.closed = "reset"
                return
            if not data:
                out.closed = "eof"
                return
            for f in self.s.decoder.feed(data):
                if f.type == p.T.OUTPUT:
                    self.output_bytes += len(f.payload)
                    self.max_frame = max(self.max_frame, len(f.payload))
                    if len(self.output_sample) < 200:
                        self.output_sample = (self.output_sample + f.payload)[:200]
                    continue
                out.frames.append(f)
                if f.type == p.T.STARTED:
                    out.unit = f.payload.decode("ascii", "replace")
                elif f.type == p.T.EXIT:
                    out.exit = p.parse_exit(f)
                elif f.type == p.T.ERROR:
                    out.error = p.parse_error(f)

    def to_end(self, deadline_s: float):
        self.until(lambda d: d.s.outcome.exit or d.s.outcome.error or d.s.outcome.closed, deadline_s)
        return self.s.outcome


class Sessions:
    """Raw sessions of one test and their footprints; close() ends them all, waits
    until they are gone and stops what the supervisor left running."""

    def __init__(self, bus: Systemd, peer, socket_path: str, owner: Owner):
        self.bus, self.peer, self.path, self.owner = bus, peer, socket_path, owner
        self.open_sessions: list[RawSession] = []
        self.footprints: list[Footprint] = []
        self.refused: list[str] = []  # tokens of sessions whose STARTED named a unit not ours

    def start(self, argv: list[str], runtime_s: int = 60, fds: list[int] | None = None) -> RawSession:
        """Open an authenticated session and send START (fds=None: one cwd descriptor)."""
        s = RawSession(self.peer, self.path).open()
        self.open_sessions.append(s)
        s.start(argv, runtime_s, fds=fds)
        return s

    def started(self, s: RawSession, token: str, deadline_s: float = 10) -> Footprint:
        """Wait for STARTED and take the footprint (fails the test if there is none)."""
        out = s.wait_started(deadline_s)
        try:
            fp = Footprint.capture(self.bus, out.unit, token, self.owner)
        except HostReadError as e:
            raise Unreadable(f"SUITE-3: cannot read the live session: {e}") from None
        except NotOurs:
            s.close()  # the supervisor ends a session whose connection closes
            self.refused.append(token)
            raise
        self.footprints.append(fp)
        return fp

    def attempt(self, token: str, runtime_s: int = 60, deadline_s: float = 10) -> "Attempt":
        """One start attempt of `sleep 60` (tagged) that may be refused at HELLO or at
        START; a session that does start is taken into account like any other."""
        s = RawSession(self.peer, self.path)
        try:
            s.open()
        except SessionError:
            return Attempt.from_hello(s.hello or {})
        self.open_sessions.append(s)
        s.start(tagged_sh(f"exec sleep 60.{token}", token), runtime_s)
        out = s.read(lambda o: o.unit or o.error or o.exit, deadline_s)
        if out.unit:
            self.started(s, token)
        return Attempt(error=out.error, unit=out.unit, session=s,
                       text=f"START answered: {out.describe()}")

    def close(self) -> list[str]:
        """End every session (close its connection), wait until all are gone; stop
        leftover units. Returns what had to be removed by force."""
        for s in self.open_sessions:
            s.close()
        deadline = max([fp.stop_bound_s() for fp in self.footprints] or [0.0])
        _, left = wait_gone(self.bus, self.footprints, deadline)
        force_stop(self.bus, list(left))
        out = [f"{unit}: {what}" for unit, what in left.items()]
        for fp in self.footprints:
            if fp.unit in left:
                out += [f"{fp.unit}: {spared}" for spared in fp.kill_survivors() or []]
        for token in self.refused:
            out += end_refused(token)
        return out


def end_refused(token: str, deadline_s: float = STOP_GRACE_S + STOP_SLACK_S + 6) -> list[str]:
    """A session whose STARTED named a unit the suite refused: its connection is
    closed (the supervisor ends the session); what carries its token is waited
    for and reported, never signalled: it runs in no unit the suite vouched
    for, and any process of the service user may carry the token (SUITE-4)."""
    end = time.monotonic() + deadline_s
    while (left := token_processes(token)) and time.monotonic() < end:
        time.sleep(POLL_S)  # poll interval
    if not left:
        return []
    shown = "; ".join(f"pid {pid} {line!r}" for pid, (_, line) in sorted(left.items()))
    return [terminal.escape(f"refused session {token}: still alive {deadline_s:g} s after its connection "
                            f"was closed, not signalled (in no unit of the suite's): {shown}")]


@dataclass
class Attempt:
    error: tuple[int, str] | None = None
    unit: str | None = None
    session: RawSession | None = None
    text: str = ""

    @classmethod
    def from_hello(cls, frame: dict) -> "Attempt":
        if frame.get("name") == "ERROR":
            err = p.parse_error(p.Frame(frame["type"], bytes.fromhex(frame["payload"])))
            return cls(error=err, text=f"HELLO answered ERROR {err}")
        return cls(text=f"HELLO answered {frame}")

    def refused_with(self, code: int) -> bool:
        return self.unit is None and self.error is not None and self.error[0] == code


def force_stop(bus: Systemd, units: list[str]) -> None:
    """Remove units the supervisor (or a failed test) left behind, side by side."""
    stopping = []
    for unit in units:
        try:
            if bus.unit_path(unit) is not None:
                bus.stop(unit)
                stopping.append(unit)
        except BusError:
            pass
    for unit in stopping:
        try:
            bus.wait_for(unit, lambda pr: pr is None or pr.get("ActiveState") in
                         ("inactive", "failed"), 15, "stopped")
            bus.reset_failed(unit)
        except (BusError, TimeoutError):
            pass


# --------------------------------------------------------------- supervisor
def supervisor_ready(bus: Systemd, name: str, socket_path: str) -> bool:
    """Active/running (Type=notify: READY comes after listen) and its socket exists."""
    props = bus.properties(name)
    if not props or props.get("ActiveState") != "active" or props.get("SubState") != "running":
        return False
    try:
        return stat.S_ISSOCK(os.stat(socket_path).st_mode)
    except OSError:
        return False


def wait_supervisor_ready(bus: Systemd, name: str, socket_path: str, deadline_s: float = 30,
                          invocation: bytes | None = None) -> dict:
    """Until the supervisor is ready (and, if given, no longer `invocation`)."""
    def ready():
        if not supervisor_ready(bus, name, socket_path):
            return None
        props = bus.properties(name)
        if invocation is not None and bytes(props.get("InvocationID") or b"") == invocation:
            return None
        return props

    def state():
        props = bus.properties(name) or {}
        return (f"{name} ActiveState={props.get('ActiveState')} SubState={props.get('SubState')}, "
                f"socket {socket_path} exists={os.path.exists(socket_path)}")

    return poll(ready, deadline_s, f"{name} ready with its socket", state)


def start_supervisor(bus: Systemd, name: str, socket_path: str) -> None:
    bus.reset_failed(name)
    bus.call("StartUnit", "ss", (name, "replace"))
    wait_supervisor_ready(bus, name, socket_path)


# --------------------------------------------------------------- decoys
@dataclass
class Decoy:
    """A transient unit of the suite's (tagged, so a crashed run's leftover is
    found) that looks like a session unit: a planted orphan or a look-alike."""

    bus: Systemd
    name: str
    tag: str
    binds_to: list[str] = field(default_factory=list)
    token: str = ""           # in its argv, so its processes can be found (Footprint)

    def start(self) -> "Decoy":
        props = [
            ("Description", ("s", f"{TAG_PREFIX} {self.tag}: decoy {self.name}")),
            ("Type", ("s", "exec")),
            ("User", ("s", "nobody")),
            ("NoNewPrivileges", ("b", True)),
            ("ExecStart", ("a(sasb)", [("/bin/sleep", ["/bin/sleep", f"300.{self.token}"], False)])),
            ("CollectMode", ("s", "inactive-or-failed")),
            ("TimeoutStopUSec", ("t", 5_000_000)),
        ]
        if self.binds_to:
            props += [("BindsTo", ("as", self.binds_to)), ("After", ("as", self.binds_to))]
        self.bus.start_transient(self.name, props)
        self.bus.wait_for(self.name, lambda pr: pr and pr.get("ActiveState") == "active", 10, "active")
        return self

    def state(self) -> dict | None:
        props = self.bus.properties(self.name)
        if props is None:
            return None
        return {"ActiveState": props.get("ActiveState"), "SubState": props.get("SubState"),
                "InvocationID": bytes(props.get("InvocationID") or b"").hex()}

    def remove(self) -> None:
        force_stop(self.bus, [self.name])


def strict_session_name() -> str:
    return f"opencode-pty-{secrets.token_hex(16)}.service"


# --------------------------------------------------------------- input
def fill_input(s: RawSession, limit: int = 4 << 20) -> int:
    """Send DATA frames without blocking until the supervisor stops taking them
    (or `limit` bytes). Returns the bytes sent."""
    chunk = p.encode(p.T.DATA, b"i" * p.LIMITS.data_bytes)
    sent = 0
    s.sock.setblocking(False)
    try:
        view = memoryview(b"")
        while sent < limit:
            if not view:
                view = memoryview(chunk)
            try:
                n = s.sock.send(view)
            except (BlockingIOError, InterruptedError):
                ready = select.select([], [s.sock], [], 0.5)[1]
                if not ready:
                    break   # nobody takes input any more: blocked
                continue
            except OSError:   # the supervisor closed the connection
                break
            view = view[n:]
            sent += n
    finally:
        s.sock.setblocking(True)
    return sent


# --------------------------------------------------------------- endings
@dataclass
class Ending:
    """One session ended one way, driven in a thread of its own with its own bus
    connection. drive(ending) causes the end (calling caused() at that moment) and
    checks the stream; expect_gone() then holds it to its bound."""

    name: str
    script: str               # sh script; {t} is replaced by the session's token
    drive: object
    runtime_s: int = 60
    token: str = field(default_factory=new_token)
    s: RawSession | None = None
    fp: Footprint | None = None
    bus: Systemd | None = None
    t0: float | None = None   # when the suite caused the end
    checked: bool = False
    facts: list = field(default_factory=list)
    problems: list = field(default_factory=list)

    def caused(self) -> None:
        self.t0 = time.monotonic()

    def expect_gone(self, bound_s: float | None = None) -> None:
        """Unit, cgroup and processes gone within the bound, counted from caused()."""
        self.checked = True
        bound = bound_s or self.fp.stop_bound_s()
        since = self.t0 if self.t0 is not None else time.monotonic()
        took, left = wait_gone(self.bus, [self.fp], max(0.1, bound - (time.monotonic() - since)),
                               since=since)
        if left:
            self.problems.append(f"expected the unit, its cgroup and its processes gone within "
                                 f"{bound:.1f} s, the host still had: {left[self.fp.unit]}")
        else:
            self.facts.append(f"gone {took[self.fp.unit]:.2f} s after the end was caused "
                              f"(bound {bound:.1f} s)")

    def stream_end(self, drain: Drain | None = None, deadline_s: float = 15):
        out = (drain or Drain(self.s)).to_end(deadline_s)
        self.facts.append(f"stream: exit={out.exit} error={out.error} closed={out.closed}")
        return out

    def want_exit(self, out) -> None:
        if out.exit is None:
            self.problems.append(f"expected an EXIT frame, the stream ended with {out.describe()}")

    def run(self) -> None:
        self.bus = Systemd.connect()
        try:
            self.drive(self)
            if not self.checked:
                self.expect_gone()
        except NotOurs:  # a refusal fails the test under SUITE-4, not as one case's problem
            raise
        except Exception as ex:  # every failure of a case is reported with the others
            self.problems.append(f"{type(ex).__name__}: {ex}")
        finally:
            self.bus.close()


def run_endings(sessions: Sessions, endings: list[Ending], evidence, prepare=None) -> list[str]:
    """Start every ending's session (here: the agent serves one request at a time),
    optionally prepare(ending) once it is STARTED, then drive all side by side.
    Returns the problems, each naming its case and unit (CONC-3's bounded stop included)."""
    for e in endings:
        e.s = sessions.start(tagged_sh(e.script.format(t=e.token), e.token), e.runtime_s)
    for e in endings:
        e.fp = sessions.started(e.s, e.token)
        if problem := bounded_stop_problem(e.fp):
            e.problems.append(f"CONC-3: {problem}")
        if prepare is not None:
            try:
                prepare(e)
            except (TimeoutError, HostReadError) as ex:
                e.problems.append(str(ex))
    # Daemon threads, joined against one deadline: an interrupt (SIGINT, SIGTERM)
    # unwinds the main thread at once and the process never waits for them (SUITE-5).
    # Joined in short slices: a signal landing between CPython's pending-signal
    # check and a lock wait does not cut that wait short, and is acted on only
    # when it returns (one long join could hold an interrupted run up to the deadline).
    threads = [threading.Thread(target=e.run, name=e.name, daemon=True) for e in endings]
    for t in threads:
        t.start()
    end = time.monotonic() + ENDINGS_DEADLINE_S
    for t in threads:
        while t.is_alive() and time.monotonic() < end:
            t.join(min(JOIN_SLICE_S, max(0.0, end - time.monotonic())))
    for e, t in zip(endings, threads):
        if t.is_alive():
            e.problems.append(f"still being driven {ENDINGS_DEADLINE_S:g} s after the cases began")
    problems = []
    for e in endings:
        evidence(e.name, f"{e.fp.describe()}; " + "; ".join(e.facts))
        problems += [f"{e.name} ({e.fp.unit}): {x}" for x in e.problems]
    return problems
