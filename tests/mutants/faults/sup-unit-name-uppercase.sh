. /opt/dev-script-0/common.sh
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "        unit = 'opencode-pty-%s.service' % secrets.token_hex(16)" "        unit = 'opencode-pty-%s.service' % secrets.token_hex(16).upper()  # FAULT"
else
rebuild supervisor cmd/supervisor/conn.go '	unit := "opencode-pty-" + hex.EncodeToString(rnd) + ".service"' '	unit := "opencode-pty-" + strings.ToUpper(hex.EncodeToString(rnd)) + ".service" // FAULT'
fi
