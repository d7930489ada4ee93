"""Same-UID isolation facts (ISO-1), read as root, and the probe run as the
service user.

The target is the one process listening on ports.candidate: the runtime that
becomes the peer at cutover (the suite never touches a real peer service).
Root reads its pid, start time (clock ticks, the PID-reuse guard), uids and
gids, the owner of /proc/<pid>/fd (root while its euid is not root means the
kernel marked it not dumpable; /proc/<pid> itself always belongs to the euid)
and whether Yama is present. The probe
(isoprobe.py) runs in a disposable, tagged transient unit as the service
user; its output is hostile bytes: bounded, parsed, never trusted beyond its
JSON shape.

Also read as root: the target's descriptors >= 3 that lack O_CLOEXEC (what a
child it spawns inherits and could pass on), and who holds the two ends of
every connection to the supervisor socket (sock_diag via pyroute2, holders
from every /proc/<pid>/fd link).
"""
from __future__ import annotations

import json
import os
import select
import socket
import stat
import time
from dataclasses import dataclass
from typing import cast

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import hostfs, observe, proc, scratch
from pty_acceptance.provenance import node_runtime
from pty_acceptance.supervisor import peer
from pty_acceptance.host.bus import SERVICE_IFACE, BusError, Systemd
from pty_acceptance.host.hostfs import read_nofollow
from pty_acceptance.supervisor.peer import TAG_PREFIX

PROBE = "isoprobe.py"
BEGIN, END = b"ISOPROBE-BEGIN", b"ISOPROBE-END"
VECTORS = ("ptrace", "proc-fd-list", "proc-fd-open", "proc-environ", "proc-fdinfo", "proc-mem",
           "process_vm_readv", "pidfd_getfd", "pidfd_send_signal", "kill")
OUTCOMES = ("refused", "worked")
MAX_OUTPUT = 64 * 1024
MAX_DETAIL = 300
EXCERPT = 200
PROBE_DEADLINE_S = 20
STOP_DEADLINE_S = 10
O_CLOEXEC = 0o2000000
YAMA = "/proc/sys/kernel/yama/ptrace_scope"
SS_ESTABLISHED = 1


class IsolationError(Unreadable):
    pass


def _excerpt(data: bytes) -> str:
    return repr(data[:EXCERPT]) + ("..." if len(data) > EXCERPT else "")


def printable(text: str) -> str:
    """Text from hostile output as evidence: control characters become '?'."""
    return "".join(c if c.isprintable() else "?" for c in text)


# ------------------------------------------------------------------ the target
@dataclass(frozen=True)
class Target:
    pid: int
    start_ticks: int
    exe: str
    uids: tuple[int, ...]   # real, effective, saved
    gids: tuple[int, ...]
    fd_owner: int           # owner of /proc/<pid>/fd: root when not dumpable
    create_time: float | None = None           # psutil's, as the listener was read
    exe_dev_ino: tuple[int, int] | None = None  # what /proc/<pid>/exe is, by device and inode

    @property
    def uid(self) -> int:
        return self.uids[1]

    @property
    def dumpable(self) -> bool:
        """The kernel gives /proc/<pid>/fd (not /proc/<pid>) to root when the
        process is not dumpable."""
        return self.fd_owner == self.uid

    def describe(self) -> str:
        return f"pid {self.pid} ({self.exe}, uid {self.uid})"

    def facts(self, yama_state: str) -> str:
        dump = "dumpable" if self.dumpable else "not dumpable"
        return f"Yama {yama_state}, /proc/{self.pid}/fd owned by uid {self.fd_owner} ({dump})"


def stat_field(data: bytes, number: int) -> bytes:
    """Field `number` (3 = state, 22 = starttime) of a /proc/<pid>/stat text (proc.stat_field)."""
    try:
        return proc.stat_field(data, number)
    except ValueError:
        raise IsolationError(f"malformed /proc stat line: {_excerpt(data)}") from None


def stat_start_ticks(data: bytes) -> int:
    """Field 22 (starttime) of a /proc/<pid>/stat text."""
    try:
        return int(stat_field(data, 22))
    except ValueError:
        raise IsolationError(f"malformed /proc stat line: {_excerpt(data)}") from None


def read_stat(pid: int) -> bytes:
    try:
        return proc.stat_line(pid)
    except OSError as e:
        raise IsolationError(f"cannot read /proc/{pid}/stat: {e.strerror}") from None


def start_ticks(pid: int) -> int:
    return stat_start_ticks(read_stat(pid))


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat: R, S, D, T (stopped), Z, ..."""
    return stat_field(read_stat(pid), 3).decode("ascii", "replace")


def yama() -> str:
    """'absent', 'ptrace_scope N' or why it could not be read."""
    try:
        value = read_nofollow(YAMA, 16).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return f"unreadable ({e.strerror})"
    return f"ptrace_scope {value}"


EXEC_STEADY_S = hostfs.EXEC_STEADY_S


def readable_to(path: str, uid: int, gids: set[int], started_ns: int | None = None,
                steady_s: float = EXEC_STEADY_S) -> tuple[str, list[str]]:
    """What stands at `path`, and why the service user (`uid`, `gids`) could read
    the executable there (empty: it cannot). The kernel marks a process not dumpable at exec only when
    its user cannot read the file it runs; read after that, a process of the
    user's own (a preload, an injection while it was dumpable) can have made
    itself not dumpable, and the live probe would see nothing. Judged by lstat
    through a walk that follows no link: owned by root (an owner chmods), no read
    for others, none for a group of the user's, no POSIX ACL (which may grant it);
    with `started_ns` (the process's start, realtime), unchanged (ctime) since at
    least `steady_s` before it, so that this is what the kernel saw at exec (its
    inode is the one the process runs: the caller's identification). The margin
    is the clocks' grain only: a root-owned file's mode is root's to change (a
    deployment installs it moments before it starts the candidate)."""
    try:
        node = hostfs.Node.walked(path)
    except (hostfs.PathRefused, OSError) as e:
        return f"{path}: unread", [f"{path}: {e} (not followed)"]
    st = node.st
    if st is None:
        return node.describe(), [f"{path}: absent"]
    if not stat.S_ISREG(st.st_mode):
        return node.describe(), [f"{path} is a {hostfs.kind_of(st.st_mode)}, not a regular file"]
    mode, out = stat.S_IMODE(st.st_mode), []
    if st.st_uid != 0:
        out.append(f"{path} is owned by uid {st.st_uid}, not root (its owner may make it readable)")
    if st.st_uid == uid and mode & stat.S_IRUSR:
        out.append(f"{path} is readable by its owner, the service user (mode {mode:04o})")
    if mode & stat.S_IROTH:
        out.append(f"{path} is readable by others (mode {mode:04o})")
    if mode & stat.S_IRGRP and st.st_gid in gids:
        out.append(f"{path} is readable by group {st.st_gid}, one of the service user's (mode {mode:04o})")
    try:
        acl = [a for a in os.listxattr(path, follow_symlinks=False) if a.startswith("system.posix_acl")]
    except OSError as e:
        acl = [f"extended attributes unreadable ({e.strerror})"]
    if acl:
        out.append(f"{path} carries {', '.join(acl)} (an ACL may grant the service user read)")
    # its mode now says nothing of its mode at exec (a blind red team's round six:
    # 0755 while the candidate started, 0711 again afterwards)
    if started_ns is not None and (late := hostfs.changed_after(st, started_ns, steady_s)):
        out.append(f"{path} {late}: what the kernel saw at its exec is not what is read now")
    # nor does the file say what stood at its path then: a directory on it the user
    # could relink, exchanged for one holding a wrapper while systemd exec'd the
    # candidate and put back since (a blind red team's round seven)
    if started_ns is not None:
        out += [f"{moved}: a directory on the runtime's path whose name the service user could relink, so what "
                "systemd exec'd at the candidate's start may have been another file (a wrapper that ran it "
                "with an environment of its own)" for moved in hostfs.relinked_since(path, started_ns, steady_s,
                                                                                     leaf=False)]
    return node.describe(), out


def catches(pid: int, create_time: float | None, signo: int) -> bool:
    """Whether process `pid` (still the one started at `create_time`) has a
    handler for `signo` (SigCgt of /proc/<pid>/status, shared by its threads).
    IsolationError when it cannot be read from that very process."""
    try:
        mask = int(proc.status(pid)["SigCgt"], 16)
    except (OSError, KeyError, ValueError) as e:
        raise IsolationError(f"/proc/{pid}/status: SigCgt unreadable ({e})") from None
    if create_time is None or not proc.alive(pid, create_time):
        raise IsolationError(f"pid {pid} is no longer the process identified (gone or another one)")
    return bool(mask >> (signo - 1) & 1)


def find_target(port: int) -> Target:
    """The one process listening on TCP `port`, its start time and dumpability.
    Only read: whether it is the candidate (runs the runtime binary, is its
    unit's own) is the caller's to judge (test_isolation.py, host/unitowner.py)."""
    import psutil

    found = node_runtime.listener(port)
    if found.problem:
        raise IsolationError(f"no target on port {port}: {found.problem}")
    pid = cast(int, found.pid)  # no problem: listener() read its one owner in full
    ticks = start_ticks(pid)
    try:
        owner = os.lstat(f"/proc/{pid}/fd").st_uid
        again = proc.create_time(pid)
    except (OSError, psutil.Error) as e:
        raise IsolationError(f"process {pid} on port {port} vanished while it was read: {e}") from None
    if again != found.create_time:
        raise IsolationError(f"process {pid} on port {port} was replaced while it was read")
    return Target(pid, ticks, found.exe_link or "?", tuple(cast(tuple[int, ...], found.uids)),
                  tuple(cast(tuple[int, ...], found.gids)), owner, found.create_time, found.exe_dev_ino)


# ------------------------------------------------------------------ the probe
def parse_report(output: bytes) -> dict:
    """The probe's report from its (hostile, bounded) output."""
    start = output.find(BEGIN)
    end = output.find(END, start + len(BEGIN)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise IsolationError(f"no probe report in its output ({len(output)} bytes): "
                             f"{_excerpt(output[-EXCERPT:])}")
    body = output[start + len(BEGIN):end]
    try:
        report = json.loads(body)
    except ValueError as e:
        raise IsolationError(f"the probe report is not JSON ({e}): {_excerpt(body)}") from None
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise IsolationError(f"the probe report has the wrong shape: {_excerpt(body)}")
    for key in ("error", "seccomp"):
        if key in report:
            if not isinstance(report[key], str):
                raise IsolationError(f"the probe report's {key} is not text: {_excerpt(body)}")
            report[key] = printable(report[key][:MAX_DETAIL])
    seen = set()
    for r in report["results"]:
        if not (isinstance(r, dict) and r.get("vector") in VECTORS and r.get("outcome") in OUTCOMES
                and isinstance(r.get("detail"), str)) or r["vector"] in seen:
            raise IsolationError(f"the probe report has a malformed or repeated result: "
                                 f"{_excerpt(json.dumps(r).encode())}")
        seen.add(r["vector"])
        r["detail"] = printable(r["detail"][:MAX_DETAIL])
    for key in ("uid", "euid", "gid", "egid", "cap_eff"):
        if not isinstance(report.get(key), int) or isinstance(report.get(key), bool):
            raise IsolationError(f"the probe report lacks its {key}: {_excerpt(body)}")
    if not report.get("error") and seen != set(VECTORS):
        raise IsolationError(f"the probe reported {sorted(seen)}, not every vector {list(VECTORS)}")
    return report


def probe_properties(stage: str, tag: str, user: str, group: str, target: Target,
                     python: str, stdout_fd: int) -> list:
    script = os.path.join(stage, PROBE)
    argv = [python, "-I", script, str(target.pid), str(target.start_ticks)]
    return [
        ("Description", ("s", f"{TAG_PREFIX} {tag}: ISO-1 probe of pid {target.pid}")),
        ("Type", ("s", "exec")),
        ("User", ("s", user)),
        ("Group", ("s", group)),
        ("Slice", ("s", "system.slice")),
        ("WorkingDirectory", ("s", "/")),
        ("ExecStart", ("a(sasb)", [(python, argv, False)])),
        ("StandardInput", ("s", "null")),
        ("StandardOutputFileDescriptor", ("h", stdout_fd)),
        ("StandardError", ("s", "journal")),
        ("CollectMode", ("s", "inactive-or-failed")),
        ("RuntimeMaxUSec", ("t", PROBE_DEADLINE_S * 1_000_000)),
        ("TimeoutStopUSec", ("t", 5_000_000)),
    ]


def run_probe(bus: Systemd, *, user: str, group: str, tag: str, target: Target,
              python: str | None = None) -> dict:
    """Run isoprobe.py as `user` in a disposable unit against `target`; its report.
    The interpreter is the stage's execute-only copy (peer.stage): the probe is
    not dumpable from its exec, so no process of the user's forges its report."""
    name = f"pty-acceptance-iso-{tag}.service"
    stage = peer.stage((peer.PACKAGE / "probes" / PROBE,), prefix="pty-acceptance-iso-", interpreter=True)
    python = python or os.path.join(stage, peer.STAGED_PYTHON)
    r, w = os.pipe2(os.O_CLOEXEC)
    started = False
    try:
        props = probe_properties(stage, tag, user, group, target, python, w)
        try:
            bus.start_transient(name, props)
        except BusError as e:
            raise IsolationError(f"cannot start the probe unit {name}: {e}") from None
        started = True
        os.close(w)
        w = -1
        out = read_report_bytes(r, PROBE_DEADLINE_S)
        try:
            report = parse_report(out)
        except IsolationError as e:
            raise IsolationError(f"{name}: {e} ({unit_state(bus, name)})") from None
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)
        try:
            if started:
                peer.stop_unit(bus, name, STOP_DEADLINE_S)
        finally:
            scratch.remove(stage)
    if start_ticks(target.pid) != target.start_ticks:
        raise IsolationError(f"pid {target.pid} was replaced while it was probed")
    return report


def read_report_bytes(fd: int, deadline_s: float) -> bytes:
    """Until the END line, end of file, MAX_OUTPUT bytes or the deadline."""
    out = b""
    deadline = time.monotonic() + deadline_s
    while END not in out:
        left = deadline - time.monotonic()
        if left <= 0:
            raise IsolationError(f"the probe did not report within {deadline_s} s; it wrote "
                                 f"{len(out)} bytes: {_excerpt(out[-EXCERPT:])}")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
        if len(out) > MAX_OUTPUT:
            raise IsolationError(f"the probe wrote more than {MAX_OUTPUT} bytes: "
                                 f"{_excerpt(out[:EXCERPT])}")
    return out


def unit_state(bus: Systemd, name: str) -> str:
    try:
        svc = bus.properties(name, SERVICE_IFACE)
    except BusError as e:
        return f"unit state unreadable: {e}"
    if svc is None:
        return "the unit is already gone"
    return "unit " + ", ".join(f"{k}={svc.get(k)}" for k in ("Result", "ExecMainCode",
                                                              "ExecMainStatus"))


# ------------------------------------------------------------------ descriptors
def inheritable_fds(pid: int) -> tuple[list[str], int]:
    """(descriptor >= 3 without O_CLOEXEC: 'fd N -> link, flags', how many were checked)."""
    base = f"/proc/{pid}"
    try:
        names = proc.fd_numbers(pid)
    except OSError as e:
        raise IsolationError(f"cannot list {base}/fd as root: {e.strerror}") from None
    bad, seen = [], 0
    for n in names:
        if n < 3:
            continue
        try:
            flags = observe.parse_fd_flags(read_nofollow(f"{base}/fdinfo/{n}", 4096))
            link = os.readlink(f"{base}/fd/{n}")
        except OSError:
            continue  # closed while it was read
        seen += 1
        if flags is None:
            bad.append(f"fd {n} -> {link[:120]}: fdinfo has no flags field")
        elif not flags & O_CLOEXEC:
            bad.append(f"fd {n} -> {link[:120]}: flags {flags:o}, no O_CLOEXEC")
    return bad, seen


# ------------------------------------------------------------------ supervisor connections
@dataclass(frozen=True)
class UnixSocket:
    ino: int
    state: int
    name: str | None
    peer: int | None
    vfs: tuple[int, int] | None   # (st_dev, st_ino) of the socket file it is bound to


def _kernel_dev(dev: int) -> int:
    """A kernel dev_t (major << 20 | minor), as sock_diag reports it, as st_dev."""
    return os.makedev(dev >> 20, dev & 0xFFFFF)


def unix_sockets() -> list[UnixSocket]:
    """Every UNIX socket of this network namespace, with name, peer and bound file."""
    from pyroute2 import DiagSocket
    from pyroute2.netlink.diag import SS_ALL, UDIAG_SHOW_NAME, UDIAG_SHOW_PEER, UDIAG_SHOW_VFS

    out = []
    try:
        with DiagSocket() as ds:
            ds.bind()
            for m in ds.get_sock_stats(family=socket.AF_UNIX, states=SS_ALL,
                                       show=UDIAG_SHOW_NAME | UDIAG_SHOW_PEER | UDIAG_SHOW_VFS):
                vfs = m.get_attr("UNIX_DIAG_VFS")
                out.append(UnixSocket(
                    m["udiag_ino"], m["udiag_state"], m.get_attr("UNIX_DIAG_NAME"),
                    m.get_attr("UNIX_DIAG_PEER"),
                    None if vfs is None else (_kernel_dev(vfs["udiag_vfs_dev"]),
                                              vfs["udiag_vfs_ino"])))
    except OSError as e:
        raise IsolationError(f"sock_diag of UNIX sockets failed: {e}") from None
    return out


def connections_to(socks: list[UnixSocket], path: str,
                   file_id: tuple[int, int] | None) -> list[tuple[int, int | None]]:
    """(supervisor-side inode, client-side inode) of every connection to `path`.

    An accepted socket carries its listener's address and bound file; its
    peer is the client's socket."""
    return [(s.ino, s.peer) for s in socks if s.state == SS_ESTABLISHED
            and (s.name == path or (file_id is not None and s.vfs == file_id))]


def socket_file_id(path: str) -> tuple[int, int]:
    try:
        st = os.lstat(path)
    except OSError as e:
        raise IsolationError(f"{path}: lstat: {e.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise IsolationError(f"{path} is not a socket")
    return st.st_dev, st.st_ino


def socket_holders() -> dict[int, set[int]]:
    """socket inode -> pids holding it (root reads every /proc/<pid>/fd link; a
    process gone meanwhile holds nothing, one that cannot be read raises
    proc.ProcUnreadable: it may hold the connection)."""
    holders: dict[int, set[int]] = {}
    for pid, links in proc.walk(proc.fds, "the descriptors").items():
        for link in links.values():
            if (ino := observe.socket_inode(link)) is not None:
                holders.setdefault(ino, set()).add(pid)
    return holders


def judge_holders(pairs, holders, *, supervisor: set[int], is_helper, own: set[int]):
    """(findings, evidence rows) for who holds either end of each connection.

    The supervisor side may be held by the supervisor only, the client side
    by the fixed helper only (is_helper(pid) -> (bool, what it runs)); the
    suite's own processes are listed but not judged."""
    findings, rows = [], []
    for server, client in pairs:
        for pid in sorted(holders.get(server, ())):
            rows.append(f"supervisor side socket:[{server}] held by pid {pid}")
            if pid not in supervisor and pid not in own:
                findings.append(f"pid {pid} ({is_helper(pid)[1]}) holds the supervisor side "
                                f"socket:[{server}] of a connection")
        for pid in sorted(holders.get(client, ()) if client else ()):
            ok, what = is_helper(pid)
            rows.append(f"client side socket:[{client}] held by pid {pid} ({what})"
                        + (" (the suite itself, not judged)" if pid in own else ""))
            if not ok and pid not in own:
                findings.append(f"pid {pid} ({what}) holds a connection to the supervisor "
                                f"(socket:[{client}]); only the fixed helper may")
    return findings, rows
