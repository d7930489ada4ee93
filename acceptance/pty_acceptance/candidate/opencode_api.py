"""The opencode server's HTTP API, and nothing else knows it.

The candidate speaks upstream opencode v2's API (TARGET-CONTRACT section 7;
shapes read from upstream's protocol files and checked live against the
released server). Matching another revision later is a change to this module
and its tests only:

- every request to the candidate carries HTTP Basic auth, user ``opencode``
  and the password of server.env; requests to production carry none (and
  production only ever gets GET);
- every ``/api/*`` request carries the query ``location[directory]=<dir>``
  and every ``/api/*`` reply but health is the envelope
  ``{"location": {...}, "data": ...}``;
- ``GET /api/health`` answers 200 with an object holding ``"healthy": true``
  (upstream serves it bare, as the released server does; an envelope's
  ``data`` is read the same way);
- a UI path answers 200 with a non-empty body;
- ``POST /api/plugin/await-activation`` answers 204 (200 accepted; it may
  block for a few seconds while plugins load);
- ``GET /api/plugin``: ``data`` is a list of ``{"id": str, "state": {"status": str}}``
  (an older upstream form puts ``"status"`` flat on each entry: both are
  read, nothing else); a plugin is active when status is ``"active"``;
- ``POST /api/pty`` with ``{command, args, cwd, title}``: ``data`` is
  ``{"id": "pty_...", "status": "running"|"exited", "pid": int, ...}``;
  ``GET /api/pty/{id}`` the same object; ``DELETE /api/pty/{id}`` answers 204.

Only loopback addresses are ever contacted. Every exchange has a connect
deadline and a hard overall deadline (a watchdog shuts the socket down, so a
server that trickles bytes cannot hold a test); bodies are bounded and are
hostile bytes: a message shows at most a short repr of them, with the
password (and its Basic token) scrubbed in case the server echoes it. An id
the server answers is used in a path only when it has the shape ``pty_<word>``.
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
import urllib.parse
from dataclasses import dataclass, field

from pty_acceptance.errors import Unreadable

USER = "opencode"
MAX_BODY = 256 * 1024
CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 5.0
ACTIVATION_TIMEOUT = 15.0  # await-activation may block while plugins load
HEALTH_EXPECT = "200 with healthy=true"
UI_EXPECT = "200 with a non-empty body"
ACTIVATION_PATH = "/api/plugin/await-activation"
PLUGINS_PATH = "/api/plugin"
PTY_PATH = "/api/pty"
PATH_RX = re.compile(r"^/[A-Za-z0-9._~/%-]*$")
PTY_ID = re.compile(r"^pty_[A-Za-z0-9_-]{1,128}$")
ENVELOPE = '{"location": {...}, "data": ...}'
PLUGIN_SHAPES = '{"id": str, "state": {"status": str}} or {"id": str, "status": str}'
EXCERPT = 120


class ApiError(Unreadable):
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
    name: str  # the entry's id
    status: str

    @property
    def active(self) -> bool:
        return self.status == "active"


@dataclass(frozen=True)
class Pty:
    """One PTY session as the API describes it (``data`` of /api/pty)."""
    id: str
    status: str
    pid: int | None
    exit_code: int | None
    raw: dict = field(repr=False)


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
                 max_body: int = MAX_BODY, directory: str | None = None):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError(f"port {port!r} is not a TCP port")
        self.host = _loopback(host)
        if directory is not None and not (isinstance(directory, str) and directory.startswith("/")
                                          and "\0" not in directory):
            raise ValueError(f"location directory {directory!r} is not an absolute path")
        self.directory = directory  # location[directory] of every /api/* request
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

    def target(self, path: str) -> str:
        """The request target: the candidate's /api/* paths carry location[directory]
        (legacy production, unauthenticated, speaks no v2 API and gets none)."""
        if not isinstance(path, str) or not PATH_RX.match(path):
            raise ValueError(f"path {path!r} is not a plain absolute URL path")
        if self.authenticated and (path == "/api" or path.startswith("/api/")):
            if self.directory is None:
                raise ValueError(f"{path}: an /api/* request needs a location directory")
            return path + "?" + urllib.parse.urlencode({"location[directory]": self.directory})
        return path

    def request(self, method: str, path: str, expected: str, timeout: float | None = None,
                body: dict | None = None) -> Reply:
        """One exchange; any transport failure raises ApiError(url, expected, what happened)."""
        if method not in ("GET", "POST", "DELETE"):
            raise ValueError(f"method {method!r} is not part of the reading")
        if method != "GET" and not self.authenticated:
            raise ValueError(f"{method} {path}: production gets GET requests only")
        target = self.target(path)
        url = self.url(path)
        deadline = timeout if timeout is not None else self.read_timeout
        headers = {"Host": f"{self.host}:{self.port}", "Accept": "application/json, */*",
                   "Connection": "close", "User-Agent": "pty-acceptance"}
        payload = b"" if body is None else json.dumps(body).encode("utf-8")
        if method != "GET":
            headers["Content-Length"] = str(len(payload))
        if body is not None:
            headers["Content-Type"] = "application/json"
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
                conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for k, v in headers.items():
                    conn.putheader(k, v)
                if self._auth:  # never copied into a local: tracebacks show locals
                    conn.putheader("Authorization", self._auth)
                conn.endheaders(payload or None)
                resp = conn.getresponse()
                length = resp.getheader("Content-Length")
                if length is not None and length.strip().isdigit() and int(length) > self.max_body:
                    raise ApiError(url, expected, f"status {resp.status} and a body that exceeds "
                                                  f"{self.max_body} bytes (Content-Length {int(length)})")
                received = b""
                while len(received) <= self.max_body:
                    chunk = resp.read(min(65536, self.max_body + 1 - len(received)))
                    if not chunk:
                        break
                    received += chunk
                watchdog.cancel()
                if fired.is_set():  # the shutdown may look like a clean end of body
                    raise ApiError(url, expected, f"no complete answer within {deadline:.1f} s")
                if len(received) > self.max_body:
                    raise ApiError(url, expected, f"status {resp.status} and a body that exceeds "
                                                  f"{self.max_body} bytes")
                reason = "".join(c if c.isprintable() else "?" for c in self.scrub(resp.reason)[:60])
                return Reply(url, resp.status, reason, received, time.monotonic() - start,
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

    def _status(self, reply: Reply, expected: str, *want: int) -> None:
        if reply.status not in (want or (200,)):
            raise ApiError(reply.url, expected,
                           f"status {reply.status} {reply.reason!r}, body {self.excerpt(reply.body)}")

    def _json(self, reply: Reply, expected: str):
        try:
            return json.loads(reply.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ApiError(reply.url, expected,
                           f"status {reply.status} but a body that is not JSON: {self.excerpt(reply.body)}") from None

    def _shown(self, value) -> str:
        return self.excerpt(json.dumps(value, ensure_ascii=True).encode())

    def _data(self, reply: Reply, expected: str):
        """The ``data`` of a v2 envelope ``{"location": {...}, "data": ...}``."""
        doc = self._json(reply, expected)
        if not (isinstance(doc, dict) and isinstance(doc.get("location"), dict) and "data" in doc):
            raise ApiError(reply.url, expected,
                           f"status {reply.status} and JSON that is not the envelope {ENVELOPE}: "
                           f"{self.excerpt(reply.body)}")
        return doc["data"]

    def health(self, path: str) -> Reply:
        """GET <path> -> 200 and an object with "healthy": true (its data, under /api/)."""
        reply = self.request("GET", path, HEALTH_EXPECT)
        self._status(reply, HEALTH_EXPECT)
        doc = self._json(reply, HEALTH_EXPECT)
        if isinstance(doc, dict) and isinstance(doc.get("location"), dict) and isinstance(doc.get("data"), dict):
            doc = doc["data"]
        if not isinstance(doc, dict):
            raise ApiError(reply.url, HEALTH_EXPECT,
                           f"status 200 and JSON {type(doc).__name__}, not an object: {self.excerpt(reply.body)}")
        if doc.get("healthy") is not True:
            got = ("no 'healthy' key" if "healthy" not in doc
                   else f"healthy={self.scrub(json.dumps(doc['healthy'], ensure_ascii=True))[:60]}")
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
        """POST /api/plugin/await-activation -> 204 (or 200; may block a few seconds)."""
        expected = "204 (or 200)"
        reply = self.request("POST", ACTIVATION_PATH, expected, timeout=timeout)
        self._status(reply, expected, 204, 200)
        return reply

    def plugins(self) -> tuple[Reply, list[Plugin]]:
        """GET /api/plugin -> 200 and data: a list of plugin entries (PLUGIN_SHAPES)."""
        expected = f"data: a JSON list of {PLUGIN_SHAPES}"
        reply = self.request("GET", PLUGINS_PATH, expected)
        self._status(reply, expected)
        doc = self._data(reply, expected)
        if not isinstance(doc, list):
            raise ApiError(reply.url, expected, f"data is a JSON {type(doc).__name__}: {self._shown(doc)}")
        out = []
        for i, item in enumerate(doc):
            status = None
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                state = item.get("state")
                if isinstance(state, dict) and isinstance(state.get("status"), str):
                    status = state["status"]
                elif state is None and isinstance(item.get("status"), str):
                    status = item["status"]
            if status is None:
                raise ApiError(reply.url, expected, f"entry {i} is {self._shown(item)}")
            out.append(Plugin(item["id"], status))
        return reply, out

    # -- PTY sessions (RUNTIME-2) -----------------------------------------

    def _pty(self, reply: Reply, expected: str, want_id: str | None = None) -> Pty:
        doc = self._data(reply, expected)
        if not isinstance(doc, dict):
            raise ApiError(reply.url, expected, f"data is a JSON {type(doc).__name__}: {self._shown(doc)}")
        pid, code = doc.get("pid"), doc.get("exitCode")
        problems = []
        if not (isinstance(doc.get("id"), str) and PTY_ID.match(doc["id"])):
            problems.append(f"id {self._shown(doc.get('id'))} is not pty_<word>")
        elif want_id is not None and doc["id"] != want_id:
            problems.append(f"id {doc['id']!r} is not the requested {want_id!r}")
        if doc.get("status") not in ("running", "exited"):
            problems.append(f"status {self._shown(doc.get('status'))} is not running or exited")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
            problems.append(f"pid {self._shown(pid)} is not a process id")
        if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
            problems.append(f"exitCode {self._shown(code)} is not an integer")
        if problems:
            raise ApiError(reply.url, expected, "data " + "; ".join(problems))
        return Pty(doc["id"], doc["status"], pid, code, doc)

    def pty_create(self, command: str, args: list[str], cwd: str, title: str) -> tuple[Reply, Pty]:
        """POST /api/pty -> 200 and data {id: pty_..., status, pid, ...}."""
        expected = "200 and data {id: pty_..., status, pid}"
        reply = self.request("POST", PTY_PATH, expected, timeout=ACTIVATION_TIMEOUT,
                             body={"command": command, "args": list(args), "cwd": cwd, "title": title})
        self._status(reply, expected)
        return reply, self._pty(reply, expected)

    def pty_get(self, pty_id: str) -> tuple[Reply, Pty]:
        expected = f"200 and data for {pty_id}"
        reply = self.request("GET", f"{PTY_PATH}/{_pty_id(pty_id)}", expected)
        self._status(reply, expected)
        return reply, self._pty(reply, expected, want_id=pty_id)

    def pty_delete(self, pty_id: str) -> Reply:
        expected = "204"
        reply = self.request("DELETE", f"{PTY_PATH}/{_pty_id(pty_id)}", expected, timeout=ACTIVATION_TIMEOUT)
        self._status(reply, expected, 204)
        return reply


def _pty_id(pty_id: str) -> str:
    if not (isinstance(pty_id, str) and PTY_ID.match(pty_id)):
        raise ValueError(f"{pty_id!r} is not a PTY id (pty_<word>)")
    return pty_id


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
