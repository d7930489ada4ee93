"""A probe inside a live session whose answer the suite believes (ISO-2, UNIT-5, UNIT-6, UNIT-7).

Everything on a session's way to the suite is the service user's: the
terminal (a /dev/pts of the user's, which it may write into), script(1), the
shell and the launcher before its exec (dumpable processes of the user's: on
a host without Yama a process of the user's may attach to them with ptrace
and change what they relay, or what they exec). A blind red team's eighth
pass made ISO-2's probe's connect() return 0 that way. So a probe's answer
is believed only through a channel of its own (Channel):

- the probe runs the suite's execute-only copy of the host's Python, staged
  beside the session's working directory (`../<stage>/python3` from there:
  both are in the run's root-owned scratch area), so the kernel makes it not
  dumpable at its exec, and no process of the user's can attach to it or
  read or write its memory afterwards;
- its first act is to connect to a socket root listens on in that stage and
  say hello; root then reads from /proc who connected (SO_PEERCRED, held by
  a pidfd): a process of the session unit's cgroup, executing the copy, not
  dumpable (its /proc/<pid>/environ root's), traced by no one (a tracer that
  attached to the launcher before the exec keeps its hold across it), its
  command line exactly the probe's, no variable in its environment that
  makes the dynamic loader or glibc load code; only then does root say go;
- the answer comes back on that connection, never through the terminal.

What it cannot rule out, and docs/operator.md says so: a tracer of the
user's that, before the exec, set the registers the new image starts with
and let go (it can no longer read or write the probe's memory after the
exec, nor attach again).
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Iterable

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import proc, scratch
from pty_acceptance.host.polling import poll
from pty_acceptance.supervisor import peer

SOCKET = "channel"
ANSWER_LIMIT = 8 << 20
HELLO, GO = b"hello\n", b"go\n"
# variables that make ld.so or glibc load or run code of their naming (Python itself runs with -I)
LOADER_PREFIXES = ("LD_", "GCONV_", "GLIBC_", "MALLOC_")
LOADER_NAMES = frozenset({"LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN", "TZDIR"})

# the probe's side: prepended to its code; takes the channel's path out of argv, so the
# probe's own arguments keep their places, and defines answer(out)
PREAMBLE = r'''
import socket as _socket, sys as _sys, os as _os
_ch = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
_ch.connect(_sys.argv.pop(1))
_ch.sendall(b"hello\n")
_go = b""
while len(_go) < 3:
    _b = _ch.recv(3 - len(_go))
    if not _b:
        _os._exit(3)
    _go += _b
if _go != b"go\n":
    _os._exit(3)
def answer(out):
    import json as _json
    _ch.sendall(_json.dumps(out).encode())
    _ch.shutdown(_socket.SHUT_WR)
'''


class ProbeError(Unreadable):
    """No answer the suite can believe: the channel's reason."""


def environ(pid: int) -> list[str]:
    """The process's environment as its exec gave it, read by root (the probe, not dumpable,
    cannot read its own /proc/self/environ)."""
    raw = proc.read(pid, "environ", proc.CMDLINE_LIMIT)
    return [e.decode("utf-8", "replace") for e in raw.split(b"\0") if e]


def session_of(pid: int, sessions: Callable[[], Iterable[str]], deadline_s: float) -> tuple[str | None, list[str]]:
    """(the one of `sessions`' ControlGroups the process `pid` is in, or None at the deadline;
    the cgroups it is in): `sessions` is asked again until the deadline (systemd may name the
    session's unit only after its command has started)."""
    def found() -> list[str]:
        wanted = set(sessions())
        return [g for g in proc.cgroups(pid) if g in wanted]
    try:
        return poll(found, deadline_s, "the probe's session")[0], []
    except TimeoutError:
        return None, proc.cgroups(pid)


def admission_problems(pid: int, ident: tuple[int, int], argv: list[str]) -> list[str]:
    """Why the process `pid` (in the session's cgroup) is not the probe the suite started
    (empty: it is): also one thread only (a tracer before the exec could have had it make
    more, and park one past the main thread's end: a blind red team's ninth pass)."""
    problems = []
    threads = proc.status(pid).get("Threads", "?")
    if threads != "1":
        problems.append(f"it runs {threads} threads, not the one the probe starts with")
    link, got = proc.exe_identity(pid)
    if got != ident:
        problems.append(f"it executes {link} {got}, not the suite's execute-only interpreter {ident}")
    # the kernel gives a not dumpable process's /proc files (not its directory) to root
    if os.stat(f"/proc/{pid}/environ").st_uid != 0:
        problems.append("it is dumpable (its /proc/<pid>/environ is not root's): another process of the "
                        "user's may attach to it")
    tracer = proc.status(pid).get("TracerPid", "?")
    if tracer != "0":
        problems.append(f"it is traced by pid {tracer}")
    if proc.cmdline(pid) != [a.encode() for a in argv]:
        problems.append("its command line is not the probe's")
    names = sorted({e.partition("=")[0] for e in environ(pid)})
    loader = [n for n in names if n.startswith(LOADER_PREFIXES) or n in LOADER_NAMES]
    if loader:
        problems.append(f"its environment names what the loader loads: {loader}")
    return problems


def staged_interpreter(prefix: str = "pty-acceptance-probe-") -> tuple[str, tuple[int, int]]:
    """A stage in the run's scratch area holding the execute-only copy of the host's Python
    (peer.stage): (its path, its (st_dev, st_ino)). scratch.remove() the stage."""
    stage = peer.stage((), prefix=prefix, interpreter=True)
    python = os.path.join(stage, peer.STAGED_PYTHON)
    st = os.lstat(python)
    return python, (st.st_dev, st.st_ino)


class Channel:
    """The stage (the execute-only interpreter and the listening socket) for one probe."""

    def __init__(self, cwd: str):
        python, self.ident = staged_interpreter()
        self.stage = os.path.dirname(python)
        self.listener: socket.socket | None = None
        self.conn: socket.socket | None = None
        self.pidfd = -1
        self.pid = 0
        self.group = ""
        try:
            path = os.path.join(self.stage, SOCKET)
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            self.listener.bind(path)
            os.chmod(path, 0o666)  # the stage is root's: nothing else can be at that name
            self.listener.listen(8)
            self.python_arg, self.socket_arg = os.path.relpath(python, cwd), os.path.relpath(path, cwd)
            if os.path.dirname(cwd) != os.path.dirname(self.stage):
                raise ProbeError(f"the session's directory {cwd} is not beside the probe's stage {self.stage}")
        except BaseException:
            self.close()
            raise

    def argv(self, code: str, *args: str) -> list[str]:
        return [self.python_arg, "-I", "-c", PREAMBLE + code, self.socket_arg, *args]

    def admit(self, sessions: Callable[[], Iterable[str]], argv: list[str], deadline_s: float) -> int:
        """The probe's hello taken and its process judged (ProbeError otherwise); its pid.
        `sessions`: the ControlGroups of the sessions started for the probe (asked until the
        deadline; the one it is in is `self.group`). Any other process that connects first is
        itself the failure."""
        if self.listener is None:
            raise ProbeError("the probe's channel is closed")
        end = time.monotonic() + deadline_s
        self.listener.settimeout(deadline_s)
        try:
            conn, _ = self.listener.accept()
        except OSError as e:
            raise ProbeError(f"no probe connected to its channel within {deadline_s:g} s ({e})") from None
        self.conn = conn
        pid, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                              struct.calcsize("3i")))
        try:
            self.pidfd = os.pidfd_open(pid)
            group, groups = session_of(pid, sessions, max(0.0, end - time.monotonic()))
            problems = ([f"it is in cgroup {groups}, in none of the sessions started for the probe"]
                        if group is None else []) + admission_problems(pid, self.ident, argv)
        except OSError as e:
            raise ProbeError(f"the process that connected to the probe's channel (pid {pid}) cannot be "
                             f"read: {e}") from None
        if problems:
            raise ProbeError(f"the process that connected to the probe's channel (pid {pid}) is not the "
                             f"probe the suite started: {'; '.join(problems)}")
        hello = self._read(len(HELLO), end)
        if hello != HELLO or select.select([self.pidfd], [], [], 0)[0]:
            raise ProbeError(f"the probe (pid {pid}) did not say hello ({hello[:16]!r}) or has ended")
        self.pid, self.group = pid, group or ""
        return pid

    def go(self) -> None:
        if self.conn is None or not self.pid:
            raise ProbeError("no probe was admitted: nothing to say go to")
        self.conn.sendall(GO)

    def answer(self, deadline_s: float) -> dict:
        """The probe's JSON answer on its channel (ProbeError when it is not one)."""
        data = self._read(ANSWER_LIMIT + 1, time.monotonic() + deadline_s, to_end=True)
        if len(data) > ANSWER_LIMIT:
            raise ProbeError(f"the probe's answer is longer than {ANSWER_LIMIT} bytes")
        try:
            out = json.loads(data)
        except ValueError as e:
            raise ProbeError(f"the probe's answer is not JSON ({e}; {len(data)} bytes, not shown)") from None
        if not isinstance(out, dict):
            raise ProbeError(f"the probe's answer is a {type(out).__name__}, not an object")
        return out

    def _read(self, limit: int, end: float, to_end: bool = False) -> bytes:
        if self.conn is None:
            raise ProbeError("no probe is connected")
        data = b""
        while len(data) < limit:
            left = end - time.monotonic()
            if left <= 0:
                raise ProbeError(f"the probe's channel gave {len(data)} bytes and then nothing by its deadline")
            self.conn.settimeout(left)
            try:
                chunk = self.conn.recv(min(65536, limit - len(data)))
            except OSError as e:
                raise ProbeError(f"the probe's channel: {e}") from None
            if not chunk:
                if to_end:
                    return data
                break
            data += chunk
        return data

    def close(self) -> None:
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()
        self.conn = self.listener = None
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        scratch.remove(self.stage)
