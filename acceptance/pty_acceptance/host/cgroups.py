"""A unit's cgroup on this host, read as root: its directory and its processes.

The ControlGroup systemd reports is looked up under the unified hierarchy,
the hybrid host's unified mirror and the legacy named hierarchy, in that
order; a directory counts only when it holds `cgroup.procs` (a cgroup, not a
stray directory of the same name). Not Testinfra's `host.process`: a unit's
processes are its cgroup's, each read by pid; nothing here follows a name a
session chose. And the other way round: whether a process is inside a unit's
cgroup (what proc.cgroups read of it), what decides whether the suite may
signal it (SUITE-4).
"""

from __future__ import annotations

import errno
import os

from pty_acceptance.host.bus import SERVICE_IFACE, Systemd

# where systemd's cgroup tree is mounted: unified, hybrid (unified mirror), legacy named
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")
PROCS_LIMIT = 1 << 20


def cgroup_dir(control_group: str) -> str | None:
    """The directory of a live ControlGroup on this host (one holding
    cgroup.procs), or None: gone, empty, or not an absolute name without '..'."""
    if not control_group.startswith("/") or ".." in control_group.split("/"):
        return None
    for root in CGROUP_ROOTS:
        path = root + control_group.rstrip("/")
        if os.path.isfile(os.path.join(path, "cgroup.procs")):
            return path
    return None


def cgroup_pids(path: str) -> list[int]:
    """Pids in a cgroup directory and every sub-cgroup, sorted, once each
    ([] once it is gone; a sub-cgroup removed while it is walked is skipped;
    any other read error is raised, never taken for an empty cgroup)."""
    pids = set()
    for dirpath, _dirs, _files in os.walk(path):  # never follows a link
        try:
            with open(os.path.join(dirpath, "cgroup.procs"), "rb") as f:
                pids |= {int(x) for x in f.read(PROCS_LIMIT).split()}
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENODEV):  # removed while it was walked
                continue
            raise
    return sorted(pids)


def inside(groups: list[str], control_group: str) -> bool:
    """One of `groups` (proc.cgroups of a process) is `control_group` or below it."""
    cg = control_group.rstrip("/")
    return bool(cg) and any(g == cg or g.startswith(cg + "/") for g in groups)


def unit_pids(bus: Systemd, unit: str) -> set[int]:
    """A unit's MainPID and every process of its cgroup."""
    svc = bus.properties(unit, SERVICE_IFACE) or {}
    pids = {svc["MainPID"]} if svc.get("MainPID") else set()
    if svc.get("ControlGroup") and (path := cgroup_dir(svc["ControlGroup"])):
        pids |= set(cgroup_pids(path))
    return pids
