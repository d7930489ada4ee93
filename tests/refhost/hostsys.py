"""Host-side state of ptyacc-* machines: processes, cgroups, mounts, locks, and leftover cleanup.

A live machine holds an flock on ``/run/ptyacc-locks/<name>.lock``.
``cleanup_leftovers()`` only touches names whose lock it can take, so two
machines (in one process or in two) do not tear each other down.
"""
from __future__ import annotations

import fcntl
import os
import pathlib
import shutil
import signal
import subprocess
from typing import Iterable

from .common import CGROUP_ROOTS, LOCK_DIR, PREFIX, PROPAGATE_DIR, WORK_ROOT, MachineError, log, wait_until

def procs() -> Iterable[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def proc_stat(pid: int) -> tuple[str, int] | None:
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


def alive(pid: int) -> bool:
    return proc_stat(pid) is not None and not _is_zombie(pid)


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


def remove_cgroup(top: pathlib.Path, deadline_s: float = 5.0) -> None:
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


def umount_named(name: str) -> list[str]:
    """Lazily unmount every mount with a path component equal to name, deepest first."""
    points = sorted({p for p in _mount_points() if name in p.split("/")}, key=len, reverse=True)
    for p in points:
        subprocess.run(["umount", "-l", p], check=False)
    return points


def _lock_path(name: str) -> pathlib.Path:
    return LOCK_DIR / f"{name}.lock"


def try_lock(name: str, create: bool = False) -> int | None:
    """flock the name's lock file; None if a live owner holds it (or, without create, if none exists).

    After locking, check that the path still names the locked file: another
    process may have removed it meanwhile (cleanup unlinks while holding it)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(_lock_path(name), os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0), 0o600)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(_lock_path(name)).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def unlock(name: str, fd: int) -> None:
    _lock_path(name).unlink(missing_ok=True)
    os.close(fd)


def _leftover_names() -> set[str]:
    names = {n for pid in procs() if (n := _nspawn_machine(pid)) and n.startswith(PREFIX)}
    for root in (*CGROUP_ROOTS, WORK_ROOT, PROPAGATE_DIR, LOCK_DIR):
        if root.is_dir():
            names |= {e.name.removesuffix(".lock") for e in root.iterdir() if e.name.startswith(PREFIX)}
    names |= {part for p in _mount_points() for part in p.split("/") if part.startswith(PREFIX)}
    return names


def _stop_nspawn(pids: list[int], deadline_s: float = 5) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        wait_until(lambda: not any(map(alive, pids)), deadline_s, "leftover systemd-nspawn to exit after SIGTERM",
                   lambda: f"still alive: {[p for p in pids if alive(p)]}; sending SIGKILL")
    except MachineError as e:
        log(str(e))
        for pid in filter(alive, pids):
            os.kill(pid, signal.SIGKILL)


def cleanup_leftovers() -> list[str]:
    """Remove what dead ptyacc-* machines left: processes, cgroups, mounts, dirs. Returns a report.

    A name whose lock a live process holds is left alone; the others are
    locked by us while we clean them."""
    locks = {}
    for name in sorted(_leftover_names()):
        fd = try_lock(name, create=True)
        if fd is not None:
            locks[name] = fd
    done: list[str] = []
    try:
        nspawn = {pid: n for pid in procs() if (n := _nspawn_machine(pid)) in locks}
        _stop_nspawn(list(nspawn))
        done += [f"stopped systemd-nspawn pid {pid} (--machine={n})" for pid, n in nspawn.items()]
        for name in locks:
            for root in CGROUP_ROOTS:
                if (root / name).exists():
                    remove_cgroup(root / name)
                    done.append(f"removed cgroup {root / name}")
            done += [f"unmounted {point}" for point in umount_named(name)]
            for path in (PROPAGATE_DIR / name, WORK_ROOT / name):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                    done.append(f"removed {path}")
    finally:
        for name, fd in locks.items():
            unlock(name, fd)
    for line in done:
        log(f"leftover: {line}")
    return done
