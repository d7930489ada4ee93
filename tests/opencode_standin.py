"""A stand-in opencode server answering the API exactly as
pty_acceptance/opencode_api.py reads it, for the suite's own tests.

Run as a program it serves until killed:
    python tests/opencode_standin.py PORT [--password-file server.env] [--no-auth]
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Behaviour:
    """What the stand-in answers; tests change the fields."""

    def __init__(self, password: str | None = None):
        self.password = password          # None: no auth required
        self.healthy = True
        self.plugins = [{"name": "followup", "status": "active"},
                        {"name": "local-pty", "status": "active"}]
        self.activation_delay = 0.0
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

        def _route(self):
            with b.lock:
                b.seen.append((self.command, self.path, self.headers.get("Authorization")))
            if self.path in b.override:
                status, body, headers = b.override[self.path]
                if headers.get("X-No-Length"):
                    self._send(status, body, headers={}, length=False)
                    self.close_connection = True
                else:
                    self._send(status, body, headers=headers)
                return
            if self.path in b.trickle:
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
            if self.command == "GET" and self.path == "/api/health":
                self._send(200, json.dumps({"healthy": b.healthy, "version": "standin"}).encode())
            elif self.command == "GET" and self.path == "/api/plugin":
                self._send(200, json.dumps(b.plugins).encode())
            elif self.command == "POST" and self.path == "/api/plugin/await-activation":
                time.sleep(b.activation_delay)
                self._send(200, b"true")
            elif self.command == "GET" and self.path in ("/", "/site.webmanifest", "/sw.js", "/openapi.json"):
                self._send(200, b"<!doctype html><title>opencode</title>", ctype="text/html")
            else:
                self._send(404, b'{"error":"not found"}')

        def do_GET(self):
            self._route()

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            self._route()

    return H


class StandIn:
    def __init__(self, behaviour: Behaviour, port: int = 0, host: str = "127.0.0.1"):
        self.b = behaviour
        self.server = ThreadingHTTPServer((host, port), make_handler(behaviour))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


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
