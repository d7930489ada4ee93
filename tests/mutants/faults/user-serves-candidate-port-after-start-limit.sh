# Issue 37 item 3 (a): the service user alone takes the candidate's port. It
# kills the preview's MainPID (its own process: same uid) until systemd's start
# limit stops restarting opencode-v2-preview.service (failed: "start request repeated too quickly"),
# then serves 14102 with its own run of the pinned runtime: the same executable
# (root:root 0711, execute-only), the same uid, server.env's environment, and a
# preload of its own (NODE_OPTIONS=--require). Executable, uid, gid and answers
# are the candidate's; only the unit is not: the listener is in the user's
# cgroup (pty-fault-squat.service here, a login session on a real host), and
# the candidate unit is failed. Run as root only to start byk's processes.
set -eu
. /opt/dev-script-0/common.sh
U=opencode-v2-preview.service
i=0
while [ "$(systemctl show -p ActiveState --value "$U")" != failed ]; do
	i=$((i+1))
	[ $i -le 150 ] || { echo "FAULT: $U never hit its start limit" >&2; exit 1; }
	pid=$(systemctl show -p MainPID --value "$U")
	if [ "$pid" -gt 0 ]; then runuser -u byk -- /bin/kill -KILL "$pid" 2>/dev/null || true; fi
	sleep 0.2
done
# systemd 252 keeps the last run's Result (signal) and says "Start request repeated too
# quickly"; the unit stays failed and nothing restarts it
sleep 1
[ "$(systemctl show -p ActiveState --value "$U")" = failed ] || { echo "FAULT: $U did not stay failed" >&2; exit 1; }
echo "FAULT: byk killed $U until its start limit ($i rounds): failed, Result $(systemctl show -p Result --value "$U")" >&2
install -d -o byk -g byk -m 0700 /home/byk/.pty-fault
cat >/home/byk/.pty-fault/preload.js <<'JS'
// the service user's own code, preloaded into its own run of the runtime
require('fs').writeFileSync('/home/byk/.pty-fault/preloaded', `pid ${process.pid}\n`);
JS
chown byk:byk /home/byk/.pty-fault/preload.js
# byk's shell: server.env's variables (the user owns the file), then exec the runtime itself
systemd-run --quiet --unit=pty-fault-squat --uid=byk --gid=byk -p WorkingDirectory=/home/byk \
	/bin/sh -c 'set -a; . /home/byk/.local/share/opencode-v2-pilot/server.env; set +a
NODE_OPTIONS=--require=/home/byk/.pty-fault/preload.js exec "$0" --port 14102' "$RUNTIME"
wait_port 14102
grep -q '^pid ' /home/byk/.pty-fault/preloaded || { echo "FAULT: the preload did not run" >&2; exit 1; }
echo "FAULT: byk's own run of $RUNTIME (preloaded) listens on 14102: $(cat /home/byk/.pty-fault/preloaded)" >&2
