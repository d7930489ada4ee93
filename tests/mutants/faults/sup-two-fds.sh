. /opt/dev-script-0/common.sh
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "if len(fds) != 1:" "if len(fds) not in (1, 2):"
else
rebuild supervisor cmd/supervisor/conn.go 'if len(f.fds) != 1 {' 'if len(f.fds) != 1 && len(f.fds) != 2 {'
fi
