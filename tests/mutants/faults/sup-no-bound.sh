. /opt/dev-script-0/common.sh
rebuild supervisor cmd/supervisor/supervisor.py "if n > hi or n < lo:" "if n < lo:"
