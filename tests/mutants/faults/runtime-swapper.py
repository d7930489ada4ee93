"""Run as the service user (byk) by runtime-swapped-before-handoff.sh: the
user owns the runtime's directory, so it may rename files there, even root's.

    python3 -I runtime-swapper.py DIR NAME N UNIT STATE

Watches DIR with inotify (IN_CLOSE_NOWRITE). After the Nth close of NAME
(what the suite reads of the runtime before RUNTIME-2: the gate's hash at
session start and RUNTIME-1's read) it exchanges NAME with DIR/.NAME.swap
(renameat2 RENAME_EXCHANGE: a working runtime one byte longer, never a moment
without a file at NAME). After the next close of NAME (RUNTIME-2 let go of
it: the runtime exited, or the suite closed what it hashed) and once UNIT is
no longer active, it exchanges them back. Every step goes to STATE (one word
per line: ready, swapped, restored) and to stdout (the journal).
"""
import ctypes
import os
import struct
import subprocess
import sys
import time

IN_CLOSE_NOWRITE, IN_CLOEXEC = 0x10, 0o2000000
AT_FDCWD, RENAME_EXCHANGE = -100, 2
DEADLINE_S = 1800
EVENT = struct.Struct("iIII")

directory, name, n, unit, state = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
libc = ctypes.CDLL("libc.so.6", use_errno=True)


def say(word: str) -> None:
    print(f"runtime-swapper: {word}", flush=True)
    with open(state, "a") as f:
        f.write(word.split()[0] + "\n")


def exchange() -> None:
    a, b = os.path.join(directory, name), os.path.join(directory, f".{name}.swap")
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        sys.exit(f"runtime-swapper: renameat2: {os.strerror(e)}")


def closes():
    """Each IN_CLOSE_NOWRITE of NAME, as it happens."""
    fd = libc.inotify_init1(IN_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, directory.encode(), IN_CLOSE_NOWRITE) < 0:
        sys.exit(f"runtime-swapper: inotify: {os.strerror(ctypes.get_errno())}")
    say("ready")
    while True:
        data = os.read(fd, 65536)
        off = 0
        while off < len(data):
            _, mask, _, size = EVENT.unpack_from(data, off)
            got = data[off + EVENT.size:off + EVENT.size + size].rstrip(b"\0").decode()
            off += EVENT.size + size
            if got == name:
                yield


def active() -> bool:
    out = subprocess.run(["/usr/bin/systemctl", "show", "-p", "ActiveState", "--value", unit],
                         capture_output=True, text=True).stdout.strip()
    return out in ("active", "activating", "deactivating", "reloading")


seen = 0
for _ in closes():
    seen += 1
    print(f"runtime-swapper: close {seen} of {name}", flush=True)
    if seen == n:
        exchange()
        say(f"swapped after close {seen}")
    elif seen > n:
        until = time.monotonic() + DEADLINE_S
        while active() and time.monotonic() < until:
            time.sleep(0.1)
        exchange()
        say(f"restored after close {seen}")
        break
