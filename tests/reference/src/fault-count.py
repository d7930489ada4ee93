"""The reference smoke harness's run counter (reference deployment, fixture code).

    opencode-reference-fault-count.socket -> python3 -I fault-count.py   (root, socket-activated)

The harness's fault switches `fail-run:N` and `hang-run:N`
(/etc/opencode-reference/plugin-faults) need to know which run of a PLUGIN-1
sequence this is. Each run has a fresh working directory and HOME, and sees
nothing of the service user's home or trees, so the count cannot be kept
anywhere a run can write: whatever a run can write, the service user can
write too (and did: a counter in its home, set to 100, made no run the
first). It is kept here, by root, where the user cannot change it.

Listens on the socket systemd passes (LISTEN_FDS, fd 3:
/run/opencode-reference/fault-count.sock, 0666). For each connection it reads
the caller's pid (SO_PEERCRED) and a pidfd of it (SO_PEERPIDFD: the /proc
read below is of that very process, not of one that reused its pid), and the
caller's cgroup. Only a process in a suite's plugin smoke run unit
(`/system.slice/pty-acceptance-plugin-smoke-<16 hex>.service`: systemd, as
root, makes those; the service user cannot put a process there) is counted:
the first connection from a unit gets the next number, every later one from
the same unit the same number (a process the user took over inside a run
cannot move the count). It answers `RUN <n>` and closes; anyone else gets
`REFUSED <why>` and counts nothing. Every answer is logged (the journal).
Nothing is read from the caller: it cannot stall the counter.
"""
import os
import re
import select
import socket
import struct
import sys

SO_PEERPIDFD = 77
RUN_UNIT = re.compile(r"^0::(/system\.slice/pty-acceptance-plugin-smoke-[0-9a-f]{16}\.service)$")
runs: dict[str, int] = {}


def cgroup_of(conn: socket.socket) -> str:
    """The unit cgroup of a counted caller, or ValueError naming why not."""
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    pidfd = conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read(4096).splitlines()
        p = select.poll()
        p.register(pidfd, select.POLLIN)
        if p.poll(0):  # it exited: the /proc read may have been another process's
            raise ValueError(f"pid {pid} exited while it was read")
    finally:
        os.close(pidfd)
    for line in lines:
        m = RUN_UNIT.match(line)
        if m:
            return m.group(1)
    raise ValueError(f"pid {pid} uid {uid} is in {lines[-1][:200] if lines else 'no cgroup'!r}, "
                     "not a plugin smoke run")


def main() -> int:
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or os.environ.get("LISTEN_FDS") != "1":
        print("fault-count: not started by its socket unit", file=sys.stderr)
        return 1
    srv = socket.socket(fileno=3)
    while True:
        conn, _ = srv.accept()
        try:
            try:
                unit = cgroup_of(conn)
            except (OSError, ValueError) as e:
                answer = f"REFUSED {e}"
            else:
                n = runs.setdefault(unit, len(runs) + 1)
                answer = f"RUN {n}"
            print(f"fault-count: {answer}" + (f" ({unit})" if answer.startswith("RUN") else ""), flush=True)
            conn.settimeout(1)
            conn.sendall(answer.encode() + b"\n")
        except OSError as e:
            print(f"fault-count: answering failed: {e}", flush=True)
        finally:
            conn.close()


if __name__ == "__main__":
    sys.exit(main())
