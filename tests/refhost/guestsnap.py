"""What a reference host looks like at one moment, read inside the guest as
root, and the difference between two such moments (SUITE-1, SUITE-5).

Stdlib only, plus the suite's own D-Bus client for the unit list: it runs in
the guest with the guest's venv python. Nothing is followed: the tree walk
lstat()s every entry, reads regular files through O_NOFOLLOW, and records a
link's target as text.

    python guestsnap.py write FILE     the file tree and the units, as JSON
    python guestsnap.py diff A B       exit 1 and one line per difference
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys

SRC = "/opt/pty-acceptance/src"
sys.path.insert(0, f"{SRC}/acceptance")

# Mount points descended into (everything else mounted is left: /proc, /sys,
# /dev, the read-only binds of the checkout and the Node and opencode packages).
MOUNTS_WALKED = ("/tmp", "/run", "/var/tmp", "/dev/shm")
ROOTS = ("/", "/dev/shm")
# Not the suite's to keep still: the service manager's, the journal's, the
# harness's (the reference host's report directory and the guest venv's
# runtime state), and the marker. The unit list stands for /run/systemd.
NOT_COMPARED = (
    "/proc", "/sys", "/run/systemd", "/run/log", "/run/udev", "/run/dbus",
    "/var/log/journal", "/var/lib/systemd", "/var/cache/private",
    "/opt/pty-acceptance/out", "/opt/pty-acceptance/src",
    "/etc/opencode/pty-supervisor-verified",
)
UNITS_NOT_COMPARED = ("ptyacc-run-",)  # the harness's own units (this script runs in one)
# Slices are not compared: systemd loads and starts a slice when a unit first
# runs in it (a session in opencode-pty.slice) and keeps it; that is the
# service manager's state, not a change the suite made.
HASH_LIMIT = 64 << 20
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# New after a run, and expected: the run lock (SUITE-5, acceptance/pty_acceptance/
# rundir.py), root-only, empty, in /run so gone at reboot: no lasting write.
EXPECTED_NEW = {
    "/run/pty-acceptance": lambda m: m == [stat.S_IFDIR, 0o700, 0, 0],
    "/run/pty-acceptance/lock": lambda m: m[:5] == [stat.S_IFREG, 0o600, 0, 0, 0] and m[6] == EMPTY_SHA256,
}
# A service's PrivateTmp= directory carries a random suffix that changes when
# the service restarts (the suite restarts the supervisor and restores it):
# compared without the suffix.
PRIVATE_TMP = re.compile(r"^(/(?:var/)?tmp/systemd-private-[0-9a-f]{32}-[^/]+)-[A-Za-z0-9]{6}(?=/|$)")


def _excluded(path: str, excluded) -> bool:
    return any(path == e or path.startswith(e.rstrip("/") + "/") for e in excluded)


def _hash(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return f"unreadable: {e.strerror}"
    try:
        h = hashlib.sha256()
        n = 0
        while (chunk := os.read(fd, 1 << 20)) and n < HASH_LIMIT:
            h.update(chunk)
            n += len(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def tree(roots=ROOTS, excluded=NOT_COMPARED, walked=MOUNTS_WALKED, content: bool = True) -> dict:
    """path -> what it is. Files: kind, mode, owner, size, mtime, SHA-256;
    directories: kind, mode, owner (their entries are paths of their own);
    links: the target text; sockets, FIFOs, devices: kind, mode, owner.
    A mount inside a root is walked only if it is one of `walked`."""
    out: dict[str, list] = {}

    def visit(path: str, parent_dev: int) -> None:
        if _excluded(path, excluded):
            return
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        mode = st.st_mode
        base = [stat.S_IFMT(mode), stat.S_IMODE(mode), st.st_uid, st.st_gid]
        key = PRIVATE_TMP.sub(r"\1-*", path)
        if stat.S_ISDIR(mode):
            if st.st_dev != parent_dev and path not in walked:
                return  # another mount, not ours to compare
            out[key] = base
            try:
                names = sorted(os.listdir(path))
            except OSError as e:
                out[key] = base + [f"unlistable: {e.strerror}"]
                return
            for n in names:
                visit(os.path.join(path, n), st.st_dev)
        elif stat.S_ISREG(mode):
            out[key] = base + [st.st_size, st.st_mtime_ns, _hash(path) if content else ""]
        elif stat.S_ISLNK(mode):
            out[key] = base + [os.readlink(path)]
        else:
            out[key] = base

    for root in roots:
        try:
            visit(root, os.lstat(root).st_dev)
        except FileNotFoundError:
            continue
    return out


def units() -> dict:
    """unit name -> [load state, active state, sub state], from systemd over D-Bus."""
    from pty_acceptance.host.bus import Systemd

    bus = Systemd.connect()
    try:
        rows = bus.call("ListUnits")[0]
    finally:
        bus.close()
    return {r[0]: [r[2], r[3], r[4]] for r in rows
            if not r[0].startswith(UNITS_NOT_COMPARED) and not r[0].endswith(".slice")}


def snapshot(content: bool = True) -> dict:
    return {"tree": tree(content=content), "units": units()}


def diff(before: dict, after: dict) -> list[str]:
    out = []
    for what in ("tree", "units"):
        a, b = before.get(what, {}), after.get(what, {})
        for k in sorted(set(a) | set(b)):
            if k not in b:
                out.append(f"{what}: {k} gone (was {a[k]})")
            elif k not in a:
                if what == "tree" and k in EXPECTED_NEW and EXPECTED_NEW[k](b[k]):
                    continue
                out.append(f"{what}: {k} new ({b[k]})")
            elif a[k] != b[k]:
                out.append(f"{what}: {k} changed: {a[k]} -> {b[k]}")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["write"] and len(argv) == 2:
        with open(argv[1], "w") as f:
            json.dump(snapshot(), f)
        return 0
    if argv[:1] == ["diff"] and len(argv) == 3:
        with open(argv[1]) as a, open(argv[2]) as b:
            found = diff(json.load(a), json.load(b))
        for line in found:
            print(line)
        return 1 if found else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
