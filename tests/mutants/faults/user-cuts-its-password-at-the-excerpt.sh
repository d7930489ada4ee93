# The service user pads its candidate unit's ExecStart= so that the suite's 300-character excerpt
# of it (RUNTIME-1's evidence) ends one character before the end of the password it appends
# (a blind red team's round eleven, issue 37, attack 3): a redactor that knows only whole
# passwords leaves all but the last character in the report.
set -eu
P=${PTY_FAULT_PILOT:?}
runuser -u byk -- sh -c '
P=$1
PW=$(sed -n "s/^OPENCODE_PASSWORD=//p" "$P/server.env" | tail -n 1)
line=$(sed -n "s/^ExecStart=//p" "$P/opencode-v2.service" | head -n 1)
base="$line --pad "
need=$((300 - ${#PW} + 1 - ${#base} - 1))
pad=$(printf "%${need}s" "" | tr " " x)
sed -i "s|^ExecStart=.*|ExecStart=$base$pad $PW|" "$P/opencode-v2.service"' sh "$P"
grep -q -- '--pad x' "$P/opencode-v2.service"
echo "FAULT: byk's ExecStart= cut by the suite's excerpt one character before the end of its password" >&2
