. /opt/dev-script-0/common.sh
# Keeps the descriptors of every rejected START and, for each one kept, closes
# one of 256 spare /dev/null descriptors opened at start: the supervisor's
# descriptor count never changes, what it holds does.
# The fault in the deployed implementation: Go (the default) or Python (--supervisor python).
if [ "$(impl)" = python ]; then
rebuild supervisor cmd/supervisor/supervisor.py "UNIT_RE = re.compile(" "SPARE = [os.open('/dev/null', os.O_RDONLY | os.O_CLOEXEC) for _ in range(256)]
UNIT_RE = re.compile(" "        try:
            self.reader.close_fds()
            if self.st" "        try:
            for _fd in self.reader.fds:
                if SPARE:
                    os.close(SPARE.pop())
            self.reader.fds = []
            if self.st"
else
rebuild supervisor cmd/supervisor/conn.go 'type conn struct {' 'var spare = func() (fds []int) { // FAULT: 256 spare descriptors
	for i := 0; i < 256; i++ {
		fd, _ := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		fds = append(fds, fd)
	}
	return
}()

type conn struct {' '	c.closeFds() // in finish: nothing received outlives its connection
' '	for range c.heldFds { // FAULT: keep them, close as many spares
		if len(spare) > 0 {
			unix.Close(spare[len(spare)-1])
			spare = spare[:len(spare)-1]
		}
	}
	c.heldFds = nil
'
fi
