# The service user, for the whole run, sends SIGSTOP to every process of its
# own the moment it appears (issue 37 item 6): the suite's disposable peer
# agents, its probes, the plugin harness, the candidate runtime, the session
# units' commands. Processes that were there before the fault are left alone
# (the candidate preview among them). Each wait of the suite has its own
# bound, but nothing bounded the whole run: it was still going 600 s later.
# The stopper is not dumpable (a dumpable process of the service user outside
# the sessions is UNIT-7's own finding). Every stop is logged; the after-suite
# check reads the log.
set -eu
. /opt/dev-script-0/common.sh  # user_watcher
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/stopper.py <<'PY'
import ctypes, os, signal, sys, time

ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
LOG = sys.argv[1]
me, mine = os.getuid(), os.getpid()


def pids():
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == me:
                    out.add(int(name))
            except OSError:
                pass
    return out


before = pids()
with open(LOG, "a") as f:
    f.write(f"STARTED uid {me}, {len(before)} processes of its own left alone\n")
stopped = 0
while True:
    for pid in sorted(pids() - before - {mine}):
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            continue
        before.add(pid)
        stopped += 1
        if stopped <= 200:
            with open(LOG, "a") as f:
                f.write(f"STOPPED {pid}\n")
    time.sleep(0.005)
PY
user_watcher pty-fault-stopper /var/lib/pty-fault/stopper.log /usr/local/lib/pty-fault/stopper.py \
	/var/lib/pty-fault/stopper.log
echo "FAULT: byk stops every new process of its own for the whole run" >&2
