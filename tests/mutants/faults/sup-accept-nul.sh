. /opt/dev-script-0/common.sh
rebuild supervisor cmd/supervisor/supervisor.py "def valid_text(b):
" "def valid_text(b):
    return True
"
