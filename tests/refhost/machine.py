"""A real systemd machine in systemd-nspawn, torn down on every exit path.

Everything the harness creates is named ``ptyacc-*`` (machine names, cgroups,
work directories, lock files, units run inside) so that
``cleanup_leftovers()`` can find what a crashed run left behind.
"""
from __future__ import annotations

import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence

from .common import CGROUP_ROOTS, PREFIX, PROPAGATE_DIR, WORK_ROOT, MachineError, log, wait_until
from .guestfs import copy_entry, open_parent_nofollow
from .hostsys import (alive, cleanup_leftovers, proc_stat, procs, remove_cgroup, try_lock, umount_named,
                      unlock)

__all__ = ["Machine", "MachineError", "cleanup_leftovers", "CGROUP_ROOTS", "wait_until"]


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
        self._console = None
        self._state = "new"  # new -> booting -> running -> stopping -> down
        # Reserve the name now: from here on cleanup_leftovers() (ours or another
        # process's) leaves this name's work dir alone, so callers may fill it before boot().
        self._lock_fd: int | None = try_lock(self.name, create=True)
        if self._lock_fd is None:
            self._state = "down"
            raise MachineError(f"machine name {self.name} is in use by a live process")

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
            cleanup_leftovers()
            _signals.register(self)
            self.workdir.mkdir(parents=True, exist_ok=True)
            for root in CGROUP_ROOTS:
                (root / self.name).mkdir()
            self._start_nspawn()
            t0 = time.monotonic()
            self._wait_for_leader(deadline_s)
            self._wait_running(max(0.0, deadline_s - (time.monotonic() - t0)))
        except BaseException:
            try:
                self.shutdown()
            except MachineError as e:
                log(str(e))
            raise
        self._state = "running"
        return self

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
            for pid in procs():
                if proc_stat(pid) == ("systemd", self.proc.pid):
                    self.leader = pid
                    return True
            return False
        wait_until(found, deadline_s, f"a child of systemd-nspawn (pid {self.proc.pid}) named systemd",
                   lambda: "no such child yet")

    def _wait_running(self, deadline_s: float) -> None:
        last = ["(not asked yet)"]

        def running() -> bool:
            self._check_nspawn()
            try:
                r = self._nsenter(["systemctl", "is-system-running"], timeout=5)
            except subprocess.TimeoutExpired:
                last[0] = "(systemctl is-system-running did not answer within 5 s)"
                return False
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
                if hasattr(sys.stdout, "buffer"):
                    sys.stdout.buffer.write(chunk)
                else:  # a replaced sys.stdout (capture) takes text only
                    sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        if input is not None:
            p.stdin.write(input)
            p.stdin.close()
        p.wait(timeout=timeout)
        t.join()
        return b"".join(chunks)

    def _stop_unit(self, unit: str) -> None:
        if self.leader and alive(self.leader):
            try:
                self._nsenter(["systemctl", "stop", unit], timeout=15)
            except subprocess.TimeoutExpired:
                log(f"stopping {unit} inside {self.name} timed out")

    def copy_out(self, guest_path: str, host_dest: os.PathLike | str) -> list[str]:
        """Copy a file or directory tree out of the guest, never following symlinks.

        Symlinks (and devices, FIFOs, sockets) are skipped; the returned notes say which."""
        if not self.leader or not alive(self.leader):
            raise MachineError("copy_out() needs a running machine")
        root = os.open(f"/proc/{self.leader}/root", os.O_RDONLY | os.O_DIRECTORY)
        try:
            dir_fd, name = open_parent_nofollow(root, guest_path)
        finally:
            os.close(root)
        try:
            dest = pathlib.Path(host_dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            notes = copy_entry(dir_fd, name, dest, guest_path)
        finally:
            os.close(dir_fd)
        for n in notes:
            log(n)
        return notes

    def guest_exists(self, guest_path: str) -> bool:
        root = os.open(f"/proc/{self.leader}/root", os.O_RDONLY | os.O_DIRECTORY)
        try:
            dir_fd, name = open_parent_nofollow(root, guest_path)
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
        """Stop the machine and remove its cgroups, mounts and work dir. Idempotent.

        Every step is tried even if an earlier one fails; failures are raised
        together at the end."""
        if self._state in ("down", "stopping"):
            return
        self._state = "stopping"
        t0 = time.monotonic()
        errors: list[str] = []
        for step in (lambda: self._stop_nspawn(deadline_s), self._remove_host_state):
            try:
                step()
            except Exception as e:  # noqa: BLE001 - collect, keep tearing down
                errors.append(f"{type(e).__name__}: {e}")
        if self._console:
            self._console.close()
        if self._lock_fd is not None:
            unlock(self.name, self._lock_fd)
            self._lock_fd = None
        self._state = "down"
        if self.proc:
            log(f"{self.name} down in {time.monotonic() - t0:.2f} s (nspawn exit status {self.proc.returncode})")
        _signals.unregister(self)
        if errors:
            raise MachineError(f"teardown of {self.name} incomplete: " + "; ".join(errors))

    def _stop_nspawn(self, deadline_s: float) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # nspawn halts the container on SIGTERM
            try:
                self.proc.wait(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                log(f"systemd-nspawn {self.proc.pid} still running {deadline_s:g} s after SIGTERM: SIGKILL")
                self.proc.kill()
                self.proc.wait()
        if self.leader and alive(self.leader):  # nspawn gone but its payload not: kill the PID namespace
            os.kill(self.leader, signal.SIGKILL)

    def _remove_host_state(self) -> None:
        for root in CGROUP_ROOTS:
            remove_cgroup(root / self.name)
        umount_named(self.name)
        for path in (PROPAGATE_DIR / self.name, self.workdir):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)


class _Signals:
    """SIGTERM/SIGINT handlers while any machine is up: tear all of them down, then exit 128+signal.

    If the signal comes while a teardown is already running, that teardown
    finishes first (it is not interrupted halfway) and the exit follows."""

    def __init__(self) -> None:
        self.live: list[Machine] = []
        self.saved: dict[int, object] = {}
        self.pending: int | None = None
        self.exiting = False

    def register(self, m: Machine) -> None:
        if not self.live and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.saved[sig] = signal.signal(sig, self._handler)
        self.live.append(m)

    def unregister(self, m: Machine) -> None:
        if m in self.live:
            self.live.remove(m)
        if self.pending is not None and not self.exiting:
            self._exit()  # a signal came during this teardown
        if not self.live:
            for sig, old in self.saved.items():
                signal.signal(sig, old)
            self.saved.clear()

    def _handler(self, signum, _frame) -> None:
        self.pending = signum
        if self.exiting or any(m._state == "stopping" for m in self.live):
            return
        self._exit()

    def _exit(self) -> None:
        self.exiting = True
        log(f"got signal {self.pending}: tearing down {', '.join(m.name for m in self.live) or 'nothing'}")
        errors = []
        for m in list(self.live):
            try:
                m.shutdown()
            except MachineError as e:
                errors.append(str(e))
        for sig, old in self.saved.items():
            signal.signal(sig, old)
        self.saved.clear()
        for e in errors:
            log(e)
        sys.exit(128 + self.pending)


_signals = _Signals()
