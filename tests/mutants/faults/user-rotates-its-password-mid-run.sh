# The service user appends a note to its candidate unit's ExecStart= before the run (so the
# source manifest changes: SCOPE-1), and 25 s into the run, after the suite has read server.env's
# password at its session's start, rotates it: server.env and the note both get a new password
# (a blind red team's round nine, issue 37, attack 10). RUNTIME-1 records ExecStart= as evidence
# after the rotation: the new password must be redacted as the first was. Nothing here echoes
# the new password (the journal and the after-suite check are part of what the run leaves).
set -eu
PILOT=/home/byk/.local/share/opencode-v2-pilot
runuser -u byk -- sed -i 's|^\(ExecStart=.*\)$|\1 --note rotated-later|' "$PILOT/opencode-v2.service"
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/rotate.sh <<'SH'
set -eu
PILOT=/home/byk/.local/share/opencode-v2-pilot
new=$(cat /usr/local/lib/pty-fault/rotated)
sed -i "s|^OPENCODE_PASSWORD=.*|OPENCODE_PASSWORD=$new|" "$PILOT/server.env"
sed -i "s|--note rotated-later|--note $new|" "$PILOT/opencode-v2.service"
touch /home/byk/.pty-fault-rotated
SH
printf '%s' "$PTY_FAULT_SECRET" > /usr/local/lib/pty-fault/rotated
chmod 0644 /usr/local/lib/pty-fault/rotated
systemd-run --quiet --unit=pty-fault-rotate --uid=byk --gid=byk --on-active=25 /bin/sh /usr/local/lib/pty-fault/rotate.sh
echo "FAULT: byk rotates its password 25 s into the run, into server.env and its unit's ExecStart=" >&2
