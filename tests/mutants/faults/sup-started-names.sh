. /opt/dev-script-0/common.sh
# STARTED names the unit in /etc/opencode-reference/started-name (a lying supervisor), while the
# session it really started runs on under its own name
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "        self.send_now(frame(T_STARTED, unit.encode()))" "        self.send_now(frame(T_STARTED, open('/etc/opencode-reference/started-name').read().strip().encode()))  # FAULT"
else
rebuild supervisor cmd/supervisor/conn.go '	return c.sendNow(encode(tStarted, []byte(unit)), writeTimeout)' '	lie, _ := os.ReadFile("/etc/opencode-reference/started-name") // FAULT
	return c.sendNow(encode(tStarted, []byte(strings.TrimSpace(string(lie)))), writeTimeout)'
fi
