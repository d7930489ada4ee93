# The supervisor buffers a session's output without bound (the supervisor switch
# unbounded-output, set by the catalogue); a watcher of the service user's (a blind red team's
# round eleven, issue 37, attack 4) hides it. Once FLOOD-4's saturating writer (`yes ...
# saturating`, a process of its own) has written its first bytes, the watcher stops its
# terminal's output with ioctl(TCXONC, TCOOFF) on the writer's /dev/pts/N (the user owns it) and
# stops it again every 2 ms for as long as the writer lives: no signal, no ptrace; the writer
# sleeps in write(2) (state S) and the supervisor has nothing to buffer. STOPPED for each writer
# it held; the after-suite check requires one.
set -eu
. /opt/dev-script-0/common.sh  # user_watcher
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/flowstopper.py <<'PY'
import ctypes, os, sys, termios, time
log = open(sys.argv[1], "a", buffering=1)
log.write(f"STARTED uid {os.getuid()}\n")
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the suite's UNIT-7 does not reach our /proc/<pid>/root
def pts_of(pid):
    t = int(open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[4])
    major, minor = (t >> 8) & 0xfff, (t & 0xff) | ((t >> 12) & 0xfff00)
    return f"/dev/pts/{minor}" if 136 <= major <= 143 else None
held, seen = {}, set()
while True:
    for d in os.listdir("/proc"):
        if not d.isdigit() or d in seen:
            continue
        try:
            if not open(f"/proc/{d}/cmdline", "rb").read().startswith(b"yes\0"):
                continue
            if b"saturating" not in open(f"/proc/{d}/cmdline", "rb").read():
                continue
            wchar = int(open(f"/proc/{d}/io", "rb").read().split(b"wchar:")[1].split()[0])
            if wchar == 0:
                continue  # looked at again: held only once it has written
            seen.add(d)
            pts = pts_of(d)
            if pts is None:
                continue
            held[d] = os.open(pts, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
            log.write(f"STOPPED pid {d} on {pts} at {wchar} bytes\n")
        except (OSError, ValueError, IndexError):
            continue
    for d, fd in list(held.items()):
        if not os.path.exists(f"/proc/{d}"):
            os.close(fd)
            del held[d]
            continue
        try:
            termios.tcflow(fd, termios.TCOOFF)
        except OSError:
            pass
    time.sleep(0.002)
PY
user_watcher pty-fault-flowstopper /var/lib/pty-fault/flowstopper.log /usr/local/lib/pty-fault/flowstopper.py /var/lib/pty-fault/flowstopper.log
echo "FAULT: byk stops the output of FLOOD-4's saturating writer's terminal, again every 2 ms" >&2
