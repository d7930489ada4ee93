. /opt/dev-script-0/common.sh
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "def valid_text(b):
" "def valid_text(b):
    return True
"
else
rebuild supervisor cmd/supervisor/wire.go 'func validText(b []byte) bool {
' 'func validText(b []byte) bool {
	return true // FAULT
'
fi
