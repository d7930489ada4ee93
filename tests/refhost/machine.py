"""A real systemd machine in systemd-nspawn, torn down on every exit path.

Everything this module creates is named ``ptyacc-*`` (machine names, cgroups,
work directories, lock files) so that ``cleanup_leftovers()`` can find what a
crashed run left behind. A live machine holds an flock on
``/run/ptyacc-locks/<name>.lock``; cleanup skips names whose lock is held, so
two machines (in one process or in two) do not tear each other down.
"""
from __future__ import annotations

import fcntl
import os
import pathlib
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import Iterable, Sequence

PREFIX = "ptyacc-"
CGROUP_ROOTS = (pathlib.Path("/sys/fs/cgroup/systemd"), pathlib.Path("/sys/fs/cgroup/unified"))
LOCK_DIR = pathlib.Path("/run/ptyacc-locks")
WORK_ROOT = pathlib.Path("/var/tmp")
PROPAGATE_DIR = pathlib.Path("/run/systemd/nspawn/propagate")
POLL_S = 0.05


class MachineError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[refhost] {msg}", file=sys.stderr, flush=True)


def wait_until(pred, deadline_s: float, what: str, state=lambda: "") -> None:
    """Poll pred() until true; on timeout raise with what was still the case."""
    end = time.monotonic() + deadline_s
    while not pred():
        if time.monotonic() >= end:
            raise MachineError(f"timed out after {deadline_s:g} s waiting for {what}; state: {state()}")
        time.sleep(POLL_S)


# ---------------------------------------------------------------- /proc helpers

def _procs() -> Iterable[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def _stat(pid: int) -> tuple[str, int] | None:
    """(comm, ppid) of pid, or None if it is gone."""
    try:
        raw = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1: raw.rindex(")")]
    return comm, int(raw[raw.rindex(")") + 2:].split()[1])


def _cmdline(pid: int) -> list[str]:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    return _stat(pid) is not None and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        raw = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return raw[raw.rindex(")") + 2] in "ZX"


def _nspawn_machine(pid: int) -> str | None:
    argv = _cmdline(pid)
    if not argv or os.path.basename(argv[0]) != "systemd-nspawn":
        return None
    for i, arg in enumerate(argv):
        if arg.startswith("--machine="):
            return arg.split("=", 1)[1]
        if arg in ("--machine", "-M") and i + 1 < len(argv):
            return argv[i + 1]
    return None


# ---------------------------------------------------------------- cgroups, mounts, locks

def _cgroup_pids(top: pathlib.Path) -> list[int]:
    pids = []
    for dirpath, _dirs, files in os.walk(top):
        if "cgroup.procs" in files:
            try:
                pids += [int(p) for p in pathlib.Path(dirpath, "cgroup.procs").read_text().split()]
            except OSError:
                pass
    return pids


def _remove_cgroup(top: pathlib.Path, deadline_s: float = 5.0) -> None:
    """Kill whatever is still in the cgroup tree, then rmdir it depth-first."""
    if not top.exists():
        return
    for pid in _cgroup_pids(top):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_until(lambda: not [p for p in _cgroup_pids(top) if not _is_zombie(p)], deadline_s,
               f"{top} to empty", lambda: f"pids {_cgroup_pids(top)}")
    for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
        pathlib.Path(dirpath).rmdir()  # cgroupfs: rmdir works while control files are listed


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4].encode().decode("unicode_escape") for line in f]


def _umount_named(name: str) -> list[str]:
    """Lazily unmount every mount with a path component equal to name, deepest first."""
    points = sorted({p for p in _mount_points() if name in p.split("/")}, key=len, reverse=True)
    for p in points:
        subprocess.run(["umount", "-l", p], check=False)
    return points


def _lock_is_held(name: str) -> bool:
    path = LOCK_DIR / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def cleanup_leftovers() -> list[str]:
    """Remove what dead ptyacc-* machines left: processes, cgroups, mounts, dirs. Returns a report."""
    done: list[str] = []
    for pid in _procs():
        name = _nspawn_machine(pid)
        if name and name.startswith(PREFIX) and not _lock_is_held(name):
            try:
                os.kill(pid, signal.SIGKILL)
                done.append(f"killed systemd-nspawn pid {pid} (--machine={name})")
            except ProcessLookupError:
                pass
    names = set()
    for root in (*CGROUP_ROOTS, WORK_ROOT, PROPAGATE_DIR, LOCK_DIR):
        if root.is_dir():
            names |= {e.name.removesuffix(".lock") for e in root.iterdir() if e.name.startswith(PREFIX)}
    names |= {part for p in _mount_points() for part in p.split("/") if part.startswith(PREFIX)}
    for name in sorted(n for n in names if not _lock_is_held(n)):
        for root in CGROUP_ROOTS:
            if (root / name).exists():
                _remove_cgroup(root / name)
                done.append(f"removed cgroup {root / name}")
        for point in _umount_named(name):
            done.append(f"unmounted {point}")
        for path in (PROPAGATE_DIR / name, WORK_ROOT / name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
                done.append(f"removed {path}")
        (LOCK_DIR / f"{name}.lock").unlink(missing_ok=True)
    for line in done:
        log(f"leftover: {line}")
    return done


# ---------------------------------------------------------------- safe reads from the guest

def _open_nofollow(root_fd: int, guest_path: str) -> tuple[int, str]:
    """Open guest_path below root_fd without following any symlink.

    Returns (fd of the parent directory, last component). Raises MachineError
    when a directory component is a symlink."""
    parts = [p for p in guest_path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise MachineError(f"refusing guest path {guest_path!r}")
    fd = os.dup(root_fd)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                raise MachineError(f"cannot enter {'/' + '/'.join(parts[:i + 1])} in the guest "
                                   f"(symlinks are not followed): {e.strerror}") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _copy_entry(dir_fd: int, name: str, dest: pathlib.Path, guest_path: str) -> list[str]:
    """Copy one entry (file, or dir recursively). Returns notes on what was not copied (symlinks)."""
    st = os.lstat(name, dir_fd=dir_fd)
    notes: list[str] = []
    if stat.S_ISLNK(st.st_mode):
        # Never recreate it on the host: a later reader of dest would follow it there.
        target = os.readlink(name, dir_fd=dir_fd)
        notes.append(f"{guest_path} is a symlink to {target!r}: not followed, not copied")
    elif stat.S_ISREG(st.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(dest, stat.S_IMODE(st.st_mode))
    elif stat.S_ISDIR(st.st_mode):
        dest.mkdir(parents=True, exist_ok=True)
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            for child in sorted(os.listdir(sub)):
                notes += _copy_entry(sub, child, dest / child, f"{guest_path}/{child}")
        finally:
            os.close(sub)
    else:
        notes.append(f"{guest_path} is not a regular file, directory or symlink: skipped")
    return notes


# ---------------------------------------------------------------- the machine

class Machine:
    def __init__(self, tree: os.PathLike | str, *, binds: Sequence[tuple[str, str, bool]] = (),
                 name: str | None = None, console_log: os.PathLike | str | None = None):
        self.tree = pathlib.Path(tree)
        self.name = name or f"{PREFIX}{secrets.token_hex(4)}"
        if not self.name.startswith(PREFIX):
            raise ValueError(f"machine name must start with {PREFIX!r}")
        self.binds = [(str(h), str(g), bool(ro)) for h, g, ro in binds]
        for h, g, _ in self.binds:
            if ":" in h or ":" in g:
                raise ValueError(f"bind paths must not contain ':': {h} -> {g}")
        self.workdir = WORK_ROOT / self.name
        self.console_log = pathlib.Path(console_log) if console_log else self.workdir / "console.log"
        self.proc: subprocess.Popen | None = None
        self.leader: int | None = None
        self._lock_fd: int | None = None
        self._console = None
        self._old_handlers: dict[int, object] = {}
        self._pending_signal: int | None = None
        self._state = "new"  # new -> booting -> running -> stopping -> down

    # context manager
    def __enter__(self) -> "Machine":
        self.boot()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ------------------------------------------------------------ boot
    def boot(self, deadline_s: float = 30) -> "Machine":
        if self._state != "new":
            raise MachineError(f"boot() on a machine in state {self._state}")
        self._state = "booting"
        try:
            self._take_lock()  # first, so that cleanup leaves this name alone
            cleanup_leftovers()
            self._install_signal_handlers()
            self.workdir.mkdir(parents=True, exist_ok=True)
            for root in CGROUP_ROOTS:
                (root / self.name).mkdir()
            self._start_nspawn()
            t0 = time.monotonic()
            self._wait_for_leader(deadline_s)
            self._wait_running(deadline_s - (time.monotonic() - t0))
        except BaseException:
            self.shutdown()
            raise
        self._state = "running"
        return self

    def _take_lock(self) -> None:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(LOCK_DIR / f"{self.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _start_nspawn(self) -> None:
        argv = ["systemd-nspawn", "--boot", f"--directory={self.tree}", f"--machine={self.name}",
                "--register=no", "--keep-unit", "--console=pipe", "--private-network",
                "--volatile=overlay", "--system-call-filter=bpf"]
        argv += [f"--bind{'-ro' if ro else ''}={h}:{g}" for h, g, ro in self.binds]
        env = dict(os.environ, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY="1")
        procs_files = [str(root / self.name / "cgroup.procs") for root in CGROUP_ROOTS]

        def into_private_cgroup() -> None:  # runs in the child between fork and exec
            for f in procs_files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        self.console_log.parent.mkdir(parents=True, exist_ok=True)
        self._console = open(self.console_log, "ab")
        log(f"booting {self.name} from {self.tree}")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._console,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                     preexec_fn=into_private_cgroup)

    def _console_tail(self, n: int = 15) -> str:
        try:
            lines = self.console_log.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return "(no console log)"
        return "\n    ".join(["console.log:"] + lines)

    def _check_nspawn(self) -> None:
        if self.proc.poll() is not None:
            raise MachineError(f"systemd-nspawn exited with {self.proc.returncode} during boot\n"
                               f"    {self._console_tail()}")

    def _wait_for_leader(self, deadline_s: float) -> None:
        def found() -> bool:
            self._check_nspawn()
            for pid in _procs():
                if _stat(pid) == ("systemd", self.proc.pid):
                    self.leader = pid
                    return True
            return False
        wait_until(found, deadline_s, f"a child of systemd-nspawn (pid {self.proc.pid}) named systemd",
                   lambda: "no such child yet")

    def _wait_running(self, deadline_s: float) -> None:
        last = ["(not asked yet)"]

        def running() -> bool:
            self._check_nspawn()
            r = self._nsenter(["systemctl", "is-system-running"], timeout=5)
            last[0] = (r.stdout.decode().strip() or r.stderr.decode().strip())
            if last[0] == "degraded":
                failed = self._nsenter(["systemctl", "--failed", "--no-legend", "--plain"], timeout=5)
                raise MachineError(f"{self.name} booted degraded; failed units:\n"
                                   f"{failed.stdout.decode(errors='replace')}")
            return last[0] == "running"
        t0 = time.monotonic()
        wait_until(running, deadline_s, f"{self.name}: systemctl is-system-running = running",
                   lambda: f"is-system-running said {last[0]!r}")
        log(f"{self.name} running (leader pid {self.leader}, nspawn pid {self.proc.pid}, "
            f"{time.monotonic() - t0:.2f} s after the leader appeared)")

    # ------------------------------------------------------------ inside
    def _nsenter(self, argv: Sequence[str], *, timeout: float | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", "-t", str(self.leader), "-a", *argv], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, input: bytes | None = None, check: bool = False,
            stream: bool = False) -> subprocess.CompletedProcess:
        """Run argv inside the machine as a transient unit (root) and return its exit status.

        stream=True copies the unit's stdout to ours as it comes (and still
        captures it); its stderr then goes straight to our stderr."""
        if self._state != "running":
            raise MachineError(f"run() on a machine in state {self._state}")
        unit = f"{PREFIX}run-{secrets.token_hex(4)}"
        cmd = ["nsenter", "-t", str(self.leader), "-a", "systemd-run", "--wait", "--pipe", "--quiet",
               "--collect", f"--unit={unit}",
               # oneshot: only exit status 0 is success (a simple service counts death
               # by SIGTERM/SIGINT/SIGHUP/SIGPIPE as clean and systemd-run returns 0)
               "-p", "Type=oneshot", "-p", "TimeoutStartSec=infinity"]
        if cwd:
            cmd.append(f"--working-directory={cwd}")
        for k, v in (env or {}).items():
            cmd += ["-E", f"{k}={v}"]
        # The service manager expands $VAR and $$ in ExecStart= (systemd 252 has no
        # --expand-environment=no): escape, so argv arrives exactly as given.
        cmd += ["--", *(a.replace("$", "$$") for a in argv)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=None if stream else subprocess.PIPE)
        try:
            if stream:
                out, err = self._tee(p, input, timeout), None
            else:
                out, err = p.communicate(input, timeout=timeout)
        except BaseException:
            self._stop_unit(unit)
            p.kill()
            p.wait()
            raise
        result = subprocess.CompletedProcess(list(argv), p.returncode, out, err)
        if check:
            result.check_returncode()
        return result

    @staticmethod
    def _tee(p: subprocess.Popen, input: bytes | None, timeout: float | None) -> bytes:
        chunks: list[bytes] = []

        def pump() -> None:
            for chunk in iter(lambda: p.stdout.read1(65536), b""):
                chunks.append(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        if input is not None:
            p.stdin.write(input)
            p.stdin.close()
        p.wait(timeout=timeout)
        t.join()
        return b"".join(chunks)

    def _stop_unit(self, unit: str) -> None:
        if self.leader and _alive(self.leader):
            try:
                self._nsenter(["systemctl", "stop", unit], timeout=15)
            except subprocess.TimeoutExpired:
                log(f"stopping {unit} inside {self.name} timed out")

    def copy_out(self, guest_path: str, host_dest: os.PathLike | str) -> list[str]:
        """Copy a file or directory tree out of the guest, never following symlinks.

        Symlinks (and devices, FIFOs, sockets) are skipped; the returned notes say which."""
        if not self.leader or not _alive(self.leader):
            raise MachineError("copy_out() needs a running machine")
        root = os.open(f"/proc/{self.leader}/root", os.O_RDONLY | os.O_DIRECTORY)
        try:
            dir_fd, name = _open_nofollow(root, guest_path)
        finally:
            os.close(root)
        try:
            dest = pathlib.Path(host_dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            notes = _copy_entry(dir_fd, name, dest, guest_path)
        finally:
            os.close(dir_fd)
        for n in notes:
            log(n)
        return notes

    def guest_exists(self, guest_path: str) -> bool:
        root = os.open(f"/proc/{self.leader}/root", os.O_RDONLY | os.O_DIRECTORY)
        try:
            dir_fd, name = _open_nofollow(root, guest_path)
        except MachineError:
            return False
        finally:
            os.close(root)
        try:
            os.lstat(name, dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(dir_fd)

    def journal(self, dest: os.PathLike | str) -> None:
        r = self.run(["journalctl", "-b", "--no-pager", "-o", "short-precise"], timeout=60)
        pathlib.Path(dest).write_bytes(r.stdout + (r.stderr or b""))

    # ------------------------------------------------------------ teardown
    def shutdown(self, deadline_s: float = 10) -> None:
        """Stop the machine and remove its cgroups, mounts and work dir. Idempotent."""
        if self._state in ("down", "stopping"):
            return
        self._state = "stopping"
        t0 = time.monotonic()
        try:
            if self.proc and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=deadline_s)
                except subprocess.TimeoutExpired:
                    log(f"systemd-nspawn {self.proc.pid} still running {deadline_s:g} s after SIGTERM: SIGKILL")
                    self.proc.kill()
                    self.proc.wait()
            if self.leader and _alive(self.leader):  # nspawn gone but its payload not: kill the namespace
                os.kill(self.leader, signal.SIGKILL)
            for root in CGROUP_ROOTS:
                _remove_cgroup(root / self.name)
            _umount_named(self.name)
            for path in (PROPAGATE_DIR / self.name, self.workdir):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
        finally:
            if self._console:
                self._console.close()
            if self._lock_fd is not None:
                (LOCK_DIR / f"{self.name}.lock").unlink(missing_ok=True)
                os.close(self._lock_fd)
                self._lock_fd = None
            self._restore_signal_handlers()
            self._state = "down"
        if self.proc:
            log(f"{self.name} down in {time.monotonic() - t0:.2f} s (nspawn exit status {self.proc.returncode})")
        if self._pending_signal:
            sys.exit(128 + self._pending_signal)

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _on_signal(self, signum, _frame) -> None:
        if self._state == "stopping":
            self._pending_signal = signum  # already tearing down: finish, then exit
            return
        log(f"got signal {signum}: tearing down {self.name}")
        old = self._old_handlers.get(signum)
        self.shutdown()
        if callable(old) and getattr(old, "__self__", None).__class__ is Machine:
            old(signum, _frame)  # another machine in this process: let it tear down too
        sys.exit(128 + signum)
