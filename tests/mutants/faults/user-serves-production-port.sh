# Issue 37 item 3 (b): production stopped (root's part, as an administrator
# might before a cutover), a server of the service user's answers 200 with a
# non-empty body on production's port 4096, on every path: something listens
# and answers, but it is not opencode.service's.
set -eu
. /opt/dev-script-0/common.sh
systemctl stop opencode.service
install -d -o byk -g byk -m 0700 /home/byk/.pty-fault
cat >/home/byk/.pty-fault/production.py <<'PY'
import http.server


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"healthy":true,"version":"byk"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", 4096), Answer).serve_forever()
PY
chown byk:byk /home/byk/.pty-fault/production.py
systemd-run --quiet --unit=pty-fault-production --uid=byk --gid=byk -p WorkingDirectory=/home/byk \
	/usr/bin/python3 -I /home/byk/.pty-fault/production.py
wait_port 4096
echo "FAULT: opencode.service stopped; byk's own server answers on 4096" >&2
