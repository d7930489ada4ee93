. /opt/dev-script-0/common.sh
rebuild supervisor cmd/supervisor/supervisor.py "if len(fds) != 1:" "if len(fds) not in (1, 2):"
