. /opt/dev-script-0/common.sh
# STARTED names the unit in /etc/opencode-reference/started-name (a lying supervisor), while the
# session it really started runs on under its own name
rebuild supervisor cmd/supervisor/supervisor.py "        self.send_now(frame(T_STARTED, unit.encode()))" "        self.send_now(frame(T_STARTED, open('/etc/opencode-reference/started-name').read().strip().encode()))  # FAULT"
