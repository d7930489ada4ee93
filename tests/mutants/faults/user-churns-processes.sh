# The service user, for the whole run, keeps a crowd of 1,000 idle processes
# of its own, lets one exit and makes another all the time; when it sees the
# session probe of UNIT-5 start (a process of a session whose command line
# carries its code, out["proc_gone"] among it: the suite's text is public) it lets 5 of them exit
# every 5 ms for about 2 s (the probe lists /proc only once root has admitted it; one burst of 300
# at first sight was over by then in the whole matrix, and the fault proved nothing). All are dumpable, so a session lists them in /proc; the crowd makes
# the probe's pass over /proc long, so some exit between its listing and its
# read. UNIT-5 counted such a one as another user's process (NOT READY on a
# good host, issue of session 31). The unit's /run is a private tmpfs: its
# /proc/<pid>/root reaches none of the host's sockets, so UNIT-7 has nothing
# to find through it (a real finding, not this fault's). Every burst is
# logged; the after-suite check (catalogue.py) reads the log and the report.
set -eu
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/churn.py <<'PY'
import os, random, sys, time

LOG, CROWD = sys.argv[1], int(sys.argv[2])
wake_r, wake_w = os.pipe()  # one byte read: one idle process wakes, and exits a moment later
mine = set()


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


def idle():
    pid = os.fork()
    if pid == 0:
        os.close(wake_w)
        os.read(wake_r, 1)
        time.sleep(random.uniform(0.03, 0.4))
        os._exit(0)
    mine.add(pid)


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        mine.discard(pid)


for _ in range(CROWD):
    idle()
log(f"STARTED uid {os.getuid()} with {len(mine)} idle processes")
seen, bursts, tick, waiting, spread = set(), 0, 0, set(), 0
while True:
    tick += 1
    if tick % 2 == 0:
        os.write(wake_w, b"x")  # the steady churn: one exits, one more is made
    reap()
    if len(mine) < CROWD:
        idle()
    pids = {int(n) for n in os.listdir("/proc") if n.isdigit()}
    for pid in sorted(pids - seen - mine - {os.getpid()}):
        try:  # the probe itself, in its session (the helper's argv carries its text too, much earlier)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                probe = b'out["proc_gone"]' in f.read(1 << 16)
            with open(f"/proc/{pid}/cgroup", "rb") as f:
                session = b"/opencode-pty.slice/" in f.read(1 << 16)
        except OSError:
            continue
        if session and not probe:
            waiting.add(pid)  # a session's process before its exec into the probe: looked at again
        probe = probe and session
        if probe:
            bursts += 1
            spread = 400  # ticks (about 2 s): the probe lists /proc only once root has admitted it
            log(f"BURST {bursts} for the probe pid {pid}")
    if spread > 0:  # 300 exits and more, spread over the probe's admission and its pass over /proc
        spread -= 1
        os.write(wake_w, b"x" * 5)
    seen, waiting = pids - waiting, set()
    time.sleep(0.005)
PY
mkdir -p -m 0755 /var/lib/pty-fault
install -o byk -g byk -m 0644 /dev/null /var/lib/pty-fault/churn.log
systemd-run --unit=pty-fault-churn --uid=byk --gid=byk -p WorkingDirectory=/ -p TemporaryFileSystem=/run \
	/usr/bin/python3 -I /usr/local/lib/pty-fault/churn.py /var/lib/pty-fault/churn.log 1000
i=0; until grep -q '^STARTED' /var/lib/pty-fault/churn.log; do i=$((i+1)); [ $i -lt 600 ] || exit 1; sleep 0.05; done
echo "FAULT: byk keeps 1000 idle processes and spawns short-lived ones for the whole run" >&2
