"""The suite as the peer service (TARGET-CONTRACT section 6).

A disposable transient unit (by default `opencode-v2.service`, User= the
service user, in system.slice) whose MainPID is the peer agent (agent.py),
driven over a socketpair that is the unit's stdin/stdout. Every unit carries
the run's tag in its Description so that a later run can find and remove
what a crashed run left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import socket
import stat
import time
from pathlib import Path
from typing import cast

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs, scratch
from pty_acceptance.supervisor import protocol
from pty_acceptance.host.bus import BusError, Systemd
from pty_acceptance.host.userunit import DISPOSABLE, copy_interpreter

TAG_PREFIX = DISPOSABLE  # every unit the suite makes (userunit.py)
PACKAGE = Path(__file__).resolve().parents[1]
AGENT_FILES = (PACKAGE / "probes" / "agent.py", PACKAGE / "supervisor" / "protocol.py")
START_DEADLINE_S = 10
STOP_DEADLINE_S = 15


class PeerError(Unreadable):
    pass


class ForeignUnit(PeerError):
    """A unit of that name exists that the suite did not create: it is never
    started, stopped or replaced (the real peer service after the cutover)."""
    requirements = ("SUITE-1",)


def run_tag() -> str:
    return secrets.token_hex(4)


STAGED_PYTHON = "python3"  # its execute-only copy's name in a stage (stage(..., interpreter=True))


def stage(files, prefix: str = "pty-acceptance-agent-", interpreter: bool = False) -> str:
    """A root-owned 0755 directory in the run's scratch area holding 0644
    copies of these library files (side by side, by their base names), for
    the service user; scratch.remove() it. With `interpreter`, also a copy
    of the host's Python, root-owned and execute-only (0711, STAGED_PYTHON):
    the kernel makes a process not dumpable at its exec when its user cannot
    read what it runs, so no other process of the service user can attach
    to the agent or a probe while it starts, before its own prctl (a blind
    red team's round seven: a host without Yama lets a process of the user
    attach to any dumpable process of the user's)."""
    d = scratch.make(prefix, mode=0o755)
    try:
        dfd = hostfs.open_dir(d)
        try:
            for path in files:
                hostfs.create_at(dfd, path.name, path.read_bytes(), 0o644)
            if interpreter:
                copy_interpreter(dfd, STAGED_PYTHON)
        finally:
            os.close(dfd)
    except BaseException:
        scratch.remove(d)
        raise
    return d


def stage_agent() -> str:
    return stage(AGENT_FILES, interpreter=True)


def stop_unit(bus: Systemd, name: str, deadline_s: float = STOP_DEADLINE_S) -> None:
    """A disposable unit stopped (or gone) within the deadline, its failed state reset."""
    try:
        if bus.unit_path(name) is None:
            return
        try:
            bus.stop(name)
        except BusError as e:  # it ended by itself first
            if not e.name.endswith("NoSuchUnit"):
                raise
        bus.wait_for(name, lambda p: p is None or p.get("ActiveState") in ("inactive", "failed"),
                     deadline_s, "stopped")
        bus.reset_failed(name)
    except BusError as e:  # collected between two calls (CollectMode=inactive-or-failed)
        if not e.name.endswith("NoSuchUnit"):
            raise


CALL_DEADLINE_S = 60.0  # Agent.call: a reply within this, all reads together


class AgentTimeout(PeerError, TimeoutError):  # callers that took the per-read timeout still take it
    """An agent's reply that did not come, whole, within CALL_DEADLINE_S."""
REPLY_LIMIT = 1 << 20  # Agent.call: the most of one reply line kept


class Agent:
    """The control channel to one agent."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        sock.settimeout(60)

    def call(self, op: str, fds: list[int] | tuple[int, ...] = (), **kw) -> tuple[dict, list[int]]:
        """One request and its reply line, within CALL_DEADLINE_S in all (a blind red team's
        round ten: a byte every 50 s kept a per-read timeout from ever ending the call)."""
        protocol.send_frame(self.sock, json.dumps({"op": op, **kw}).encode() + b"\n", list(fds))
        got: list[int] = []
        end = time.monotonic() + CALL_DEADLINE_S

        def late() -> AgentTimeout:
            return AgentTimeout(f"the agent's reply to {op!r} was not a line within {CALL_DEADLINE_S:g} s and "
                                f"{REPLY_LIMIT} bytes ({len(self.buf)} bytes, no end of line)")
        try:
            while b"\n" not in self.buf:
                left = end - time.monotonic()
                if left <= 0 or len(self.buf) > REPLY_LIMIT:
                    raise late()
                self.sock.settimeout(left)
                try:
                    data, fds_in, _ = protocol.recv_with_fds(self.sock, 65536, maxfds=4)
                except TimeoutError:
                    raise late() from None
                got += fds_in
                if not data:
                    raise PeerError(f"agent closed the control channel during {op!r}")
                self.buf += data
        except BaseException:
            protocol.close_all(got)
            raise
        line, self.buf = self.buf.split(b"\n", 1)
        reply = json.loads(line)
        if not reply.get("ok"):
            protocol.close_all(got)
            raise PeerError(f"agent {op!r} failed: {reply.get('error')}")
        return reply, got

    def __call__(self, op: str, **kw) -> dict:
        reply, fds = self.call(op, **kw)
        protocol.close_all(fds)
        return reply


class DisposableUnit:
    """A transient unit running the agent: the peer, or an impostor of it."""

    def __init__(self, bus: Systemd, *, name: str, user: str, group: str, tag: str,
                 python: str | None = None, slice_: str = "system.slice",
                 extra: list | tuple = ()):
        self.bus, self.name, self.user, self.group = bus, name, user, group
        self.tag, self.python, self.slice, self.extra = tag, python, slice_, list(extra)
        self.stage: str | None = None
        self.agent: Agent | None = None
        self.info: dict = {}
        self.requested = False  # StartTransientUnit was sent: stop() may touch the name

    def properties(self) -> list:
        agent_path = os.path.join(cast(str, self.stage), "agent.py")  # start() staged it first
        python = self.python or os.path.join(cast(str, self.stage), STAGED_PYTHON)  # execute-only
        return [
            ("Description", ("s", f"{TAG_PREFIX} {self.tag}: {self.name}")),
            ("Type", ("s", "exec")),
            ("User", ("s", self.user)),
            ("Group", ("s", self.group)),
            ("Slice", ("s", self.slice)),
            ("WorkingDirectory", ("s", "/")),
            ("ExecStart", ("a(sasb)", [(python, [python, "-I", agent_path], False)])),
            ("StandardError", ("s", "journal")),
            ("CollectMode", ("s", "inactive-or-failed")),
            ("TimeoutStopUSec", ("t", 5_000_000)),
        ] + self.extra

    def start(self) -> "DisposableUnit":
        refuse_foreign(self.bus, self.name)
        try:
            return self._start()
        except BaseException:
            # a failure or an interrupt half way (SUITE-5): a fixture whose
            # setup raised is never torn down, so nothing of the start may stay
            try:
                self.stop()
            except Exception:
                pass
            raise

    def _start(self) -> "DisposableUnit":
        self.stage = stage_agent()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            props = self.properties() + [
                ("StandardInputFileDescriptor", ("h", theirs.fileno())),
                ("StandardOutputFileDescriptor", ("h", theirs.fileno())),
            ]
            self.requested = True
            self.bus.start_transient(self.name, props)
        except BusError as e:
            mine.close()
            raise PeerError(f"cannot start {self.name}: {e}") from None
        finally:
            theirs.close()
        self.agent = Agent(mine)
        self.info = self.agent("ready")
        self.bus.wait_for(self.name, lambda p: p and p.get("ActiveState") == "active"
                          and p.get("SubState") == "running", START_DEADLINE_S, "active/running")
        svc = self.bus.properties(self.name, "org.freedesktop.systemd1.Service") or {}
        if svc.get("MainPID") != self.info["pid"]:
            raise PeerError(f"{self.name}: MainPID {svc.get('MainPID')} is not the agent "
                            f"{self.info['pid']}")
        self.info["control_group"] = svc.get("ControlGroup")
        return self

    def fork_agent(self, ignore_term: bool = False) -> "ChildAgent":
        """A child of this unit's agent that is an agent of its own (see agent.op_fork_agent)."""
        reply, fds = cast(Agent, self.agent).call("fork_agent", ignore_term=ignore_term)  # started
        if len(fds) != 1:
            protocol.close_all(fds)
            raise PeerError(f"agent of {self.name} handed over {len(fds)} descriptors, expected 1")
        child = ChildAgent(self.name, Agent(socket.socket(fileno=fds[0])))
        child.info = child.agent("ready")
        return child

    def stop(self) -> None:
        if self.agent is not None:
            try:
                self.agent.sock.close()
            except OSError:
                pass
            self.agent = None
        try:
            if self.requested:  # never a unit of that name the suite did not ask for
                stop_unit(self.bus, self.name)
        finally:
            if self.stage:
                scratch.remove(self.stage)
                self.stage = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class ChildAgent:
    """A process of a unit that is not its MainPID, driven like the unit's own agent."""

    def __init__(self, unit: str, agent: Agent):
        self.name, self.agent = unit, agent
        self.info: dict = {}

    def close(self) -> None:
        """End it: at end of its control channel the child exits."""
        self.agent.sock.close()


def refuse_foreign(bus: Systemd, name: str) -> None:
    """The one guard before the suite creates a unit `name`: ForeignUnit if a
    unit of that name is loaded (a unit file, or running) without the suite's
    tag; PeerError if that cannot be read."""
    try:
        props = bus.properties(name)
    except BusError as e:
        raise PeerError(f"cannot read {name}: {e}") from None
    if props and (props.get("FragmentPath") or props.get("LoadState") not in ("not-found", None)) \
            and TAG_PREFIX not in (props.get("Description") or ""):
        raise ForeignUnit(f"{name} is loaded from {props.get('FragmentPath') or props.get('LoadState')}: "
                          "the suite never starts, stops or replaces a unit it did not create "
                          "(the peer: run acceptance before the cutover installs it)")


def start_peer(bus: Systemd, inv, tag: str) -> DisposableUnit:
    """The disposable peer (inventory units.peer as the service user), started;
    PeerError (ForeignUnit for a real peer service) when it cannot be, with
    nothing left running."""
    name = inv.units.peer
    unit = DisposableUnit(bus, name=name, user=inv.service_user, group=inv.service_group, tag=tag)
    try:
        return unit.start()  # a start that fails has stopped what it made
    except ForeignUnit:
        raise
    except (PeerError, BusError, TimeoutError) as e:
        raise PeerError(f"the disposable peer {name} did not start: {e}") from None


def cleanup_leftovers(bus: Systemd) -> list[str]:
    """Stop every disposable unit an earlier (crashed) run left behind, each
    waited for until it is gone (so that its name can be used again at once).
    Returns the names found."""
    names = bus.call("ListUnits")[0]
    removed = []
    for row in names:
        name, description = row[0], row[1]
        if description.startswith(TAG_PREFIX):
            removed.append(name)
            try:
                stop_unit(bus, name)
            except (BusError, TimeoutError):
                pass
    return removed


def open_cwd(path: str) -> int:
    """An O_DIRECTORY descriptor for a session's working directory (no links)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise PeerError(f"{path} is not a directory")
    return fd


@contextlib.contextmanager
def workspace(user: str, prefix: str):
    """A fresh 0700 directory of the service user for a session's cwd: made by
    root in the run's scratch area (whose root-owned parent the user
    cannot rename in), handed over through its descriptor (never by path),
    removed by descriptor afterwards (SUITE-4). Yields (its path, reached
    without a link: as strace and /proc show it, (st_dev, st_ino))."""
    acct = pwd.getpwnam(user)
    d, ident = scratch.made(prefix, owner=(acct.pw_uid, acct.pw_gid), mode=0o700)
    try:
        yield d, ident
    finally:
        scratch.remove(d)
