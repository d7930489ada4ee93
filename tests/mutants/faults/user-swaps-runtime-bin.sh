# The runtime's directories are the service user's (a blind red team's round
# seven): byk exchanges the runtime's bin/ for one of its own holding a wrapper
# of the same name, so that when systemd next execs runtime.binary it runs the
# wrapper, which runs the real (root-owned, hashed, execute-only) binary with a
# preload of the user's in NODE_OPTIONS; then bin/ is put back. The binary's
# own inode, mode and ctime never change, and the process runs the hashed file.
# The preload makes the reference candidate's fault switches read as none
# (its readFileSync of /etc/opencode-reference/candidate-faults fails ENOENT)
# and blanks NODE_OPTIONS in its own environ block (XODE_OPTIONS: the wrapper
# puts it first; a constructor of a 366-byte .so it writes and dlopens writes
# the byte, since a non-dumpable process cannot open its own /proc/self/mem),
# so the live environ shows nothing either. Every process that loaded the
# preload logs its pid to /var/lib/pty-fault/preloaded.
# Set before this script (the catalogue entry's `script`):
#   PTY_FAULT_SWITCH  the candidate switch words planted first (may be empty;
#                     here, not by the catalogue's `candidate`, so that the
#                     candidate's restart for them comes before the watcher: a
#                     running runtime holds its binary open for inotify)
#   PTY_FAULT_MODE    candidate: byk kills the live candidate once; systemd
#                     restarts it through the wrapper; bin/ is put back once
#                     the new candidate listens.
#                     runtime2: a watcher of byk's (inotify on bin/ and on
#                     server.env's directory) exchanges bin/ for the wrapper's
#                     the moment server.env is read while the runtime binary is
#                     held open (RUNTIME-2 hashing it, then copying server.env),
#                     and the wrapper exchanges it back before it runs the binary.
set -eu
. /opt/dev-script-0/common.sh  # RUNTIME, wait_port
BIN=$(dirname "$RUNTIME")
NAME=$(basename "$RUNTIME")
PILOT=/home/byk/.local/share/opencode-v2-pilot
X=/home/byk/.cache/pty-fault-x  # the user's own files (the units have PrivateTmp=)
LOG=/var/lib/pty-fault/preloaded
if [ -n "${PTY_FAULT_SWITCH:-}" ]; then  # the defect, through the reference deployment's switches
	mkdir -p /etc/opencode-reference
	printf '%s\n' "$PTY_FAULT_SWITCH" >/etc/opencode-reference/candidate-faults
	systemctl restart opencode-v2-preview.service
	wait_port 14102
	echo "FAULT: the candidate runs with the switch $PTY_FAULT_SWITCH" >&2
fi
mkdir -p -m 0755 /var/lib/pty-fault
install -o byk -g byk -m 0644 /dev/null "$LOG"
# --- the service user's files, as byk
runuser -u byk -- mkdir -p "$X"
runuser -u byk -- sh -c 'cat >"$1"' sh "$X/p.js" <<JS
'use strict';
const fs = require('node:fs');
const read = fs.readFileSync;
fs.readFileSync = function (p, ...rest) {
  if (String(p) === '/etc/opencode-reference/candidate-faults') {
    const e = new Error('ENOENT: no such file or directory'); e.code = 'ENOENT'; throw e;
  }
  return read.call(this, p, ...rest);
};
try {  // NODE_OPTIONS is the block's first entry: its first byte becomes X
  const st = read('/proc/self/stat', 'latin1');
  const envStart = BigInt(st.slice(st.lastIndexOf(')') + 2).split(' ')[47]);
  const img = Buffer.from('f0VMRgIBAQAAAAAAAAAAAAMAPgABAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAAAAEAAOAACAEAAAAAAAAEAAAAHAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAbgEAAAAAAABuAQAAAAAAAAAQAAAAAAAAAgAAAAYAAACwAAAAAAAAALAAAAAAAAAAsAAAAAAAAACAAAAAAAAAAIAAAAAAAAAACAAAAAAAAAAMAAAAAAAAAGABAAAAAAAABAAAAAAAAAAwAQAAAAAAAAUAAAAAAAAAWAEAAAAAAAAGAAAAAAAAAEABAAAAAAAACgAAAAAAAAABAAAAAAAAAAsAAAAAAAAAGAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEAAAABAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEi4ERERERERERHGAFjD', 'base64');
  img.writeBigUInt64LE(envStart, 354);  // movabs rax, <env_start>; mov byte [rax], 'X'; ret
  const so = '$X/w-' + process.pid + '.so';
  fs.writeFileSync(so, img, { mode: 0o700 });
  try { process.dlopen({ exports: {} }, so); } catch (e) { /* no symbols: the constructor ran */ }
  fs.unlinkSync(so);
} catch (e) { process.stderr.write('p.js: ' + e.message + '\n'); }
fs.appendFileSync('$LOG', 'PRELOADED ' + process.pid + '\n');
JS
runuser -u byk -- sh -c 'cat >"$1"' sh "$X/xchg.py" <<'PY'
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
def xchg(a, b):  # renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
    if libc.syscall(316, -100, a.encode(), -100, b.encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
if __name__ == "__main__":
    xchg(sys.argv[1], sys.argv[2])
PY
runuser -u byk -- mkdir -p "$BIN.w"
ENVS='"OPENCODE_PASSWORD=$OPENCODE_PASSWORD" "PATH=$PATH" "HOME=$HOME" "LANG=${LANG:-C.UTF-8}" "USER=$USER" "LOGNAME=$LOGNAME" "SHELL=$SHELL" "INVOCATION_ID=$INVOCATION_ID" "JOURNAL_STREAM=$JOURNAL_STREAM"'
if [ "${PTY_FAULT_MODE:-candidate}" = runtime2 ]; then  # the wrapper puts bin/ back, then runs the binary there
	FIRST="/usr/bin/python3 -I $X/xchg.py $BIN $BIN.w"
	REAL=$BIN/$NAME
else  # bin/ is put back once the candidate listens: until then the real binary is in bin.w/
	FIRST=":"
	REAL=$BIN.w/$NAME
fi
runuser -u byk -- sh -c 'cat >"$1" && chmod 0755 "$1"' sh "$BIN.w/$NAME" <<SH
#!/bin/sh
$FIRST
exec /usr/bin/env -i NODE_OPTIONS=--require=$X/p.js $ENVS $REAL "\$@"
SH
preloaded() { # PID: until the preload logged PID, 10 s at most
	i=0; until grep -qx "PRELOADED $1" "$LOG"; do i=$((i+1)); [ $i -lt 200 ] || return 1; sleep 0.05; done
}
if [ "${PTY_FAULT_MODE:-candidate}" = candidate ]; then
	old=$(systemctl show -P MainPID opencode-v2-preview.service)
	[ "$old" -gt 0 ]
	# the wrapper's bin/ in place; the real one beside it, where the wrapper runs it from
	runuser -u byk -- /usr/bin/python3 -I "$X/xchg.py" "$BIN" "$BIN.w"
	runuser -u byk -- kill -KILL "$old"  # its own process: systemd restarts it (Restart=on-failure)
	i=0; new=$old
	until [ "$new" != "$old" ] && [ "$new" -gt 0 ]; do
		i=$((i+1)); [ $i -lt 200 ] || { echo "FAULT: the candidate did not restart" >&2; exit 1; }
		sleep 0.05; new=$(systemctl show -P MainPID opencode-v2-preview.service)
	done
	wait_port 14102
	preloaded "$new" || { echo "FAULT: the restarted candidate $new did not load the preload" >&2; exit 1; }
	runuser -u byk -- /usr/bin/python3 -I "$X/xchg.py" "$BIN" "$BIN.w"  # put back
	runuser -u byk -- rm -rf "$BIN.w"
	if tr '\0' '\n' </proc/"$new"/environ | grep -q '^NODE_OPTIONS='; then
		echo "FAULT: NODE_OPTIONS still shows in the candidate's environ" >&2; exit 1
	fi
	[ "$(stat -c %u "$RUNTIME")" = 0 ] || { echo "FAULT: bin/ not put back" >&2; exit 1; }
	echo "FAULT: candidate $new runs the hashed runtime with byk's preload; bin/ is back, environ clean" >&2
	exit 0
fi
# runtime2: the watcher, for the whole run
runuser -u byk -- sh -c 'cat >"$1"' sh "$X/watch.py" <<PY
import ctypes, os, select, struct, sys, time
sys.path.insert(0, "$X")
from xchg import xchg, libc
libc.prctl(4, 0, 0, 0, 0)  # not dumpable: no /proc/<pid>/root for a session to read (UNIT-7)
LOG = "/var/lib/pty-fault/watcher.log"
def log(t):
    with open(LOG, "a") as f:
        f.write(t + "\n")
fd = libc.inotify_init1(os.O_CLOEXEC)
wb = libc.inotify_add_watch(fd, b"$BIN", 0x20 | 0x10 | 0x08)
wp = libc.inotify_add_watch(fd, b"$PILOT", 0x20 | 0x10)
held, swapped = 0, False
log("STARTED")
while True:
    if not select.select([fd], [], [], 0.5)[0]:
        continue
    buf, i = os.read(fd, 65536), 0
    while i < len(buf):
        wd, mask, cookie, ln = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + ln].rstrip(b"\0")
        i += 16 + ln
        if wd == wb and name == b"$NAME":
            held += 1 if mask & 0x20 else -1 if mask & 0x18 else 0
            held = max(held, 0)
        elif wd == wp and name == b"server.env" and mask & 0x10 and held > 0 and not swapped:
            try:
                xchg("$BIN", "$BIN.w")
                swapped = True
                log("EXCHANGED")
            except OSError as e:
                log(f"MISSED {e}")
    if swapped and held == 0:
        swapped = False
PY
install -o byk -g byk -m 0644 /dev/null /var/lib/pty-fault/watcher.log
systemd-run --unit=pty-fault-watcher --uid=byk --gid=byk -p WorkingDirectory=/ /usr/bin/python3 -I "$X/watch.py"
i=0; until grep -q '^STARTED' /var/lib/pty-fault/watcher.log; do i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done
echo "FAULT: byk exchanges $BIN for a wrapper's when RUNTIME-2 reads server.env with the runtime held open" >&2
