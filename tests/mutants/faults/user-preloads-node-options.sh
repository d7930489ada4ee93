# The service user's own server.env runs its code inside the runtime (issue 37
# item 2): byk writes a preload of its own and appends
# NODE_OPTIONS=--require=<it> to server.env, which stays a regular 0600 file of
# its own with its password (CUT-3's checks before the fix). The Node SEA
# honours NODE_OPTIONS, so every runtime started with server.env (RUNTIME-2's
# disposable runtime, whose only environment it is; the candidate unit, whose
# EnvironmentFile= it is) loads the preload first. The preload makes the
# reference candidate's fault switches read as none (its readFileSync of
# /etc/opencode-reference/candidate-faults fails ENOENT), so a defect planted
# through the switches is hidden from whoever asks that runtime.
# Set before this script (the catalogue entry's `script`):
#   PTY_FAULT_SWITCH   the candidate switch words planted first (may be empty)
#   PTY_FAULT_RESTART  1: byk then kills the running candidate once; systemd
#                      restarts it (Restart=on-failure) with the preload
#   PTY_FAULT_RESTORE  1 (with PTY_FAULT_RESTART=1): once the candidate runs with
#                      the preload, byk puts server.env back as it was, and the
#                      preload has renamed NODE_OPTIONS in its own environ block
#                      (XODE_OPTIONS, written through /proc/self/mem, which a
#                      process may write when it is dumpable: the red team's
#                      runtime was made readable too, 0755, as here): CUT-3 and
#                      the candidate's /proc/<pid>/environ then show nothing (a
#                      red team's round five; only when server.env changed says it)
# Every process that loaded the preload logs its pid to
# /var/lib/pty-fault/preloaded; the script proves the preload works in the SEA
# (a probe runtime as byk, or the restarted candidate) or fails: a fault that
# did not take hold is no kill.
set -eu
. /opt/dev-script-0/common.sh  # RUNTIME, wait_port
PILOT=/home/byk/.local/share/opencode-v2-pilot
LOG=/var/lib/pty-fault/preloaded
PRELOAD=$PILOT/.cache-p.js  # the user's own file, beside server.env (the unit has PrivateTmp=)
if [ -n "${PTY_FAULT_SWITCH:-}" ]; then  # the defect, through the reference deployment's switches
	mkdir -p /etc/opencode-reference
	printf '%s\n' "$PTY_FAULT_SWITCH" >/etc/opencode-reference/candidate-faults
	systemctl restart opencode-v2-preview.service
	wait_port 14102
	echo "FAULT: the candidate runs with the switch $PTY_FAULT_SWITCH" >&2
fi
if [ "${PTY_FAULT_RESTORE:-0}" = 1 ]; then  # the second defect: a dumpable candidate after its restart
	chmod 0755 "$RUNTIME"
	echo "FAULT: the runtime binary is readable by the service user" >&2
fi
mkdir -p -m 0755 /var/lib/pty-fault
install -o byk -g byk -m 0644 /dev/null "$LOG"
# --- the service user's action, as byk
runuser -u byk -- sh -c 'cat >"$1"' sh "$PRELOAD" <<JS
'use strict';
const fs = require('node:fs');
const read = fs.readFileSync;
fs.readFileSync = function (p, ...rest) {
  if (String(p) === '/etc/opencode-reference/candidate-faults') {
    const e = new Error('ENOENT: no such file or directory'); e.code = 'ENOENT'; throw e;
  }
  return read.call(this, p, ...rest);
};
if ('${PTY_FAULT_RESTORE:-0}' === '1') {  // hide NODE_OPTIONS in its own environ block
  const st = fs.readFileSync('/proc/self/stat', 'latin1');
  const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
  const start = Number(f[50 - 3]), end = Number(f[51 - 3]);
  const mem = fs.openSync('/proc/self/mem', 'r+');
  const block = Buffer.alloc(end - start);
  fs.readSync(mem, block, 0, block.length, start);
  for (let i = block.indexOf('NODE_OPTIONS='); i >= 0; i = block.indexOf('NODE_OPTIONS=', i + 1)) {
    if (i === 0 || block[i - 1] === 0) fs.writeSync(mem, Buffer.from('X'), 0, 1, start + i);
  }
  fs.closeSync(mem);
}
fs.appendFileSync('$LOG', 'PRELOADED ' + process.pid + '\n');
JS
runuser -u byk -- sh -c 'printf "NODE_OPTIONS=--require=%s\n" "$1" >>"$2"' sh "$PRELOAD" "$PILOT/server.env"
stat -c 'FAULT: server.env %a %U:%G, %s bytes' "$PILOT/server.env" >&2
preloaded() { # PID: until the preload logged PID, 10 s at most
	i=0; until grep -qx "PRELOADED $1" "$LOG"; do i=$((i+1)); [ $i -lt 200 ] || return 1; sleep 0.05; done
}
if [ "${PTY_FAULT_RESTART:-0}" = 1 ]; then
	old=$(systemctl show -P MainPID opencode-v2-preview.service)
	[ "$old" -gt 0 ]
	runuser -u byk -- kill -KILL "$old"  # its own process: systemd restarts it with server.env
	i=0; new=$old
	until [ "$new" != "$old" ] && [ "$new" -gt 0 ]; do
		i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05
		new=$(systemctl show -P MainPID opencode-v2-preview.service)
	done
	wait_port 14102
	preloaded "$new"
	echo "FAULT: byk killed the candidate ($old); systemd restarted it ($new) with its preload" >&2
	if [ "${PTY_FAULT_RESTORE:-0}" = 1 ]; then  # server.env as it was, a new file of byk's (0600)
		runuser -u byk -- sh -c 'umask 077; grep -v "^NODE_OPTIONS=" "$1" >"$1.new" && mv "$1.new" "$1"' sh "$PILOT/server.env"
		! grep -q '^NODE_OPTIONS=' "$PILOT/server.env"
		! tr '\0' '\n' <"/proc/$new/environ" | grep -q '^NODE_OPTIONS='
		tr '\0' '\n' <"/proc/$new/environ" | grep -q '^XODE_OPTIONS='
		stat -c 'FAULT: server.env put back: %a %U:%G, %s bytes' "$PILOT/server.env" >&2
		echo "FAULT: the candidate ($new) shows no NODE_OPTIONS in its environ" >&2
	else
		tr '\0' '\n' <"/proc/$new/environ" | grep -q '^NODE_OPTIONS='
	fi
else  # a probe runtime as byk with server.env's NODE_OPTIONS: the SEA loads the preload
	runuser -u byk -- env -i PATH=/usr/bin:/bin "NODE_OPTIONS=--require=$PRELOAD" \
		timeout 20 "$RUNTIME" --hostname 127.0.0.1 --port 0 >/dev/null 2>&1 &
	probe=$!
	i=0; until grep -q '^PRELOADED ' "$LOG"; do i=$((i+1)); [ $i -lt 200 ] || { kill "$probe" || true; exit 1; }; sleep 0.05; done
	kill "$probe" 2>/dev/null || true
	wait "$probe" 2>/dev/null || true
	echo "FAULT: a runtime started with server.env loads byk's preload ($(head -n1 "$LOG"))" >&2
fi
