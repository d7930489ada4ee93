# A closed connection leaves its session's unit running (the supervisor switch
# no-stop-on-disconnect, set by the catalogue); a watcher of the service user's (a blind red
# team's round nine, issue 37, attack 7) plays the stop itself. It reads which socket each
# session's script(1), a process of its own, has as its stdin (the session's end of the
# supervisor's socketpair) and asks sock_diag (no privilege needed) for that socket's peer every
# 10 ms; when the supervisor's end is closed (the client went, and the supervisor closed its
# side without stopping the unit) it sends SIGTERM to every process of the session,
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
def peer_ino(ino):
    """The peer inode sock_diag reports for unix socket `ino` (0: its peer closed; None: gone)."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)  # NETLINK_SOCK_DIAG: no privilege needed
    try:
        req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xffffffff, ino, 0x4, 0xffffffff, 0xffffffff)
        s.send(struct.pack("=IHHII", 16 + len(req), 20, 0x1, 1, 0) + req)  # SOCK_DIAG_BY_FAMILY, REQUEST
        data = s.recv(65536)
    finally:
        s.close()
    length, kind = struct.unpack_from("=IH", data)
    if kind == 2:  # NLMSG_ERROR: no such socket
        return None
    off = 32  # nlmsghdr, unix_diag_msg
    while off + 4 <= length:
        alen, atype = struct.unpack_from("=HH", data, off)
        if atype == 2:  # UNIX_DIAG_PEER
            return struct.unpack_from("=I", data, off + 4)[0]
        off += (alen + 3) & ~3
    return 0
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
watched = {}   # script(1)'s pid -> (its group, the inode of its stdin: the session's socket)
kills = {}     # group -> when to SIGKILL
while True:
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in seen:
            continue
        pid = int(d)
        try:
            if os.stat(f"/proc/{d}").st_uid != me or open(f"/proc/{d}/comm").read().strip() != "script":
                continue
            seen.add(pid)
            group = group_of(pid)
            link = os.readlink(f"/proc/{d}/fd/0")
            if group is None or not link.startswith("socket:["):
                continue
            watched[pid] = (group, int(link[8:-1]))
            say(f"watching script {pid} in {group}, its socket {link}")
        except OSError:
            continue
    for pid, (group, ino) in list(watched.items()):
        peer = peer_ino(ino)
        if peer == 0 and procs(group):  # the supervisor closed its end, the unit still runs: play the stop
            signal_all(group, signal.SIGTERM)
            kills[group] = time.monotonic() + GRACE_S
            log.write(f"STOPPED {group} (script {pid}): SIGTERM, SIGKILL in {GRACE_S:g} s\n")
        if peer == 0 or peer is None:  # played, or the session (and its socket) gone
            del watched[pid]
    for group, t in list(kills.items()):
        if time.monotonic() >= t:
            signal_all(group, signal.SIGKILL)
            del kills[group]
            say(f"{group}: SIGKILL")
    time.sleep(0.01)
PY
user_watcher pty-fault-stopplayer /var/lib/pty-fault/stopplayer.log /usr/local/lib/pty-fault/stopplayer.py /var/lib/pty-fault/stopplayer.log
echo "FAULT: byk ends each session whose connection closed: SIGTERM, a grace, SIGKILL" >&2
