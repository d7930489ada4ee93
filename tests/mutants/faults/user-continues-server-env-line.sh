# server.env as systemd reads it is not server.env line by line (a blind red
# team's round seven): byk rewrites its own server.env (0600, by rename) as
# `OPENCODE_PASSWORD=\` and, on the next line, the rest of a password of its
# choosing followed by `=`; systemd joins the continued line, so the restarted
# candidate's password is that text, which a line-by-line reading takes for a
# variable's name (and CUT-3 would show it as one) while it redacts `\`.
# The catalogue entry's `secret` is that text: it must appear nowhere in what
# the run wrote.
set -eu
. /opt/dev-script-0/common.sh  # wait_port
PILOT=/home/byk/.local/share/opencode-v2-pilot
TAIL=${PTY_FAULT_TAIL:?}
runuser -u byk -- sh -c 'umask 077; printf "OPENCODE_PASSWORD=\\\\\n%s=\n" "$1" >"$2.new" && mv "$2.new" "$2"' \
	sh "$TAIL" "$PILOT/server.env"
old=$(systemctl show -P MainPID opencode-v2-preview.service)
runuser -u byk -- kill -KILL "$old"
i=0; new=$old
until [ "$new" != "$old" ] && [ "$new" -gt 0 ]; do
	i=$((i+1)); [ $i -lt 200 ] || { echo "FAULT: the candidate did not restart" >&2; exit 1; }
	sleep 0.05; new=$(systemctl show -P MainPID opencode-v2-preview.service)
done
wait_port 14102
# the candidate's password is now the joined text (systemd's reading), never shown here
tr '\0' '\n' </proc/"$new"/environ | grep -qx "OPENCODE_PASSWORD=$TAIL=" || {
	echo "FAULT: systemd did not join the continued line" >&2; exit 1; }
echo "FAULT: server.env continues OPENCODE_PASSWORD= onto its next line; the candidate restarted with it" >&2
