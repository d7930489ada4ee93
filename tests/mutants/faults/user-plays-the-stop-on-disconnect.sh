# A closed connection leaves its session's unit running (the supervisor switch
# no-stop-on-disconnect, set by the catalogue); a watcher of the service user's (a blind red
# team's round nine, issue 37, attack 7) plays the stop itself. Every 10 ms it lists, through
# sock_diag (no privilege needed), the supervisor's accepted connections (connected sockets named
# as its listening socket: an accepted socket lives in its client's network namespace), pairs
# each new session (its script(1), a process of its own) with the oldest recent connection not yet
# paired (the suite opens its sessions' connections in turn), and when that connection is gone while the
# unit still runs (the supervisor did not stop it) it sends SIGTERM to every process of the session,
# waits 5.5 s (the contract's grace) and SIGKILLs what is left: the unit ends as if the
# supervisor had stopped it. STOPPED for each session it ended; the after-suite check requires one.
set -eu
. /opt/dev-script-0/common.sh  # user_watcher
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/stopplayer.py <<'PY'
import ctypes, os, signal, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
log = open(sys.argv[1], "a", buffering=1)
log.write(f"STARTED uid {os.getuid()}\n")
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the suite's UNIT-7 does not reach our /proc/<pid>/root
GRACE_S = 5.5
def say(s):
    log.write(f"{time.time():.3f} {s}\n")
SOCKET = b"/run/opencode-pty/supervisor.sock"
def connections():
    """The inodes of the supervisor's accepted connections: connected unix stream sockets named
    as its listening socket. An accepted socket lives in its client's network namespace, so it is
    listed here even though the supervisor's own namespace is private (sock_diag, no privilege)."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)  # NETLINK_SOCK_DIAG
    found = set()
    try:
        req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 1 << 1, 0, 0x1 | 0x4, 0xffffffff, 0xffffffff)
        s.send(struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0) + req)  # SOCK_DIAG_BY_FAMILY, DUMP
        done = False
        while not done:
            data = s.recv(1 << 20)
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if kind in (2, 3) or length < 16:  # NLMSG_ERROR, NLMSG_DONE
                    done = True
                    break
                stype, ino = data[off + 17], struct.unpack_from("=I", data, off + 20)[0]
                a, name, peer = off + 32, b"", 0
                while a + 4 <= off + length:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if atype == 0:  # UNIX_DIAG_NAME
                        name = data[a + 4:a + alen].rstrip(b"\0")
                    elif atype == 2 and alen >= 8:  # UNIX_DIAG_PEER
                        peer = struct.unpack_from("=I", data, a + 4)[0]
                    a += (alen + 3) & ~3
                if stype == socket.SOCK_STREAM and name == SOCKET:
                    found.add(ino)
                off += (length + 3) & ~3
    finally:
        s.close()
    return found
def group_of(pid):
    line = open(f"/proc/{pid}/cgroup").read().strip().split("\n")[-1]
    group = line.split("::", 1)[1]
    return group if "/opencode-pty-" in group else None
def procs(group):
    try:
        return [int(p) for p in open(f"/sys/fs/cgroup{group}/cgroup.procs").read().split()]
    except OSError:
        return []
def signal_all(group, sig):
    for p in procs(group):
        try:
            os.kill(p, sig)
        except OSError:
            pass
me, seen = os.getuid(), set()
first_seen = {}  # connection inode -> when first seen (those present at start never count)
for ino in connections():
    first_seen[ino] = 0.0
paired = {}      # connection inode -> the session group started on it
kills = {}       # group -> when to SIGKILL
while True:
    now = time.monotonic()
    live = connections()
    for ino in live:
        first_seen.setdefault(ino, now)
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in seen:
            continue
        try:
            if os.stat(f"/proc/{d}").st_uid != me or open(f"/proc/{d}/comm").read().strip() != "script":
                continue
            seen.add(int(d))
            group = group_of(int(d))
        except OSError:
            continue
        if group is None or group in paired.values():
            continue
        # the session was started on the oldest connection of the last 30 s not yet paired (the
        # suite opens its sessions' connections in turn, the supervisor starts their units in turn)
        free = [i for i in live if 0 < first_seen[i] and now - first_seen[i] < 30 and i not in paired]
        if free:
            ino = min(free, key=lambda i: first_seen[i])
            paired[ino] = group
            say(f"session {group} on connection {ino}")
    for ino, group in list(paired.items()):
        if ino in live:
            continue
        del paired[ino]  # the client's connection is gone
        if procs(group):  # and the unit still runs: play the stop
            signal_all(group, signal.SIGTERM)
            kills[group] = time.monotonic() + GRACE_S
            log.write(f"STOPPED {group} (connection {ino} closed): SIGTERM, SIGKILL in {GRACE_S:g} s\n")
    for group, t in list(kills.items()):
        if time.monotonic() >= t:
            signal_all(group, signal.SIGKILL)
            del kills[group]
            say(f"{group}: SIGKILL")
    time.sleep(0.01)
PY
user_watcher pty-fault-stopplayer /var/lib/pty-fault/stopplayer.log /usr/local/lib/pty-fault/stopplayer.py /var/lib/pty-fault/stopplayer.log
echo "FAULT: byk ends each session whose connection closed: SIGTERM, a grace, SIGKILL" >&2
