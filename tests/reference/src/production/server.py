"""Reference stand-in of the legacy production opencode server on port 4096
(test fixture code; never ships). deploy.sh runs it as opencode.service, the
service user, loopback only. It answers GET / and GET /api/health, and 404
elsewhere; it has no API beyond that and writes nothing.
"""
import http.server
import json
import sys

PAGES = {
    "/": ("text/html", b"<!doctype html><title>opencode</title><p>production</p>\n"),
    "/api/health": ("application/json", json.dumps({"healthy": True, "version": "production"}).encode() + b"\n"),
}


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "opencode-production-reference"

    def do_GET(self):
        type_, body = PAGES.get(self.path.split("?")[0], ("application/json", b'{"error":"not found"}\n'))
        self.send_response(200 if self.path.split("?")[0] in PAGES else 404)
        self.send_header("Content-Type", type_)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("production: " + fmt % args + "\n")


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
