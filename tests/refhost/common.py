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
SUPERVISOR_SWITCHES = "/etc/opencode-reference/faults"  # the reference supervisor's words, read at its start


def supervisor_switch_lines(words) -> list[str]:
    """sh lines (for `set -e`) that give the reference supervisor these switch
    words, one per line, and restart it; they end once its socket is back
    (bounded wait)."""
    quoted = " ".join(f"'{w}'" for w in words)
    return ["/bin/mkdir -p /etc/opencode-reference",
            f"printf '%s\\n' {quoted} > {SUPERVISOR_SWITCHES}",
            "/usr/bin/systemctl restart opencode-pty-supervisor.service",
            "i=0; while [ ! -S /run/opencode-pty/supervisor.sock ] && [ $i -lt 200 ]; do "
            "i=$((i+1)); sleep 0.05; done; [ -S /run/opencode-pty/supervisor.sock ]"]


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
