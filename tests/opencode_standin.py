"""A stand-in opencode server answering the API exactly as
pty_acceptance/candidate/opencode_api.py reads it (upstream opencode v2's shapes:
location[directory] on /api/* requests, {location, data} envelopes), for the
suite's own tests.

Run as a program it serves until killed:
    python tests/opencode_standin.py PORT [--password-file server.env] [--no-auth]
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Behaviour:
    """What the stand-in answers; tests change the fields."""

    def __init__(self, password: str | None = None):
        self.password = password          # None: no auth required
        self.healthy = True
        self.plugins = [{"id": "followup", "source": {"type": "file"}, "state": {"status": "active"}},
                        {"id": "local-pty", "source": {"type": "file"}, "state": {"status": "active"}}]
        self.activation_delay = 0.0
        self.activation_status = 204
        self.ptys: dict[str, dict] = {}
        self.ids = itertools.count(1)
        self.override: dict[str, tuple[int, bytes, dict]] = {}  # path -> (status, body, headers)
        self.trickle: set[str] = set()     # paths answered one byte per 0.2 s
        self.seen: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        self.lock = threading.Lock()


def make_handler(b: Behaviour):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # quiet
            pass

        def _send(self, status, body: bytes, ctype="application/json", headers=None, length=True):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            if length:
                self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _auth_ok(self):
            if b.password is None:
                return True
            want = "Basic " + base64.b64encode(f"opencode:{b.password}".encode()).decode()
            return self.headers.get("Authorization") == want

        def _envelope(self, status, data, query):
            where = {"directory": query.get("location[directory]", [""])[0]}
            self._send(status, json.dumps({"location": where, "data": data}).encode())

        def _route(self, body=b""):
            url = urllib.parse.urlsplit(self.path)
            path, query = url.path, urllib.parse.parse_qs(url.query)
            with b.lock:
                b.seen.append((self.command, self.path, self.headers.get("Authorization")))
            if path in b.override:
                status, body, headers = b.override[path]
                if headers.get("X-No-Length"):
                    self._send(status, body, headers={}, length=False)
                    self.close_connection = True
                else:
                    self._send(status, body, headers=headers)
                return
            if path in b.trickle:
                self.send_response(200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                for _ in range(100):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
                return
            if not self._auth_ok():
                self._send(401, b'{"error":"unauthorized"}', headers={"WWW-Authenticate": "Basic"})
                return
            legacy = b.password is None  # production: no v2 API, flat replies
            if path.startswith("/api/") and not legacy and "location[directory]" not in query:
                self._send(400, b'{"error":"location[directory] is required"}')
                return
            pty = b.ptys.get(path.removeprefix("/api/pty/"))
            if self.command == "GET" and path in ("/api/health", "/global/health") and legacy:
                self._send(200, json.dumps({"healthy": b.healthy, "version": "legacy"}).encode())
            elif self.command == "GET" and path == "/api/health":
                self._envelope(200, {"healthy": b.healthy, "version": "standin"}, query)
            elif path.startswith("/api/") and not path.startswith("/api/pty") and path != "/api/plugin" \
                    and path != "/api/plugin/await-activation":
                self._send(404, b'{"error":"not found"}')
            elif self.command == "GET" and path == "/api/plugin":
                self._envelope(200, b.plugins, query)
            elif self.command == "POST" and path == "/api/plugin/await-activation":
                time.sleep(b.activation_delay)
                self._send(b.activation_status, b"")
            elif self.command == "POST" and path == "/api/pty":
                req = json.loads(body or b"{}")
                pty = {"id": f"pty_standin{next(b.ids)}", "title": req.get("title", ""),
                       "command": req.get("command"), "args": req.get("args", []),
                       "cwd": req.get("cwd"), "status": "running", "pid": 4242}
                b.ptys[pty["id"]] = pty
                self._envelope(200, pty, query)
            elif self.command == "GET" and pty is not None:
                self._envelope(200, pty, query)
            elif self.command == "DELETE" and pty is not None:
                del b.ptys[pty["id"]]
                self._send(204, b"")
            elif self.command == "GET" and path in ("/", "/site.webmanifest", "/sw.js", "/openapi.json"):
                self._send(200, b"<!doctype html><title>opencode</title>", ctype="text/html")
            else:
                self._send(404, b'{"error":"not found"}')

        def do_GET(self):
            self._route()

        def do_DELETE(self):
            self._route()

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self._route(self.rfile.read(n) if n else b"")

    return H


class StandIn:
    """The stand-in served by a thread of this process, or (`forked`) by a child
    process of its own, `pid`, started on entry: a process that starts after
    what the test wrote before (CUT-2 judges server.env older than the
    candidate's start). The child's record of what it was asked (`seen`) comes
    back to the Behaviour on exit."""

    def __init__(self, behaviour: Behaviour, port: int = 0, host: str = "127.0.0.1", forked: bool = False):
        self.b = behaviour
        self.server = ThreadingHTTPServer((host, port), make_handler(behaviour))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.forked = forked
        self.pid: int | None = None
        self._seen_r = -1

    def __enter__(self):
        if not self.forked:
            self.thread.start()
            return self
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: serve until SIGTERM, then hand back what was seen
            try:
                os.close(r)
                signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=self.server.shutdown).start())
                self.server.serve_forever()
                data = json.dumps(self.b.seen).encode()
                while data:
                    data = data[os.write(w, data):]
            finally:
                os._exit(0)
        os.close(w)
        # the listening socket is the child's alone: a copy left open here made this process a
        # second holder, and the suite's listener identification named whichever pid it met first
        # (once pids had wrapped past 32768 in a long session, this process: CUT-1 failed)
        self.server.socket.close()
        self.pid, self._seen_r = pid, r
        return self

    def __exit__(self, *exc):
        if self.pid is None:
            self.server.shutdown()
            self.server.server_close()
            return
        os.kill(self.pid, signal.SIGTERM)
        chunks = []
        while chunk := os.read(self._seen_r, 65536):
            chunks.append(chunk)
        os.close(self._seen_r)
        os.waitpid(self.pid, 0)
        self.server.server_close()
        self.b.seen[:] = [tuple(x) for x in json.loads(b"".join(chunks) or b"[]")]


def _password_from(path: str) -> str:
    for line in open(path, encoding="utf-8"):
        if line.startswith("OPENCODE_PASSWORD="):
            pw = line.split("=", 1)[1].strip()
    return pw


if __name__ == "__main__":
    port = int(sys.argv[1])
    pw = None
    if "--password-file" in sys.argv:
        pw = _password_from(sys.argv[sys.argv.index("--password-file") + 1])
    s = StandIn(Behaviour(pw), port)
    s.server.serve_forever()
