"""Sets of processes found on this host, each as pid -> (create_time, command
line): those in a cgroup directory, and those whose argv carries a token
(CONC-2, CONC-3, CGROUP-1, ORPHAN-1). The start time goes with every pid, so
that a reused pid is never taken for a survivor (proc.alive). The token only
finds: any process of the service user may carry it (SUITE-4)."""
from __future__ import annotations

import psutil

from pty_acceptance.host import proc
from pty_acceptance.host.cgroups import cgroup_pids


def token_processes(token: str) -> dict[int, tuple[float, str]]:
    """Every live (non-zombie) process whose argv contains the token (read from
    /proc directly: psutil's process_iter shares a cache between threads). A
    process gone meanwhile is left out; one that cannot be read raises
    proc.ProcUnreadable (it may carry the token)."""
    needle = token.encode()
    found = {}
    argvs = proc.walk(lambda pid: proc.read(pid, "cmdline", proc.CMDLINE_LIMIT), "the command line")
    for pid, argv in argvs.items():
        if needle not in argv:
            continue
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                found[process.pid] = (process.create_time(), argv.replace(b"\0", b" ")[:200].decode(
                    "utf-8", "replace"))
        except psutil.NoSuchProcess:
            continue
        except psutil.Error as e:
            raise proc.unreadable(pid, "the start time", e) from None
    return found


def processes_in(path: str) -> dict[int, tuple[float, str]]:
    """The processes of a cgroup directory (gone meanwhile: left out; unreadable:
    proc.ProcUnreadable)."""
    out = {}
    for pid in cgroup_pids(path):
        try:
            process = psutil.Process(pid)
            out[pid] = (process.create_time(), " ".join(process.cmdline())[:200])
        except psutil.NoSuchProcess:
            pass
        except psutil.Error as e:
            raise proc.unreadable(pid, "the start time and command line", e) from None
    return out
