. /opt/dev-script-0/common.sh
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "        try:
            self.reader.close_fds()
            if self.st" "        try:
            if self.st"
else
rebuild supervisor cmd/supervisor/conn.go '	c.closeFds() // in finish: nothing received outlives its connection
' ''
fi
