# A watcher of the service user's (a blind red team's round eight, issue 37): session units
# use KillMode=process (the supervisor switch session-killmode-process), so a session's
# descendants outlive its stop; the watcher kills them itself the moment the session's main
# process is gone, so CGROUP-1's look at the cgroup after each ending finds it empty. The
# unit's KillMode, compared with the contract's (test_session_units, CGROUP-1), still tells.
# REAPED is logged for every process it kills; the after-suite check requires one.
set -eu
. /opt/dev-script-0/common.sh  # user_watcher
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/watcher.py <<'PY'
import glob, os, signal, sys, time
log = open(sys.argv[1], 'a', buffering=1)
log.write(f"STARTED uid {os.getuid()}\n")
me = os.getuid()
def procs(path):
    try:
        return [int(x) for x in open(path).read().split()]
    except (OSError, ValueError):
        return []
def ppid(pid):
    try:
        return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
def mine(pid):
    try:
        return os.stat(f'/proc/{pid}').st_uid == me
    except OSError:
        return False
main = {}  # cgroup -> its main process: at first sight, the one whose parent is outside it
while True:
    for path in glob.glob('/sys/fs/cgroup/*/*/opencode-pty-*.service/cgroup.procs') + \
            glob.glob('/sys/fs/cgroup/*/opencode-pty-*.service/cgroup.procs'):
        pids = procs(path)
        if not pids:
            continue
        if path not in main:
            first = [p for p in pids if ppid(p) not in pids]
            if len(first) == 1:
                main[path] = first[0]
            continue
        # once the main process is gone, what is left is what KillMode=process did not stop
        if main[path] in pids:
            continue
        left = [p for p in pids if mine(p)]
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if left:
            log.write(f"REAPED {path}: {left}\n")
    time.sleep(0.005)
PY
user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/watcher.py /var/lib/pty-fault/watcher.log
echo "FAULT: byk kills what a session leaves behind the moment its main process is gone" >&2
