"""The run's own directory under /run: the run lock, and the ledger of what a
run has put in /run until it takes it away again (SUITE-5).

``/run/pty-acceptance`` (root:root 0700, reached from "/" without following a
link, every directory on the way root-owned and not group/other-writable)
holds:

- ``lock``: flock()ed by the one run in progress, from the root conftest's
  first hook until the process ends (startup.py). A second run finds it
  locked and fails at once, naming the first: its pid as the kernel's lock
  table (/proc/locks) gives it, that process's start time and command line.
- ``standin-<hex>.json``: one per stand-in listener (standin_listener.py) while it
  exists: the socket and the directories made for it, each with its device
  and inode as lstat() saw them right after it was made, and its owners
  (root, who made it, and the user it is then given to).
- ``pty-acceptance-<tag>-runtime.env``: the root-only copy of the runtime's
  environment files (candidate/runtimeunit.py).
- ``scratch-<hex>.json``: the run's scratch area (scratch.py: the root-owned
  directory in /tmp that holds every temporary directory the run makes, the
  service user's workspaces and build directories among them): its path,
  device and inode, from the moment it exists until the run has removed it.

Why /run: a root-only tmpfs that the boot empties, so neither the lock nor a
crashed run's ledger is a lasting write (SUITE-1: the marker and the reports
are the only ones) and neither can outlive the processes it speaks of. Not
beside the marker: /etc is persistent.

After SIGKILL nothing of the run's own teardown runs; the next run, holding
the lock, undoes every ledger entry first (`clean_first`): it removes a
recorded socket or directory only when lstat() still finds that same object
(kind, device, inode, owner) at that name, removes it by its parent's
descriptor (a directory and what it holds by hostfs.remove_tree_at), and
never follows a link. What no longer matches is left alone and said.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import stat
import time
from pathlib import PurePosixPath

from pty_acceptance.errors import Refused
from pty_acceptance.host import hostfs, proc, terminal

DEFAULT_DIR = "/run/pty-acceptance"
LOCK_NAME = "lock"
RECORD = re.compile(r"^standin-[0-9a-f]{16}\.json$")
SCRATCH_RECORD = re.compile(r"^scratch-[0-9a-f]{16}\.json$")
SCRATCH_NAME = re.compile(r"^pty-acceptance-run-[A-Za-z0-9_]{8}$")  # mkdtemp's names (scratch.PREFIX)
TMP_LOOKED_AT = 1000  # pty-acceptance-* entries of /tmp clean_tmp considers
ENV_COPY = re.compile(r"^pty-acceptance-[0-9a-f]{8}-runtime\.env$")
RECORD_LIMIT = 65536
TMP_PREFIX = "pty-acceptance-"  # every temporary directory the suite makes (mkdtemp prefixes)

_current = DEFAULT_DIR  # the run directory of this process (startup.py sets it)


class RunDirError(Refused):
    """The run directory cannot be used safely."""


class Busy(Refused):
    """Another run holds the lock; the message names it."""


def current() -> str:
    return _current


def use(path: str) -> None:
    global _current
    _current = path


def _check_dir_fd(fd: int, where: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != 0 or stat.S_IMODE(st.st_mode) & 0o022:
        raise RunDirError(f"{where} is uid {st.st_uid} mode {stat.S_IMODE(st.st_mode):04o}: "
                          "not root-owned or writable by group/other")


def open_run_dir(path: str | None = None) -> int:
    """The run directory (made if missing, 0700 root), as a descriptor."""
    path = path or _current
    try:
        fd = hostfs.open_dir(path, each=_check_dir_fd, create=True)
    except hostfs.PathRefused as e:
        raise RunDirError(str(e)) from None
    except OSError as e:
        raise RunDirError(f"{path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, 0o700)
    except OSError as e:
        os.close(fd)
        raise RunDirError(f"{path}: {e.strerror or e}") from None
    return fd


# ------------------------------------------------------------------ the lock
class Lock:
    fd: int | None  # None once released

    def __init__(self, path: str, fd: int):
        self.path, self.fd = path, fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = None


def acquire(path: str | None = None) -> Lock:
    """The run lock, or Busy naming the run that holds it."""
    path = path or _current
    dfd = open_run_dir(path)
    where = os.path.join(path, LOCK_NAME)
    try:
        try:
            fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                         | os.O_NONBLOCK, 0o600, dir_fd=dfd)
        except OSError as e:
            raise RunDirError(f"{where}: {e.strerror or e}") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_nlink != 1:
        os.close(fd)
        raise RunDirError(f"{where} is a {hostfs.kind_of(st.st_mode)} of uid {st.st_uid} with "
                          f"{st.st_nlink} links: not the suite's lock file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Busy(f"another acceptance run holds {where}: {holder(st)}") from None
    return Lock(path, fd)


def held_by_another(path: str) -> bool:
    """Another process holds the run lock in `path`, as the kernel's lock
    table says; the lock is never taken or made here (the early guard,
    gate/early.py, looks before the run guard takes it)."""
    try:
        st = os.stat(os.path.join(path, LOCK_NAME), follow_symlinks=False)
    except OSError:
        return False
    return any(pid != os.getpid() for pid in lock_holders(st))


def lock_holders(st: os.stat_result) -> list[int]:
    """The pids the kernel's lock table gives for locks on that file."""
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    try:
        table = hostfs.read_file("/proc/locks", 1 << 22).decode("ascii", "replace")
    except OSError:
        return []
    for line in table.splitlines():
        f = line.split()
        if "->" in f:  # a waiter, not a holder
            continue
        if len(f) >= 6 and f[1] == "FLOCK" and f[5] == want and f[4].isdigit():
            pids.append(int(f[4]))
    return pids


def describe_process(pid: int) -> str:
    started = proc.start_time(pid)
    if started is None:
        return f"pid {pid} (gone since)"
    try:
        argv = hostfs.read_file(f"/proc/{pid}/cmdline", 4096).split(b"\0")
        cmd = " ".join(a.decode("utf-8", "replace") for a in argv if a)[:300]
    except OSError:
        cmd = "?"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    return terminal.escape(f"pid {pid}, started {when}: {cmd}")


def holder(st: os.stat_result) -> str:
    pids = lock_holders(st)
    if not pids:
        return "a process the kernel's lock table (/proc/locks) does not name"
    return "; ".join(describe_process(p) for p in pids)


# ------------------------------------------------------------------ the ledger
def _same(st: os.stat_result, rec: dict, test) -> bool:
    return test(st.st_mode) and (st.st_dev, st.st_ino) == (rec["dev"], rec["ino"]) \
        and st.st_uid in rec["uids"]


def observed(path: str, ident: tuple[int, int], owner: int) -> dict:
    """Right after it was made (by root, handed to `owner`; `ident` its device
    and inode as read from its descriptor): either owner is ours."""
    return {"path": path, "dev": ident[0], "ino": ident[1], "uids": sorted({0, owner})}


class Ledger:
    """One stand-in's record in the run directory: what it made so far."""

    def __init__(self) -> None:
        self.name = f"standin-{secrets.token_hex(8)}.json"
        self.entry: dict = {"pid": os.getpid(), "dirs": [], "socket": None}

    def _save(self) -> None:
        dfd = open_run_dir()
        try:
            hostfs.replace_at(dfd, self.name, json.dumps(self.entry).encode(), 0o600, owner=(0, 0))
        finally:
            os.close(dfd)

    def open(self) -> "Ledger":
        self._save()
        return self

    def made_dir(self, path: str, ident: tuple[int, int], owner: int) -> None:
        self.entry["dirs"].append(observed(path, ident, owner))
        self._save()

    def made_socket(self, path: str, ident: tuple[int, int], owner: int) -> None:
        self.entry["socket"] = observed(path, ident, owner)
        self._save()

    def close(self) -> None:
        dfd = open_run_dir()
        try:
            os.unlink(self.name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        finally:
            os.close(dfd)


def record_scratch(path: str, ident: tuple[int, int]) -> str:
    """The scratch area's record (scratch.py), written the moment it exists; its name."""
    name = f"scratch-{secrets.token_hex(8)}.json"
    entry = {"pid": os.getpid(), "path": path, "dev": ident[0], "ino": ident[1]}
    dfd = open_run_dir()
    try:
        hostfs.replace_at(dfd, name, json.dumps(entry).encode(), 0o600, owner=(0, 0))
    finally:
        os.close(dfd)
    return name


def drop_record(run_dir: str, name: str) -> None:
    """A record whose object is gone (the run removed it itself)."""
    try:
        dfd = hostfs.open_dir(run_dir)
    except OSError:
        return  # the run directory went with it (a test's private one)
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)


def _remove(rec: dict, test, what: str) -> tuple[str, bool]:
    """(what happened, in words; whether nothing of it is left where it was)."""
    path = rec["path"]
    parent, name = str(PurePosixPath(path).parent), PurePosixPath(path).name
    try:
        pfd = hostfs.open_dir(parent)
    except FileNotFoundError:
        return f"{what} {path}: already gone", True
    except OSError as e:
        return f"{what} {path}: left alone, its directory is not reachable without a link ({e})", True
    try:
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return f"{what} {path}: already gone", True
        if not _same(st, rec, test):
            return (f"{what} {path}: left alone, a {hostfs.kind_of(st.st_mode)} of uid {st.st_uid} "
                    "that is not the one the crashed run made"), True
        if stat.S_ISDIR(st.st_mode):
            done = hostfs.remove_tree_at(pfd, name, path, ident=(st.st_dev, st.st_ino))
            return f"{what} {done.describe()}", done.complete
        os.unlink(name, dir_fd=pfd)
        return f"{what} {path}: removed", True
    finally:
        os.close(pfd)


def undo(entry: dict) -> list[str]:
    """Remove what one ledger entry says was made: the socket, then its
    directories deepest first."""
    done = []
    if entry.get("socket"):
        done.append(_remove(entry["socket"], stat.S_ISSOCK, "stand-in socket")[0])
    for rec in reversed(entry.get("dirs") or []):
        done.append(_remove(rec, stat.S_ISDIR, "stand-in directory")[0])
    return done


def undo_scratch(entry: dict) -> tuple[str, bool]:
    """Remove the scratch area (scratch.py) one record names, by descriptor,
    if lstat still finds that same root-owned directory at that name:
    (what happened, whether nothing of it is left: else the record is kept)."""
    rec = {"path": entry["path"], "dev": entry["dev"], "ino": entry["ino"], "uids": [0]}
    if not isinstance(rec["path"], str) or not SCRATCH_NAME.match(PurePosixPath(rec["path"]).name):
        return f"scratch area {rec['path']!r}: left alone, not a name the suite makes", True
    return _remove(rec, stat.S_ISDIR, "scratch area")


def _read_record(dfd: int, name: str) -> dict:
    entry = json.loads(hostfs.read_fd(hostfs.open_file_at(dfd, name, name), RECORD_LIMIT, name))
    if not isinstance(entry, dict):
        raise TypeError(f"{type(entry).__name__}, not an object")
    return entry


def clean_first(path: str | None = None) -> list[str]:
    """What an earlier run left in /run (it was SIGKILLed): stand-ins undone,
    scratch areas removed, runtime environment copies removed. Call it
    holding the lock. Returns what happened, in words (escaped)."""
    dfd = open_run_dir(path)
    done = []
    try:
        for name in sorted(os.listdir(dfd)):
            if name == LOCK_NAME:
                continue
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if RECORD.match(name) and stat.S_ISREG(st.st_mode):
                try:
                    done += undo(_read_record(dfd, name))
                except (OSError, ValueError, KeyError, TypeError) as e:
                    done.append(f"ledger {name} unreadable ({e}): what it recorded is left")
                os.unlink(name, dir_fd=dfd)
            elif SCRATCH_RECORD.match(name) and stat.S_ISREG(st.st_mode):
                gone = True
                try:
                    said, gone = undo_scratch(_read_record(dfd, name))
                    done.append(said)
                except (OSError, ValueError, KeyError, TypeError) as e:
                    done.append(f"ledger {name} unreadable ({e}): what it recorded is left")
                if gone:  # else kept: the next run tries again
                    os.unlink(name, dir_fd=dfd)
            elif ENV_COPY.match(name) and stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=dfd)
                done.append(f"runtime environment copy {name}: removed")
            elif stat.S_ISREG(st.st_mode) and name.startswith((".standin-", ".scratch-")):
                os.unlink(name, dir_fd=dfd)  # a temporary file of replace_at
            else:
                done.append(f"{name} ({hostfs.kind_of(st.st_mode)}): not the suite's, left alone")
    finally:
        os.close(dfd)
    return [terminal.escape(d) for d in done]


def clean_tmp(tmpdir: str, keep: tuple[int, int] | None = None) -> list[str]:
    """The temporary directories a SIGKILLed run left in `tmpdir` (a scratch
    area whose record was lost with a reboot of /run, or what an older suite
    made there itself): named pty-acceptance-*, and root-owned, so made by
    root (with the lock held, by no other run). Removed by descriptor
    (hostfs.remove_tree_at), links not followed; `keep` (device, inode) is
    this process's own scratch area. What the service user owns there is
    never the suite's to remove."""
    try:
        dfd = hostfs.open_dir(tmpdir)
    except OSError as e:
        return [terminal.escape(f"{tmpdir}: not looked at ({e})")]
    done, foreign, seen = [], 0, 0
    try:
        with os.scandir(dfd) as it:
            names: list[str] = []
            for entry in it:
                if entry.name.startswith(TMP_PREFIX):
                    seen += 1
                    if len(names) < TMP_LOOKED_AT:
                        names.append(entry.name)
        for name in sorted(names):
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if keep is not None and (st.st_dev, st.st_ino) == tuple(keep):
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_uid == 0:
                gone = hostfs.remove_tree_at(dfd, name, os.path.join(tmpdir, name),
                                             ident=(st.st_dev, st.st_ino))
                done.append(f"temporary directory {gone.describe()}")
            else:
                foreign += 1
    finally:
        os.close(dfd)
    if foreign:
        done.append(f"{foreign} other {TMP_PREFIX}* entries in {tmpdir}: not root's directories, left alone")
    if seen > len(names):
        done.append(f"{seen - len(names)} more {TMP_PREFIX}* entries in {tmpdir}: not looked at "
                    f"(at most {TMP_LOOKED_AT} are)")
    return [terminal.escape(d) for d in done]
