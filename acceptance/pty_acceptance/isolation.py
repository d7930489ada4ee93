"""Same-UID isolation facts (ISO-1): the target, the probe run as the service
user, and what root reads of the target's descriptors and of the supervisor
socket's connections.

The target is the one process listening on ports.candidate: the runtime that
becomes the peer at cutover (the suite never touches a real peer service).
The probe (isoprobe.py) runs in a disposable, tagged transient unit as the
service user; its output is hostile bytes: bounded, parsed, never trusted
beyond its JSON shape.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import runtime
from .bus import BusError, Systemd
from .peer import TAG_PREFIX

PROBE = "isoprobe.py"
BEGIN, END = b"ISOPROBE-BEGIN", b"ISOPROBE-END"
MAX_OUTPUT = 64 * 1024
PROBE_DEADLINE_S = 20
STOP_DEADLINE_S = 10
O_CLOEXEC = 0o2000000
YAMA = "/proc/sys/kernel/yama/ptrace_scope"


class IsolationError(Exception):
    pass


@dataclass(frozen=True)
class Target:
    pid: int
    start_ticks: int
    exe: str
    uid: int
    proc_owner: int  # owner of /proc/<pid> (root when the kernel marks it not dumpable)

    def describe(self) -> str:
        return (f"pid {self.pid} ({self.exe}, uid {self.uid}, start {self.start_ticks} ticks), "
                f"/proc/{self.pid} owned by uid {self.proc_owner}")


def start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read(4096)
    return int(data[data.rindex(b")") + 2:].split()[19])


def yama() -> str:
    try:
        with open(YAMA) as f:
            return f"ptrace_scope {f.read(16).strip()}"
    except FileNotFoundError:
        return "absent (no Yama LSM: same-UID ptrace is limited only by dumpability)"
    except OSError as e:
        return f"unreadable: {e.strerror}"


def find_target(port: int) -> Target:
    found = runtime.listener(port)
    if found.problem:
        raise IsolationError(f"no target on port {port}: {found.problem}")
    pid = found.pid
    try:
        ticks = start_ticks(pid)
        owner = os.lstat(f"/proc/{pid}").st_uid
    except (OSError, ValueError) as e:
        raise IsolationError(f"cannot read /proc/{pid}: {e}") from None
    return Target(pid, ticks, found.exe_link or "?", found.uids[1], owner)


def parse_report(output: bytes) -> dict:
    """The probe's JSON from its (hostile, bounded) output."""
    start = output.find(BEGIN)
    end = output.find(END, start + 1)
    if start < 0 or end < 0:
        raise IsolationError(f"no probe report in its output: {output[-300:]!r}")
    try:
        report = json.loads(output[start + len(BEGIN):end])
    except ValueError as e:
        raise IsolationError(f"probe report is not JSON ({e}): {output[start:start + 300]!r}") from None
    if not isinstance(report, dict) or not isinstance(report.get("results"), list) or not all(
            isinstance(r, dict) and isinstance(r.get("vector"), str) and
            r.get("outcome") in ("worked", "refused") and isinstance(r.get("detail"), str)
            for r in report["results"]):
        raise IsolationError(f"probe report has the wrong shape: {output[start:start + 300]!r}")
    return report


def run_probe(bus: Systemd, *, user: str, group: str, tag: str, target: Target,
              python: str = "/usr/bin/python3") -> dict:
    """Run isoprobe.py as `user` in a disposable unit against `target`."""
    stage = tempfile.mkdtemp(prefix="pty-acceptance-iso-")
    name = f"pty-acceptance-iso-{tag}.service"
    r, w = os.pipe2(os.O_CLOEXEC)
    started = False
    try:
        os.chmod(stage, 0o755)
        script = os.path.join(stage, PROBE)
        shutil.copyfile(Path(__file__).with_name(PROBE), script)
        os.chmod(script, 0o644)
        props = [
            ("Description", ("s", f"{TAG_PREFIX} {tag}: ISO-1 probe")),
            ("Type", ("s", "exec")), ("User", ("s", user)), ("Group", ("s", group)),
            ("Slice", ("s", "system.slice")), ("WorkingDirectory", ("s", "/")),
            ("ExecStart", ("a(sasb)", [(python, [python, "-I", script, str(target.pid),
                                                 str(target.start_ticks)], False)])),
            ("StandardInput", ("s", "null")),
            ("StandardOutputFileDescriptor", ("h", w)),
            ("StandardError", ("s", "journal")),
            ("CollectMode", ("s", "inactive-or-failed")),
            ("RuntimeMaxUSec", ("t", PROBE_DEADLINE_S * 1_000_000)),
        ]
        try:
            bus.start_transient(name, props)
        except BusError as e:
            raise IsolationError(f"cannot start the probe unit {name}: {e}") from None
        started = True
        os.close(w)
        w = -1
        out = _read_until_eof(r, PROBE_DEADLINE_S)
        return parse_report(out)
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)
        if started:
            _stop(bus, name)
        shutil.rmtree(stage, ignore_errors=True)


def _read_until_eof(fd: int, deadline_s: float) -> bytes:
    out = b""
    deadline = time.monotonic() + deadline_s
    while len(out) <= MAX_OUTPUT:
        left = deadline - time.monotonic()
        if left <= 0:
            raise IsolationError(f"the probe did not finish within {deadline_s} s; "
                                 f"it wrote {len(out)} bytes: {out[-200:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return out
            out += chunk
    raise IsolationError(f"the probe wrote more than {MAX_OUTPUT} bytes")


def _stop(bus: Systemd, name: str) -> None:
    try:
        if bus.unit_path(name) is not None:
            try:
                bus.stop(name)
            except BusError as e:
                if not e.name.endswith("NoSuchUnit"):
                    raise
            bus.wait_for(name, lambda p: p is None or p.get("ActiveState") in ("inactive", "failed"),
                         STOP_DEADLINE_S, "stopped")
            bus.reset_failed(name)
    except BusError as e:
        if not e.name.endswith("NoSuchUnit"):
            raise


# ------------------------------------------------------------------ root's view
def fd_flags(fdinfo: str) -> int | None:
    """The `flags:` field (octal) of a /proc/<pid>/fdinfo/<n> text."""
    for line in fdinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            try:
                return int(value.strip(), 8)
            except ValueError:
                return None
    return None


def inheritable_fds(pid: int) -> tuple[list[str], int]:
    """([fd n -> target, flags] for every descriptor >= 3 without O_CLOEXEC, count checked)."""
    bad, seen = [], 0
    base = f"/proc/{pid}"
    try:
        names = sorted(int(n) for n in os.listdir(f"{base}/fd"))
    except OSError as e:
        raise IsolationError(f"cannot list {base}/fd as root: {e.strerror}") from None
    for n in names:
        if n < 3:
            continue
        try:
            with open(f"{base}/fdinfo/{n}") as f:
                flags = fd_flags(f.read(4096))
            link = os.readlink(f"{base}/fd/{n}")
        except OSError:
            continue  # closed while we read it
        seen += 1
        if flags is None:
            bad.append(f"fd {n} -> {link[:120]}: no flags field")
        elif not flags & O_CLOEXEC:
            bad.append(f"fd {n} -> {link[:120]}: flags {flags:o}, no O_CLOEXEC")
    return bad, seen


def socket_holders() -> dict[int, list[int]]:
    """socket inode -> pids holding it (root reads every /proc/<pid>/fd link)."""
    holders: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for n in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{n}")
            except OSError:
                continue
            if link.startswith("socket:["):
                holders.setdefault(int(link[8:-1]), []).append(int(pid))
    return holders


def supervisor_connections(path: str) -> list[tuple[int, int]]:
    """(supervisor-side inode, client-side inode) of every connection to `path`.

    Accepted UNIX sockets carry the listener's address; their peer is the
    client's socket (sock_diag, pyroute2)."""
    from pyroute2 import DiagSocket

    pairs = []
    try:
        with DiagSocket() as ds:
            ds.bind()
            for m in ds.get_sock_stats(family=socket.AF_UNIX):
                if m.get_attr("UNIX_DIAG_NAME") == path and m["udiag_state"] == 1:
                    pairs.append((m["udiag_ino"], m.get_attr("UNIX_DIAG_PEER") or 0))
    except OSError as e:
        raise IsolationError(f"sock_diag of UNIX sockets failed: {e}") from None
    return pairs


def exe_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError as e:
        return f"? ({e.strerror})"
