# The service user, for the whole run, swaps every directory of its own named
# pty-acceptance-* that it can find for a FIFO: in /tmp, and the working
# directory of its own processes (/proc/<pid>/cwd: how it learns a session's
# workspace). A cleanup that reopens such a directory by name blocks on the
# FIFO (issue 21 item 11). It also puts a link to a root-only secret into
# each workspace it finds (not into the PLUGIN-1 harness's, whose cleanup
# check would rightly fail on it). Every success and refusal is logged; the
# after-suite check (catalogue.py) reads the log.
set -eu
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/swapper.py <<'PY'
import ctypes, os, stat, sys, time

# Not dumpable (prctl PR_SET_DUMPABLE 0): a dumpable process of the service user
# outside the sessions is UNIT-7's own finding (fault
# service-user-process-outside-sessions); this attack is SUITE-4's and SUITE-5's.
ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
LOG, SECRET = sys.argv[1], sys.argv[2]
me = os.getuid()
said = set()


def log(line):
    if line not in said:
        said.add(line)
        with open(LOG, "a") as f:
            f.write(line + "\n")


def mine(path):
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == me


def candidates():
    found = set()
    try:
        found |= {os.path.join("/tmp", n) for n in os.listdir("/tmp") if n.startswith("pty-acceptance-")}
    except OSError:
        pass
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if os.path.basename(cwd).startswith("pty-acceptance-"):
                found.add(cwd)
    return {p for p in found if mine(p) and ".swapped-" not in p}  # not what it moved away itself


n = 0
log(f"STARTED uid {me}")
while True:
    for path in sorted(candidates()):
        n += 1
        link = os.path.join(path, ".pty-fault-secret")
        if not os.path.basename(path).startswith("pty-acceptance-plugin-") and not os.path.lexists(link):
            try:
                os.symlink(SECRET, link)
                log(f"PLANTED {link}")
            except OSError as e:
                log(f"NOT PLANTED {link}: {e.strerror}")
        try:
            os.rename(path, f"{path}.swapped-{n}")
        except OSError as e:
            log(f"REFUSED {path}: {e.strerror}")
            continue
        os.mkfifo(path)
        log(f"SWAPPED {path} for a FIFO")
    time.sleep(0.02)
PY
mkdir -p -m 0755 /var/lib/pty-fault
install -o byk -g byk -m 0644 /dev/null /var/lib/pty-fault/swapper.log
systemd-run --unit=pty-fault-swapper --uid=byk --gid=byk -p WorkingDirectory=/ \
	/usr/bin/python3 -I /usr/local/lib/pty-fault/swapper.py /var/lib/pty-fault/swapper.log /root/pty-acc-vault/secret
i=0; until grep -q '^STARTED' /var/lib/pty-fault/swapper.log; do i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done
echo "FAULT: byk swaps the suite's temporary directories for FIFOs for the whole run" >&2
