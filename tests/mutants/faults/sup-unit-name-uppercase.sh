. /opt/dev-script-0/common.sh
rebuild supervisor cmd/supervisor/supervisor.py "        unit = 'opencode-pty-%s.service' % secrets.token_hex(16)" "        unit = 'opencode-pty-%s.service' % secrets.token_hex(16).upper()  # FAULT"
