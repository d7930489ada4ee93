. /opt/dev-script-0/common.sh
rebuild supervisor cmd/supervisor/supervisor.py "        try:
            self.reader.close_fds()
            if self.st" "        try:
            if self.st"
