"""The opencode server's HTTP API, and nothing else knows it.

This is our reading of the API the cutover preflight (CUT-1, CUT-2) talks to;
matching the real server later is a change to this module and its tests only:

- every request to the candidate carries HTTP Basic auth, user ``opencode``
  and the password of server.env; requests to production carry none (and
  production only ever gets GET);
- ``GET <health path>`` answers 200 with a JSON object holding ``"healthy": true``;
- a UI path answers 200 with a non-empty body;
- ``POST /api/plugin/await-activation`` answers 200 (it may block for a few
  seconds while plugins load);
- ``GET /api/plugin`` answers 200 with a JSON list of objects
  ``{"name": str, "status": str}``; a plugin is active when status is ``"active"``.

Only loopback addresses are ever contacted. Every exchange has a connect
deadline and a hard overall deadline (a watchdog shuts the socket down, so a
server that trickles bytes cannot hold a test); bodies are bounded and are
hostile bytes: a message shows at most a short repr of them, with the
password (and its Basic token) scrubbed in case the server echoes it.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field

USER = "opencode"
MAX_BODY = 256 * 1024
CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 5.0
ACTIVATION_TIMEOUT = 15.0  # await-activation may block while plugins load
HEALTH_EXPECT = "200 with healthy=true"
UI_EXPECT = "200 with a non-empty body"
ACTIVATION_PATH = "/api/plugin/await-activation"
PLUGINS_PATH = "/api/plugin"
PATH_RX = re.compile(r"^/[A-Za-z0-9._~/%-]*$")
EXCERPT = 120


class ApiError(Exception):
    """One line: ``<url>: expected <what>, got <what happened>``."""

    def __init__(self, url: str, expected: str, got: str):
        super().__init__(f"{url}: expected {expected}, got {got}")
        self.url, self.expected, self.got = url, expected, got


@dataclass(frozen=True)
class Reply:
    url: str
    status: int
    reason: str
    body: bytes = field(repr=False)
    elapsed: float
    content_type: str = ""

    def describe(self) -> str:
        return f"{self.url}: {self.status} in {self.elapsed:.2f} s, {len(self.body)} bytes"


@dataclass(frozen=True)
class Plugin:
    name: str
    status: str

    @property
    def active(self) -> bool:
        return self.status == "active"


def excerpt(data: bytes, secrets: tuple[bytes, ...] = (), limit: int = EXCERPT) -> str:
    """A bounded, printable repr of hostile bytes, secrets scrubbed first."""
    for s in secrets:
        if s:
            data = data.replace(s, b"<redacted>")
    cut = data[:limit]
    text = repr(cut)[1:]  # b'...' without the b: escaped, quoted, one line
    if len(data) > limit:
        text += f" (+{len(data) - limit} bytes)"
    return text


def _loopback(host: str) -> str:
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IP address: the preflight only talks to loopback") from None
    if not addr.is_loopback:
        raise ValueError(f"{host} is not a loopback address: the preflight only talks to loopback")
    return str(addr)


class _WatchedConnection(http.client.HTTPConnection):
    """HTTPConnection whose connect uses its own deadline."""

    def __init__(self, host, port, connect_timeout):
        super().__init__(host, port, timeout=connect_timeout)

    def connect(self):
        super().connect()
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class Client:
    """A loopback HTTP/1.1 client for one server (one port).

    ``password`` set: every request carries Basic auth (the candidate).
    ``password`` None: no request carries auth and only GET is allowed
    (production is never written to).
    """

    def __init__(self, port: int, password: str | None = None, host: str = "127.0.0.1",
                 connect_timeout: float = CONNECT_TIMEOUT, read_timeout: float = READ_TIMEOUT,
                 max_body: int = MAX_BODY):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError(f"port {port!r} is not a TCP port")
        self.host = _loopback(host)
        if password is not None and (not isinstance(password, str) or password == ""):
            raise ValueError("an authenticated client needs a non-empty password")
        self.port = port
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_body = max_body
        self._auth = None
        self._secrets: tuple[bytes, ...] = ()
        if password is not None:
            pw = password.encode("utf-8")
            token = base64.b64encode(f"{USER}:".encode() + pw)
            self._auth = "Basic " + token.decode("ascii")
            self._secrets = (pw, token)

    def __repr__(self) -> str:  # never shows the password
        return f"Client({self.base}, auth={'basic' if self._auth else 'none'})"

    @property
    def authenticated(self) -> bool:
        return self._auth is not None

    @property
    def base(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def excerpt(self, data: bytes) -> str:
        return excerpt(data, self._secrets)

    def scrub(self, text: str) -> str:
        """Remove the password (and its Basic token) from a message."""
        for s in self._secrets:
            text = text.replace(s.decode("utf-8", "replace"), "<redacted>")
        return text

    def request(self, method: str, path: str, expected: str, timeout: float | None = None) -> Reply:
        """One exchange; any transport failure raises ApiError(url, expected, what happened)."""
        if method not in ("GET", "POST"):
            raise ValueError(f"method {method!r} is not part of the reading")
        if method != "GET" and not self.authenticated:
            raise ValueError(f"{method} {path}: production gets GET requests only")
        if not isinstance(path, str) or not PATH_RX.match(path):
            raise ValueError(f"path {path!r} is not a plain absolute URL path")
        url = self.url(path)
        deadline = timeout if timeout is not None else self.read_timeout
        headers = {"Host": f"{self.host}:{self.port}", "Accept": "application/json, */*",
                   "Connection": "close", "User-Agent": "pty-acceptance"}
        if method == "POST":
            headers["Content-Length"] = "0"
        conn = _WatchedConnection(self.host, self.port, self.connect_timeout)
        start = time.monotonic()
        fired = threading.Event()
        watchdog = None

        def since() -> str:
            return f"{time.monotonic() - start:.1f} s"

        try:
            try:
                conn.connect()
            except ConnectionRefusedError:
                raise ApiError(url, expected, f"connection refused after {since()}") from None
            except (socket.timeout, TimeoutError):
                raise ApiError(url, expected, f"no connection within {self.connect_timeout:.1f} s") from None
            except OSError as e:
                raise ApiError(url, expected, f"cannot connect ({e.strerror or e}) after {since()}") from None
            sock = conn.sock
            sock.settimeout(deadline)

            def kill():
                fired.set()
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            watchdog = threading.Timer(deadline, kill)
            watchdog.daemon = True
            watchdog.start()
            try:
                conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers.items():
                    conn.putheader(k, v)
                if self._auth:  # never copied into a local: tracebacks show locals
                    conn.putheader("Authorization", self._auth)
                conn.endheaders()
                resp = conn.getresponse()
                length = resp.getheader("Content-Length")
                if length is not None and length.strip().isdigit() and int(length) > self.max_body:
                    raise ApiError(url, expected, f"status {resp.status} and a body that exceeds "
                                                  f"{self.max_body} bytes (Content-Length {int(length)})")
                body = b""
                while len(body) <= self.max_body:
                    chunk = resp.read(min(65536, self.max_body + 1 - len(body)))
                    if not chunk:
                        break
                    body += chunk
                watchdog.cancel()
                if fired.is_set():  # the shutdown may look like a clean end of body
                    raise ApiError(url, expected, f"no complete answer within {deadline:.1f} s")
                if len(body) > self.max_body:
                    raise ApiError(url, expected, f"status {resp.status} and a body that exceeds "
                                                  f"{self.max_body} bytes")
                reason = "".join(c if c.isprintable() else "?" for c in self.scrub(resp.reason)[:60])
                return Reply(url, resp.status, reason, body, time.monotonic() - start,
                             (resp.getheader("Content-Type") or "")[:100])
            except ApiError:
                raise
            except (socket.timeout, TimeoutError):
                raise ApiError(url, expected, f"no complete answer within {deadline:.1f} s") from None
            except (http.client.HTTPException, OSError, ValueError) as e:
                if fired.is_set():
                    raise ApiError(url, expected, f"no complete answer within {deadline:.1f} s") from None
                what = self.scrub(f"{type(e).__name__}: {e}")[:200]
                raise ApiError(url, expected, f"a broken answer after {since()} ({what})") from None
        finally:
            if watchdog is not None:
                watchdog.cancel()
            conn.close()

    # -- the reading -------------------------------------------------------

    def _status(self, reply: Reply, expected: str, want: int = 200) -> None:
        if reply.status != want:
            raise ApiError(reply.url, expected,
                           f"status {reply.status} {reply.reason!r}, body {self.excerpt(reply.body)}")

    def _json(self, reply: Reply, expected: str):
        try:
            return json.loads(reply.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ApiError(reply.url, expected,
                           f"status 200 but a body that is not JSON: {self.excerpt(reply.body)}") from None

    def health(self, path: str) -> Reply:
        """GET <path> -> 200 and a JSON object with "healthy": true."""
        reply = self.request("GET", path, HEALTH_EXPECT)
        self._status(reply, HEALTH_EXPECT)
        doc = self._json(reply, HEALTH_EXPECT)
        if not isinstance(doc, dict):
            raise ApiError(reply.url, HEALTH_EXPECT,
                           f"status 200 and JSON {type(doc).__name__}, not an object: {self.excerpt(reply.body)}")
        if doc.get("healthy") is not True:
            got = "no 'healthy' key" if "healthy" not in doc else f"healthy={self.scrub(json.dumps(doc['healthy'], ensure_ascii=True))[:60]}"
            raise ApiError(reply.url, HEALTH_EXPECT, f"status 200 and {got}")
        return reply

    def ui(self, path: str) -> Reply:
        """GET <path> -> 200 and a non-empty body."""
        reply = self.request("GET", path, UI_EXPECT)
        self._status(reply, UI_EXPECT)
        if not reply.body:
            raise ApiError(reply.url, UI_EXPECT, "status 200 and an empty body")
        return reply

    def await_activation(self, timeout: float = ACTIVATION_TIMEOUT) -> Reply:
        """POST /api/plugin/await-activation -> 200 (may block a few seconds)."""
        expected = "200"
        reply = self.request("POST", ACTIVATION_PATH, expected, timeout=timeout)
        self._status(reply, expected)
        return reply

    def plugins(self) -> tuple[Reply, list[Plugin]]:
        """GET /api/plugin -> 200 and a JSON list of {"name": str, "status": str}."""
        expected = 'a JSON list of {"name": str, "status": str}'
        reply = self.request("GET", PLUGINS_PATH, expected)
        self._status(reply, expected)
        doc = self._json(reply, expected)
        if not isinstance(doc, list):
            raise ApiError(reply.url, expected, f"JSON {type(doc).__name__}: {self.excerpt(reply.body)}")
        out = []
        for i, item in enumerate(doc):
            if not (isinstance(item, dict) and isinstance(item.get("name"), str)
                    and isinstance(item.get("status"), str)):
                raise ApiError(reply.url, expected,
                               f"entry {i} is {self.excerpt(json.dumps(item).encode())}")
            out.append(Plugin(item["name"], item["status"]))
        return reply, out


def missing_or_inactive(wanted: list[str], seen: list[Plugin]) -> list[str]:
    """For each wanted plugin not active: "<name>: absent" or "<name>: status <repr>"."""
    by_name: dict[str, list[Plugin]] = {}
    for p in seen:
        by_name.setdefault(p.name, []).append(p)
    out = []
    for name in wanted:
        entries = by_name.get(name, [])
        if not entries:
            out.append(f"{name}: absent")
        elif len(entries) > 1:
            out.append(f"{name}: listed {len(entries)} times "
                       f"(statuses {[excerpt(p.status.encode(), limit=40) for p in entries]})")
        elif not entries[0].active:
            out.append(f"{name}: status {excerpt(entries[0].status.encode(), limit=40)}")
    return out
