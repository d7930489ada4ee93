# A watcher of the service user's, for the whole run: every process of its own
# whose command line is PTY_FAULT_KILL (words; by default /bin/sleep 3600, the
# extra child the reference candidate's switches connection-to-extra-child and
# directory-to-extra-child spawn, holding the session's connection or
# directory) is killed the moment it appears, long before RUNTIME-2's live
# sample reads /proc: only the trace of the runtime's tree can still see that
# it held them. With /bin/sleep 600, the process the plugin harness's
# leave-process switch leaves behind: only the trace of the run can see it. It polls /proc every millisecond
# (the command line of each process of its own user, every time); every kill
# is logged, and the after-suite check (catalogue.py) requires one.
set -eu
. /opt/dev-script-0/common.sh  # wait_port, for the candidate switch that follows (catalogue.apply_script)
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/watcher.py <<'PY'
import os, signal, sys, time

LOG, ME = sys.argv[1], os.getuid()
WANT = b"".join(w.encode() + b"\0" for w in sys.argv[2:])


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


log(f"STARTED uid {ME}")
others = set()  # pids of other users: never read again
while True:
    for n in os.listdir("/proc"):
        if not n.isdigit() or n in others:
            continue
        try:
            if os.stat(f"/proc/{n}").st_uid != ME:
                others.add(n)
                continue
            with open(f"/proc/{n}/cmdline", "rb") as f:  # its own every time: a fork execs later
                argv = f.read(4096)
        except OSError:
            continue
        if argv == WANT:
            try:
                os.kill(int(n), signal.SIGKILL)
                log(f"KILLED pid {n} {' '.join(sys.argv[2:])}")
            except OSError as e:
                log(f"MISSED pid {n}: {e.strerror}")
    time.sleep(0.001)
PY
user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/watcher.py /var/lib/pty-fault/watcher.log ${PTY_FAULT_KILL:-/bin/sleep 3600}
echo "FAULT: byk kills every ${PTY_FAULT_KILL:-/bin/sleep 3600} of its own the moment it appears" >&2
