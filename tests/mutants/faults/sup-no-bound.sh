. /opt/dev-script-0/common.sh
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "if n > hi or n < lo:" "if n < lo:"
else
rebuild supervisor cmd/supervisor/wire.go 'if n > b.hi || n < b.lo {' 'if n < b.lo {'
fi
