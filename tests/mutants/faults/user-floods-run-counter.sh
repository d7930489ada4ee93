# The service user attacks the smoke harness's run counter where it now is
# (after PLUGIN-1 (c): a count kept in its home, set to 100, made no run the
# first). Before the suite it asks root's counter
# (/run/opencode-reference/fault-count.sock) for a number 100 times, puts 100
# in the old counter file of its home and tries to write beside the counter's
# socket; for the whole run a loop of its own (a unit as byk) keeps asking,
# so that, were its requests counted, no harness run would be the first.
# Every distinct answer is logged (/var/lib/pty-fault/flood.log). With the
# plugin's first run made to fail (fail-run:1 in the catalogue entry),
# PLUGIN-1 must still see it.
set -eu
mkdir -p -m 0755 /usr/local/lib/pty-fault /var/lib/pty-fault
cat > /usr/local/lib/pty-fault/flood.py <<'PY'
import os, socket, sys, time

LOG, SOCK = sys.argv[1], "/run/opencode-reference/fault-count.sock"
said = set()


def log(line):
    key = line.split(" ", 1)[0]
    if key not in said:  # each kind of answer once, with its first example
        said.add(key)
        with open(LOG, "a") as f:
            f.write(line + "\n")


def ask():
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(2)
        c.connect(SOCK)
        data = c.recv(300)
        c.close()
        return data.decode(errors="replace").strip() or "EMPTY"
    except OSError as e:
        return f"ERROR {e}"


for _ in range(100):
    log(ask())
try:
    open("/run/opencode-reference/fault-runs", "w").close()
    log("WROTE beside the counter's socket")
except OSError as e:
    log(f"NOT-WRITTEN beside the counter's socket: {e.strerror}")
with open(os.path.expanduser("~/.pty-smoke-fault-runs"), "w") as f:
    f.write("100")
log("BUMPED: 100 requests, ~/.pty-smoke-fault-runs = 100")
while True:
    log(ask())
    time.sleep(0.05)
PY
install -o byk -g byk -m 0644 /dev/null /var/lib/pty-fault/flood.log
systemd-run --unit=pty-fault-counter-flood --uid=byk --gid=byk -p WorkingDirectory=/var/lib/pty-fault \
	-p Environment=HOME=/home/byk /usr/bin/python3 -I /usr/local/lib/pty-fault/flood.py /var/lib/pty-fault/flood.log
i=0; until grep -q '^BUMPED' /var/lib/pty-fault/flood.log; do i=$((i+1)); [ $i -lt 400 ] || exit 1; sleep 0.05; done
echo "FAULT: byk asks the smoke harness's run counter for numbers for the whole run" >&2
