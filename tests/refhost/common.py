"""Names and small helpers shared by the reference-host modules."""
from __future__ import annotations

import pathlib
import sys
import time

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
            raise MachineError(f"timed out waiting for {what} ({deadline_s:.2f} s allowed); state: {state()}")
        time.sleep(POLL_S)
