. /opt/dev-script-0/common.sh
# Keeps the descriptors of every rejected START and, for each one kept, closes
# one of 256 spare /dev/null descriptors opened at start: the supervisor's
# descriptor count never changes, what it holds does.
rebuild supervisor cmd/supervisor/supervisor.py "UNIT_RE = re.compile(" "SPARE = [os.open('/dev/null', os.O_RDONLY | os.O_CLOEXEC) for _ in range(256)]
UNIT_RE = re.compile(" "        try:
            self.reader.close_fds()
            if self.st" "        try:
            for _fd in self.reader.fds:
                if SPARE:
                    os.close(SPARE.pop())
            self.reader.fds = []
            if self.st"
