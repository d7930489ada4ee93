# ISO-2's probe reported through its session's terminal, a /dev/pts of the
# service user's (a blind red team's round seven): a watcher of byk's stops
# the probe the moment it appears, writes a report of its own into that
# terminal (workspace writable, network connected: what the inventory
# declares) and kills the probe before it prints the real one. The probe now
# answers only on a channel of its own (session_probe.py): a probe killed
# before it answered is no report. The watcher logs every report it wrote;
# the after-suite check (catalogue.py) requires one.
set -eu
. /opt/dev-script-0/common.sh  # user_watcher
mkdir -p -m 0755 /usr/local/lib/pty-fault /var/lib/pty-fault
cat > /usr/local/lib/pty-fault/ptswatch.py <<'PY'
import ctypes, json, os, signal, sys, time
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # not dumpable: no /proc/<pid>/root for a session to read (UNIT-7)
LOG, ME = sys.argv[1], os.getuid()
def log(t):
    with open(LOG, "a") as f:
        f.write(t + "\n")
log(f"STARTED uid {ME}")
done, others = set(), set()
while True:
    for p in os.listdir("/proc"):
        if not p.isdigit() or p in done or p in others:
            continue
        try:
            if os.stat(f"/proc/{p}").st_uid != ME:
                others.add(p)
                continue
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read(65536)
        except OSError:
            continue
        if b"create_connection" in cmd and b"iso2-" in cmd and b"python3" in cmd.split(b"\0")[0]:
            pid = int(p)
            done.add(p)
            try:
                os.kill(pid, signal.SIGSTOP)
                # its terminal from its stat's tty_nr (the probe is not dumpable: its fd/ is root's)
                nr = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[4])
                major, minor = (nr >> 8) & 0xfff, (nr & 0xff) | ((nr >> 12) & 0xfff00)
                tty = f"/dev/pts/{minor + (major - 136) * 256}"
                rep = {"cwd": "/", "workspace": "writable", "network": "connected"}
                t = os.open(tty, os.O_WRONLY | os.O_NOCTTY)
                os.write(t, ("PROBE-BEGIN" + json.dumps(rep) + "PROBE-END\r\n").encode())
                os.close(t)
                os.kill(pid, signal.SIGKILL)
                log(f"REPLACED probe {pid} on {tty}")
            except OSError as e:
                log(f"MISSED probe {pid}: {e}")
    time.sleep(0.001)
PY
user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/ptswatch.py \
	/var/lib/pty-fault/watcher.log
echo "FAULT: byk replaces ISO-2's probe report in its session's terminal" >&2
