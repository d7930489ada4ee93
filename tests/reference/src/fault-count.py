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
cannot move the count). It answers `RUN <n>`; anyone else gets `REFUSED
<why>` and counts nothing. Every answer is logged (the journal). After the
answer it shuts its side and waits, at most LINGER_S, for the caller to close
its own before closing the connection: bun's client reports a connection the
other side closed at once as `connect ECONNRESET` (seen: 169 of 200), the
answer unread. Connections are served side by side (selectors), so a caller
that never closes holds up no one: it is dropped at LINGER_S, and at most
PENDING are kept waiting.
"""
import os
import re
import select
import selectors
import socket
import struct
import sys
import time

SO_PEERPIDFD = 77
LINGER_S = 2.0  # after the answer: how long the caller may take to close its side
PENDING = 256  # answered connections waiting at most, the oldest dropped first
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


def answer(conn: socket.socket) -> None:
    """Count (or refuse) the caller and send the answer."""
    try:
        unit = cgroup_of(conn)
    except (OSError, ValueError) as e:
        line, note = f"REFUSED {e}", ""
    else:
        line, note = f"RUN {runs.setdefault(unit, len(runs) + 1)}", f" ({unit})"
    print(f"fault-count: {line}{note}", flush=True)
    conn.settimeout(1)
    conn.sendall(line.encode() + b"\n")
    conn.shutdown(socket.SHUT_WR)


def main() -> int:
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or os.environ.get("LISTEN_FDS") != "1":
        print("fault-count: not started by its socket unit", file=sys.stderr)
        return 1
    srv = socket.socket(fileno=3)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, None)
    pending: dict[socket.socket, float] = {}  # answered, waiting for the caller to close: deadline

    def drop(c: socket.socket) -> None:
        sel.unregister(c)
        del pending[c]
        c.close()

    while True:
        now = time.monotonic()
        for c in [c for c, until in pending.items() if until <= now]:
            drop(c)
        wait = max(0.0, min(pending.values()) - now) if pending else None
        for key, _ in sel.select(wait):
            if key.data is None:
                conn, _ = srv.accept()
                try:
                    answer(conn)
                except OSError as e:
                    print(f"fault-count: answering failed: {e}", flush=True)
                    conn.close()
                    continue
                if len(pending) >= PENDING:
                    drop(min(pending, key=pending.__getitem__))
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ, "pending")
                pending[conn] = time.monotonic() + LINGER_S
            else:
                c = key.fileobj
                try:
                    more = c.recv(256)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                except OSError:
                    more = b""
                if not more:  # the caller closed its side (what it sends is not read)
                    drop(c)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
