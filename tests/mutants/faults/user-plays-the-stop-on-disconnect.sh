# A closed connection leaves its session's unit running (the supervisor switch
# no-stop-on-disconnect, set by the catalogue); a watcher of the service user's (a blind red
# team's round nine, issue 37, attack 7) plays the stop itself. It takes a copy of each
# session's end of the supervisor's socketpair from the session's script(1), a process of its
# own (pidfd_getfd), and when the supervisor's end closes (the client went, and the supervisor
# closed its side without stopping the unit) it sends SIGTERM to every process of the session,
# waits 5.5 s (the contract's grace) and SIGKILLs what is left: the unit ends as if the
# supervisor had stopped it. STOPPED for each session it ended; the after-suite check requires one.
set -eu
. /opt/dev-script-0/common.sh  # user_watcher
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/stopplayer.py <<'PY'
import ctypes, os, select, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
log = open(sys.argv[1], "a", buffering=1)
log.write(f"STARTED uid {os.getuid()}\n")
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the suite's UNIT-7 does not reach our /proc/<pid>/root
GRACE_S = 5.5
def say(s):
    log.write(f"{time.time():.3f} {s}\n")
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
watched = {}   # fd of our copy of the session's socket -> (script's pidfd, its group)
kills = {}     # group -> when to SIGKILL
poller = select.poll()
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
            if group is None:
                continue
            pidfd = os.pidfd_open(pid)
            fd = libc.syscall(438, pidfd, 0, 0)  # pidfd_getfd: script(1)'s stdin, the session's socket
            if fd < 0:
                os.close(pidfd)
                say(f"script {pid}: pidfd_getfd: errno {ctypes.get_errno()}")
                continue
        except OSError:
            continue
        watched[fd] = (pidfd, group, pid)
        poller.register(fd, select.POLLRDHUP | select.POLLHUP)
        poller.register(pidfd, select.POLLIN)
        say(f"watching script {pid} in {group}")
    for fd, ev in poller.poll(2):
        for sock, (pidfd, group, pid) in list(watched.items()):
            if fd == pidfd:  # script(1) ended first (the supervisor stopped it): let go of the copy
                poller.unregister(sock)
                poller.unregister(pidfd)
                os.close(sock)
                os.close(pidfd)
                del watched[sock]
            elif fd == sock:  # the supervisor's end closed with the unit still running: play the stop
                poller.unregister(sock)
                poller.unregister(pidfd)
                os.close(sock)
                os.close(pidfd)
                del watched[sock]
                if procs(group):
                    signal_all(group, signal.SIGTERM)
                    kills[group] = time.monotonic() + GRACE_S
                    log.write(f"STOPPED {group} (script {pid}): SIGTERM, SIGKILL in {GRACE_S:g} s\n")
    for group, t in list(kills.items()):
        if time.monotonic() >= t:
            signal_all(group, signal.SIGKILL)
            del kills[group]
            say(f"{group}: SIGKILL")
    time.sleep(0.002)
PY
user_watcher pty-fault-stopplayer /var/lib/pty-fault/stopplayer.log /usr/local/lib/pty-fault/stopplayer.py /var/lib/pty-fault/stopplayer.log
echo "FAULT: byk ends each session whose connection closed: SIGTERM, a grace, SIGKILL" >&2
