"""RUNTIME-2's candidate runtime as a transient unit (the run is described in
candidate/handoff.py): the candidate unit's command with the suite's port
(candidate_command), the one environment file it may name and its root-only
copy (private_environment), runtime.binary opened once and hashed by that
descriptor before the start and again after the session (open_runtime,
hash_again), the transient unit's properties, the wait for its MainPID to
listen as that very file (wait_listening), and its stop.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import shlex
import socket
from dataclasses import dataclass

from pty_acceptance.errors import Unreadable
from pty_acceptance.candidate import serverenv
from pty_acceptance.host import hostfs, proc, rundir
from pty_acceptance.provenance import node_runtime
from pty_acceptance.host.bus import SERVICE_IFACE, Systemd
from pty_acceptance.host.polling import poll
from pty_acceptance.supervisor.peer import TAG_PREFIX, stop_unit
from pty_acceptance.host.terminal import escape

LISTEN_DEADLINE_S = 30.0

_PORT_ARG = re.compile(r"^--port(=.*)?$")
_SPECIFIER = re.compile(r"%[A-Za-z%]")


class HandoffError(Unreadable):
    pass


# ------------------------------------------------------------------ the command
@dataclass(frozen=True)
class CandidateCommand:
    argv: list[str]
    working_directory: str | None
    environment_files: list[tuple[str, bool]]  # (path, missing is ok)
    shown: str                                  # the ExecStart= line, for evidence


def candidate_command(text: str, port: int) -> CandidateCommand:
    """The candidate unit's command with --port replaced (HandoffError when it
    cannot be run as written)."""
    execs: list[str] = []
    workdir: str | None = None
    env_files: list[str] = []
    for section, key, value in node_runtime.unit_lines(text):
        if section != "Service":
            continue
        if key == "ExecStart":
            execs = [] if value == "" else execs + [value]
        elif key == "WorkingDirectory":
            workdir = value or None
        elif key == "EnvironmentFile":
            env_files = [] if value == "" else env_files + [value]
    if len(execs) != 1:
        raise HandoffError(f"the candidate unit has {len(execs)} ExecStart= lines, expected one")
    line = execs[0]
    if _SPECIFIER.search(line) or any(_SPECIFIER.search(v) for v in env_files + [workdir or ""]):
        raise HandoffError(f"the candidate unit uses systemd specifiers, which the suite does not "
                           f"expand: {line[:200]!r}")
    try:
        argv = shlex.split(line.lstrip(node_runtime.EXEC_PREFIXES), posix=True)
    except ValueError as e:
        raise HandoffError(f"ExecStart= cannot be split ({e}): {line[:200]!r}") from None
    ports = [i for i, a in enumerate(argv) if _PORT_ARG.match(a)]
    if len(ports) != 1 or (argv[ports[0]] == "--port" and ports[0] + 1 >= len(argv)):
        raise HandoffError(f"ExecStart= must name the port exactly once as --port N or --port=N "
                           f"(the suite runs the runtime on another port): {line[:200]!r}")
    i = ports[0]
    argv = argv[:i] + ["--port", str(port)] + argv[i + (1 if "=" in argv[i] else 2):]
    if workdir is not None and not re.match(r"^-?(~|/[^\0]*)$", workdir):
        raise HandoffError(f"WorkingDirectory={workdir[:200]!r} is not an absolute path or ~")
    files = []
    for v in env_files:
        optional, path = v.startswith("-"), v.lstrip("-")
        if not path.startswith("/"):
            raise HandoffError(f"EnvironmentFile={v[:200]!r} is not an absolute path")
        files.append((path, optional))
    return CandidateCommand(argv, workdir, files, f"ExecStart={line[:300]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment_only_from(files: list[tuple[str, bool]], server_env: str) -> None:
    """RUNTIME-2: the runtime's environment comes only from cutover.server_env.
    Every EnvironmentFile= must name it (a leading "-" or not); anything else
    fails before any file is read, naming the path (escaped, bounded)."""
    others = list(dict.fromkeys(path for path, _ in files if path != server_env))
    if others:
        shown = ", ".join(repr(escape(p[:200])) for p in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        raise HandoffError(f"the candidate unit's EnvironmentFile= names {shown}{more}: the runtime's "
                           f"environment comes only from cutover.server_env {server_env} "
                           "(nothing was read)")
    if not files:
        raise HandoffError(f"the candidate unit has no EnvironmentFile=: expected exactly "
                           f"cutover.server_env {server_env}")


def service_ids(user: str, group: str) -> tuple[int, int]:
    try:
        return pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        raise HandoffError(f"the service user {user!r} or group {group!r} does not exist") from None


def private_environment(files: list[tuple[str, bool]], tag: str, *, server_env: str,
                        owner: tuple[int, int], allowed: tuple[str, ...]) -> str:
    """A root-only copy of server.env, the one environment file allowed
    (environment_only_from), read after CUT-3's checks and owned by `owner`
    (the service user's uid and gid), setting nothing but `allowed`
    (cutover.environment) and nothing the floor refuses: a runtime whose
    environment would load the user's code (NODE_OPTIONS=--require=...) is
    never started, the variable named. The caller removes it."""
    environment_only_from(files, server_env)
    env = serverenv.read(server_env)
    found = serverenv.problems(env, *owner, allowed=allowed)
    if found or env.content is None:
        raise HandoffError(f"EnvironmentFile {server_env}: " + ("; ".join(found) or "not read")
                           + ": the runtime is not started with it")
    try:
        dfd = rundir.open_run_dir()  # root 0700; a SIGKILLed run's copy goes at the next start
    except rundir.RunDirError as e:
        raise HandoffError(f"no root-only place for the environment copy: {e}") from None
    try:
        fd = os.open(f"pty-acceptance-{tag}-runtime.env",
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dfd)
    finally:
        os.close(dfd)
    path = os.readlink(f"/proc/self/fd/{fd}")
    try:
        os.write(fd, env.content.reveal().encode("utf-8", "surrogateescape").rstrip(b"\n") + b"\n")
    finally:
        os.close(fd)
    return path


# ------------------------------------------------------------------ the runtime file
@dataclass
class Hashed:
    """runtime.binary as RUNTIME-2 runs it: a kept descriptor, its identity and hashes."""
    path: str
    fd: int
    dev_ino: tuple[int, int]
    before: str
    after: str | None = None

    def describe(self) -> str:
        after = self.after or "not hashed again"
        return (f"{self.path} ({self.dev_ino[0]}:{self.dev_ino[1]}, by descriptor): {self.before} "
                f"before the start, {after} after the session")


def open_runtime(path: str, pin: str, limit: hostfs.Limit) -> Hashed:
    """runtime.binary opened by the no-follow walk from / and hashed by that
    descriptor (bounded); the pin (RUNTIME-1's) or HandoffError. The caller
    closes `fd`."""
    try:
        fd = hostfs.open_file(path, user_writable=True)
    except OSError as e:
        raise HandoffError(f"the runtime {path} cannot be opened (walked from / without following "
                           f"a link): {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        digest = hostfs.sha256_fd_bounded(fd, limit, path)
    except OSError as e:
        os.close(fd)
        raise HandoffError(f"the runtime {path}: {e.strerror or e}") from None
    hashed = Hashed(path, fd, (st.st_dev, st.st_ino), digest)
    if digest != pin:
        os.close(fd)
        raise HandoffError(f"the runtime {path} hashes to {digest} before the start, the pin "
                           f"runtime.sha256 (the file RUNTIME-1 hashed) is {pin}: not started")
    return hashed


def runs_hashed(pid: int, hashed: Hashed) -> str | None:
    """Why `pid` does not execute the kept descriptor's file (None: it does)."""
    try:
        dev, ino = proc.exe_file(pid)  # the magic link resolves to the mapped file itself
    except OSError as e:
        return f"/proc/{pid}/exe: {e.strerror or e}"
    if (dev, ino) != hashed.dev_ino:
        return (f"pid {pid} executes {dev}:{ino}, not {hashed.path} as hashed before the "
                f"start ({hashed.dev_ino[0]}:{hashed.dev_ino[1]})")
    return None


def exec_path_problem(pid: int, hashed: Hashed) -> str | None:
    """Once the runtime runs: what stood at its path when systemd exec'd it was
    the hashed file (None), else why not. The path resolves now (walked, no link
    followed) to the kept descriptor's file, and no directory on it whose name
    the service user could relink, nor the file, changed since the process
    started (a blind red team's round seven: the runtime's bin/ exchanged for
    one holding a wrapper while the unit started, the wrapper exchanging it back
    and exec'ing the runtime with a preload of the user's)."""
    try:
        node = hostfs.Node.walked(hashed.path)
        started = proc.start_realtime_ns(pid)
    except (hostfs.PathRefused, OSError, ValueError) as e:
        return f"the runtime's path {hashed.path} or pid {pid}'s start: {e}"
    st = node.st
    if st is None or (st.st_dev, st.st_ino) != hashed.dev_ino:
        now = "nothing" if st is None else f"{st.st_dev}:{st.st_ino}"
        return (f"{hashed.path} is {now} now, not the file hashed before the start "
                f"({hashed.dev_ino[0]}:{hashed.dev_ino[1]}): what systemd exec'd there is not known")
    moved = hostfs.relinked_since(hashed.path, started, hostfs.EXEC_STEADY_S)
    if moved:
        return (f"the runtime's path changed since its start (pid {pid}), so what systemd exec'd there may have "
                f"been another file (a wrapper that ran it with an environment of its own): {'; '.join(moved)}")
    return None


def hash_again(pid: int, hashed: Hashed, pin: str, limit: hostfs.Limit) -> str | None:
    """After the session: MainPID still executes the kept descriptor's file,
    which is hashed again through that descriptor (it is what was hashed
    before the start and what runs; /proc/<pid>/exe would trust that the pid
    is still the runtime's). Why not the pin, or None."""
    why = runs_hashed(pid, hashed)
    if why:
        return f"after the session: {why}"
    try:
        hashed.after = hostfs.sha256_fd_bounded(hashed.fd, limit, hashed.path)
    except OSError as e:
        return f"the runtime {hashed.path} could not be hashed again: {e.strerror or e}"
    if hashed.after != hashed.before or hashed.after != pin:
        return (f"the runtime {hashed.path} (what MainPID {pid} executes) hashed to {hashed.before} "
                f"before the start and to {hashed.after} after the session, by the same descriptor; "
                f"the pin runtime.sha256 is {pin}")
    return None


# ------------------------------------------------------------------ the runtime unit
@dataclass
class RuntimeUnit:
    name: str
    main_pid: int = 0
    control_group: str = ""
    env_copy: str | None = None


def runtime_properties(cmd: CandidateCommand, *, name: str, user: str, group: str, tag: str,
                       env_copy: str | None) -> list:
    props = [
        ("Description", ("s", f"{TAG_PREFIX} {tag}: {name} (RUNTIME-2, the candidate runtime)")),
        ("Type", ("s", "exec")),
        ("User", ("s", user)),
        ("Group", ("s", group)),
        ("Slice", ("s", "system.slice")),
        ("ExecStart", ("a(sasb)", [(cmd.argv[0], cmd.argv, False)])),
        ("CollectMode", ("s", "inactive-or-failed")),
        ("TimeoutStopUSec", ("t", 5_000_000)),
    ]
    if cmd.working_directory:
        props.append(("WorkingDirectory", ("s", cmd.working_directory)))
    if env_copy:
        props.append(("EnvironmentFiles", ("a(sb)", [(env_copy, False)])))
    return props


def wait_listening(bus: Systemd, unit: RuntimeUnit, port: int, hashed: Hashed) -> node_runtime.Listener:
    """Until the unit's MainPID listens on the port; it must execute the file
    of the kept descriptor (`hashed`), not whatever the path names now."""
    def ready():
        props = bus.properties(unit.name, SERVICE_IFACE) or {}
        unit.main_pid = props.get("MainPID") or 0
        unit.control_group = props.get("ControlGroup") or ""
        if not unit.main_pid:
            state = bus.properties(unit.name) or {}
            if state.get("ActiveState") in (None, "inactive", "failed"):
                raise HandoffError(f"{unit.name} ended before it listened "
                                   f"({state.get('ActiveState')}/{state.get('Result')})")
            return None
        found = node_runtime.listener(port)
        return found if found.pid == unit.main_pid else None

    found = poll(ready, LISTEN_DEADLINE_S, f"the runtime {unit.name} listening on "
                 f"127.0.0.1:{port}", lambda: node_runtime.listener(port).describe())
    if tuple(found.exe_dev_ino or ()) != hashed.dev_ino:
        shown = "%d:%d" % found.exe_dev_ino if found.exe_dev_ino else "an unknown file"
        raise HandoffError(f"MainPID {found.pid} of {unit.name} executes {shown} "
                           f"({escape(str(found.exe_link)[:200])!r}), not {hashed.path} as hashed before "
                           f"the start ({hashed.dev_ino[0]}:{hashed.dev_ino[1]})")
    return found


def stop_runtime(bus: Systemd, unit: RuntimeUnit) -> None:
    try:
        stop_unit(bus, unit.name)
    finally:
        if unit.env_copy:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(unit.env_copy)


def runtime_unit_text(path: str) -> str:
    """The candidate unit file (node_runtime.unit_file_text: walked from /, bounded)."""
    try:
        return node_runtime.unit_file_text(path)
    except node_runtime.UnitFileError as e:
        raise HandoffError(f"the candidate unit file: {e}") from None
