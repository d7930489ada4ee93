"""Contract: the candidate stand-in (tests/reference/src/candidate/server.js)
answers in the shapes of the released opencode server (npm
``opencode-linux-x64``, pinned in tests/refhost/npmdist.py).

Both run side by side on loopback as the unprivileged user nobody, each with
a password: the real server with private HOME/XDG dirs and everything that
reaches out switched off, the stand-in (the cached candidate SEA) pointed by
--pty-socket at a tiny fake supervisor served here (HELLO -> HELLO_OK) and by
--pty-client at a tiny fake helper that holds fd 3 and fd 4 until stdin ends
or a signal comes. The same requests go to both; for each exchange the
status, the content type, the www-authenticate header and the JSON body's key
sets and value types (recursively) must agree, and so must the values a
request determines (location, command, args, cwd, title, status, ptyID). A
drift in either names the exchange and the field.

What the real server answered when this was written (1.18.34):
- GET /global/health -> {"healthy": true, "version": "1.18.34"};
  GET /api/health -> {"healthy": true} (no envelope);
- 401 (no, wrong or another user's credentials) with
  `www-authenticate: Basic realm="Secure Area"`: under /api/ the JSON
  {"_tag": "UnauthorizedError", "message": "Authentication required"},
  elsewhere an empty body without a content type;
- POST /api/pty -> {"location": {"directory": D, "project": {"id": "global",
  "directory": "/"}}, "data": {"id": "pty_...", "title", "command", "args",
  "cwd", "status": "running", "pid"}}; GET /api/pty/{id} the same;
  DELETE -> 204 with no body; then GET or DELETE -> 404
  {"_tag": "PtyNotFoundError", "ptyID", "message"};
- sh, bash, dash, zsh, fish and ksh get "-l" appended to their args.

The stand-in's side of the hand-off is checked too while its session lives:
the reply's pid is the fake helper, run as
`--runtime 3600 -- COMMAND ARGS...`, with fd 3 the client end of the one
connection the fake supervisor accepted and fd 4 the directory; DELETE ends
the helper and closes that connection. Every process started here is stopped
and the temporary tree removed, on every path.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pty_acceptance.host.polling import poll

from tests.refhost import nodedist, npmdist

NOBODY = 65534
READY_DEADLINE_S = 60.0  # the real server was up in under 8 s on these machines
REQUEST_TIMEOUT_S = 10.0
GONE_DEADLINE_S = 10.0
STOP_DEADLINE_S = 10.0
HELLO, HELLO_OK = 0x01, 0x81
REAL_ENV = {  # notes/real-components.md: nothing reaches out
    "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
}
FAKE_HELPER = "#!/bin/sh\n# holds fd 3 and fd 4 until stdin ends or a signal comes\nread -r _\n"
UNKNOWN_ID = "pty_0123456789abcdef0123456789"
# values one request determines on both sides (paths as in the drift messages)
SAME_VALUES = ("location", "data.command", "data.args", "data.cwd", "data.title", "data.status",
               "_tag", "message", "ptyID")


# ------------------------------------------------------------------ HTTP

@dataclass
class Exchange:
    status: int
    content_type: str
    authenticate: str | None
    body: bytes

    @property
    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class Api:
    def __init__(self, name: str, port: int, password: str, directory: str):
        self.name, self.port, self.password, self.directory = name, port, password, directory

    def call(self, method: str, path: str, body=None, user: str = "opencode", password: str | None = None,
             auth: bool = True, timeout: float = REQUEST_TIMEOUT_S) -> Exchange:
        if path.startswith("/api/"):
            path += "?" + urllib.parse.urlencode({"location[directory]": self.directory})
        headers = {"Connection": "close"}
        if auth:
            token = f"{user}:{self.password if password is None else password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            return Exchange(r.status, (r.getheader("Content-Type") or "").split(";")[0].strip(),
                            r.getheader("www-authenticate"), r.read())
        finally:
            conn.close()

    def ready(self) -> bool:
        try:
            return self.call("GET", "/global/health", timeout=2).status == 200
        except (OSError, http.client.HTTPException):
            return False


# ------------------------------------------------------------------ shapes

def _type(v) -> str:
    return {bool: "bool", int: "int", float: "number", str: "str", type(None): "null"}.get(type(v), type(v).__name__)


def shape_drift(real, standin, at: str = "") -> list[str]:
    """Where the JSON values differ in key sets or value types, recursively."""
    name = at or "body"
    if isinstance(real, dict) and isinstance(standin, dict):
        out = []
        for k in sorted(real.keys() - standin.keys()):
            out.append(f"{name}: key {k!r} only in the real server's reply")
        for k in sorted(standin.keys() - real.keys()):
            out.append(f"{name}: key {k!r} only in the stand-in's reply")
        for k in sorted(real.keys() & standin.keys()):
            out += shape_drift(real[k], standin[k], f"{at}.{k}" if at else k)
        return out
    if isinstance(real, list) and isinstance(standin, list):
        if len(real) != len(standin):
            return [f"{name}: {len(real)} items in the real server's reply, {len(standin)} in the stand-in's"]
        return [d for i, (a, b) in enumerate(zip(real, standin, strict=True))
                for d in shape_drift(a, b, f"{name}[{i}]")]
    if _type(real) != _type(standin):
        return [f"{name}: {_type(real)} in the real server's reply, {_type(standin)} in the stand-in's"]
    return []


def _at(doc, path: str):
    for k in path.split("."):
        if not isinstance(doc, dict) or k not in doc:
            return KeyError
        doc = doc[k]
    return doc


def drift(real: Exchange, standin: Exchange) -> list[str]:
    out = []
    for what, a, b in (("status", real.status, standin.status),
                       ("content type", real.content_type, standin.content_type),
                       ("www-authenticate", real.authenticate, standin.authenticate)):
        if a != b:
            out.append(f"{what}: real server {a!r}, stand-in {b!r}")
    ra, sa = real.json, standin.json
    if (ra is None) != (sa is None) or (ra is None and bool(real.body) != bool(standin.body)):
        out.append(f"body: real server {real.body[:80]!r}, stand-in {standin.body[:80]!r}")
    elif ra is not None:
        out += shape_drift(ra, sa)
        for p in SAME_VALUES:
            a, b = _at(ra, p), _at(sa, p)
            if a is not KeyError and b is not KeyError and a != b:
                out.append(f"{p}: real server {a!r}, stand-in {b!r}")
    return out


# ------------------------------------------------------------------ processes

class Proc:
    """One server process as nobody, in its own session; its log in a file."""

    def __init__(self, name: str, argv: list[str], env: dict, cwd: Path, log: Path):
        self.name, self.log = name, log
        with open(log, "wb") as out:
            self.p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, user=NOBODY, group=NOBODY, extra_groups=[],
                                      start_new_session=True)

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError as e:
            return str(e)

    def wait_ready(self, api: Api) -> None:
        def up():
            if self.p.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.p.returncode} before answering: {self.tail()}",
                            pytrace=False)
            return api.ready()
        try:
            poll(up, READY_DEADLINE_S, f"{self.name} answering GET /global/health on port {api.port}")
        except TimeoutError as e:
            pytest.fail(f"{e}: {self.tail()}", pytrace=False)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(STOP_DEADLINE_S)
        try:  # whatever it left in its process group
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class FakeSupervisor:
    """Accepts on a Unix socket; HELLO -> HELLO_OK; keeps each connection until the peer closes it."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o666)
        self.sock.listen(8)
        self.conns: list[dict] = []  # {"inode": peer's socket inode, "closed": bool, "hello": bool}
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        rec = {"hello": False, "closed": False, "local": os.fstat(c.fileno()).st_ino}
        with self.lock:
            self.conns.append(rec)
        with c:
            hdr = c.recv(5, socket.MSG_WAITALL)
            if hdr == struct.pack(">IB", 0, HELLO):
                rec["hello"] = True
                c.sendall(struct.pack(">IB", 16, HELLO_OK) + secrets.token_bytes(16))
                while c.recv(65536):  # until the helper (and the runtime's copy) close it
                    pass
        rec["closed"] = True

    def close(self) -> None:
        self.sock.close()


def _fd_target(pid: int, fd: int) -> tuple[str, os.stat_result | None]:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}"), os.stat(f"/proc/{pid}/fd/{fd}")
    except OSError as e:
        return f"({e.strerror})", None


def _peer_inode(local_inode: int) -> int | None:
    """The inode of the other end of a connected Unix socket (sock_diag, through ss)."""
    r = subprocess.run(["ss", "-xn"], capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        f = line.split()  # Netid State Recv-Q Send-Q Local-Address Port Peer-Address Port
        if len(f) >= 8 and f[0] == "u_str" and f[5] == str(local_inode):
            return int(f[7]) if f[7].isdigit() else None
    return None


def _same_id(x: Exchange, pty_id: str) -> Exchange:
    """The reply with its session id written as pty_ID (ids differ by nature; their type is compared)."""
    return Exchange(x.status, x.content_type, x.authenticate, x.body.replace(pty_id.encode(), b"pty_ID"))


# ------------------------------------------------------------------ the run

@dataclass
class Run:
    pairs: dict[str, tuple[Exchange, Exchange]] = field(default_factory=dict)
    handoff: list[str] = field(default_factory=list)  # problems seen in the stand-in's hand-off
    evidence: dict[str, str] = field(default_factory=dict)


def _exchanges(real: Api, standin: Api, ws: str, helper: str, sup: FakeSupervisor) -> Run:
    run = Run()

    def both(step: str, *a, **k) -> tuple[Exchange, Exchange]:
        run.pairs[step] = (real.call(*a, **k), standin.call(*a, **k))
        return run.pairs[step]

    both("GET /global/health", "GET", "/global/health")
    both("GET /api/health", "GET", "/api/health")
    both("GET /api/health without credentials", "GET", "/api/health", auth=False)
    both("GET /api/health with a wrong password", "GET", "/api/health", password="not-the-password")
    both("GET /api/health as another user", "GET", "/api/health", user="root")
    both("GET /global/health with a wrong password", "GET", "/global/health", password="not-the-password")
    for step, body in (("POST /api/pty /bin/cat", {"command": "/bin/cat", "args": [], "cwd": ws,
                                                   "title": "contract"}),
                       ("POST /api/pty /bin/sh", {"command": "/bin/sh", "args": ["-c", "read x"],
                                                  "cwd": ws, "title": "contract"})):
        kind = step.split()[-1]
        r, s = both(step, "POST", "/api/pty", body=body)
        ids = [x.json["data"]["id"] if x.status == 200 and isinstance(x.json, dict)
               and isinstance(x.json.get("data"), dict) and isinstance(x.json["data"].get("id"), str)
               else None for x in (r, s)]
        if None in ids:
            run.handoff.append(f"{step}: no id to go on with (real {r.status}, stand-in {s.status} "
                               f"{s.body[:200]!r})")
            return run
        rid, sid = ids
        run.pairs[step] = (_same_id(r, rid), _same_id(s, sid))

        def get(label: str, method: str = "GET", path: str = "/api/pty/{}", rid=rid, sid=sid) -> None:
            run.pairs[label] = (_same_id(real.call(method, path.format(rid)), rid),
                                _same_id(standin.call(method, path.format(sid)), sid))

        get(f"GET /api/pty/{{id}} ({kind})")
        if kind == "/bin/cat":
            get("GET /api/pty", path="/api/pty")
            _check_handoff(run, s.json["data"], ws, helper, sup, body)
        get(f"DELETE /api/pty/{{id}} ({kind})", "DELETE")
        get(f"GET /api/pty/{{id}} after DELETE ({kind})")
        if kind == "/bin/cat":
            get(f"DELETE /api/pty/{{id}} after DELETE ({kind})", "DELETE")
        if kind == "/bin/cat":
            _check_gone(run, s.json["data"]["pid"], sup)
    both("GET /api/pty/{unknown id}", "GET", f"/api/pty/{UNKNOWN_ID}")
    both("DELETE /api/pty/{unknown id}", "DELETE", f"/api/pty/{UNKNOWN_ID}")
    return run


def _check_handoff(run: Run, data: dict, ws: str, helper: str, sup: FakeSupervisor, body: dict) -> None:
    pid = data.get("pid")
    if not isinstance(pid, int):
        run.handoff.append(f"the stand-in's pid {pid!r} is not a pid")
        return
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError as e:
        run.handoff.append(f"the stand-in's pid {pid} is not running: {e}")
        return
    want = [b"/bin/sh", helper.encode(), b"--runtime", b"3600", b"--", body["command"].encode(),
            *(a.encode() for a in body["args"])]
    run.evidence["helper argv"] = repr(argv)
    if argv != want:
        run.handoff.append(f"pid {pid} runs {argv}, expected the fake helper as {want}")
    with sup.lock:
        hellos = [c for c in sup.conns if c["hello"]]
    t3, st3 = _fd_target(pid, 3)
    t4, st4 = _fd_target(pid, 4)
    run.evidence["helper fd 3"], run.evidence["helper fd 4"] = t3, t4
    if len(hellos) != 1:
        run.handoff.append(f"the fake supervisor saw {len(hellos)} HELLOs for one session")
    elif st3 is None or not stat.S_ISSOCK(st3.st_mode):
        run.handoff.append(f"the helper's fd 3 is {t3}, not a socket")
    elif _peer_inode(hellos[0]["local"]) != st3.st_ino:
        run.handoff.append(f"the helper's fd 3 ({t3}) is not the client end of the supervisor connection "
                           f"(peer of socket:[{hellos[0]['local']}] is {_peer_inode(hellos[0]['local'])})")
    wst = os.stat(ws)
    if st4 is None or (st4.st_dev, st4.st_ino) != (wst.st_dev, wst.st_ino):
        run.handoff.append(f"the helper's fd 4 is {t4}, not the directory {ws}")
    others = {}  # the shell keeps its script open: only sockets and directories beyond 3 and 4 count
    for fd in sorted(int(f) for f in os.listdir(f"/proc/{pid}/fd")):
        target, st = _fd_target(pid, fd)
        if fd > 4 and st is not None and (stat.S_ISSOCK(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            others[fd] = target
    if others:
        run.handoff.append(f"the helper holds more sockets or directories: {others}")


def _check_gone(run: Run, pid, sup: FakeSupervisor) -> None:
    def gone():
        with sup.lock:
            return all(c["closed"] for c in sup.conns if c["hello"]) and not os.path.exists(f"/proc/{pid}")
    try:
        poll(gone, GONE_DEADLINE_S, f"helper pid {pid} gone and its supervisor connection closed after DELETE",
             lambda: f"helper {'still there' if os.path.exists(f'/proc/{pid}') else 'gone'}, "
                     f"supervisor connections {sup.conns}")
    except TimeoutError as e:
        run.handoff.append(str(e))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run() -> Run:
    opencode = npmdist.ensure(npmdist.pin("opencode-linux-x64"))
    sea = nodedist.ensure_sea()
    top = Path(tempfile.mkdtemp(prefix="candidate-contract-", dir="/tmp"))
    procs: list[Proc] = []
    sup = None
    try:
        os.chmod(top, 0o755)
        for d in ("real", "standin", "work"):
            (top / d).mkdir()
            os.chown(top / d, NOBODY, NOBODY)
        os.chmod(top / "work", 0o700)
        helper = top / "fake-helper"
        helper.write_text(FAKE_HELPER)
        os.chmod(helper, 0o755)
        sup = FakeSupervisor(top / "supervisor.sock")
        ws = str(top / "work")
        password = secrets.token_urlsafe(18)
        base = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        home = top / "real"
        real_env = {**base, **REAL_ENV, "HOME": str(home), "XDG_CONFIG_HOME": f"{home}/config",
                    "XDG_DATA_HOME": f"{home}/data", "XDG_CACHE_HOME": f"{home}/cache",
                    "XDG_STATE_HOME": f"{home}/state", "OPENCODE_SERVER_PASSWORD": password}
        ports = _free_port(), _free_port()
        real = Api("real", ports[0], password, ws)
        standin = Api("stand-in", ports[1], password, ws)
        procs.append(Proc("the real opencode server", [str(opencode), "serve", "--hostname", "127.0.0.1",
                                                       "--port", str(real.port)],
                          real_env, home, top / "real.log"))
        procs.append(Proc("the candidate stand-in", [str(sea), "--hostname", "127.0.0.1", "--port",
                                                     str(standin.port), "--pty-socket",
                                                     str(top / "supervisor.sock"), "--pty-client", str(helper)],
                          {**base, "HOME": str(top / "standin"), "OPENCODE_PASSWORD": password},
                          top / "standin", top / "standin.log"))
        t0 = time.monotonic()
        for p, api in zip(procs, (real, standin), strict=True):
            p.wait_ready(api)
        result = _exchanges(real, standin, ws, str(helper), sup)
        result.evidence["both answering after"] = f"{time.monotonic() - t0:.1f} s"
        yield result
    finally:
        for p in procs:
            p.stop()
        if sup:
            sup.close()
        shutil.rmtree(top, ignore_errors=True)


STEPS = [
    "GET /global/health", "GET /api/health",
    "GET /api/health without credentials", "GET /api/health with a wrong password",
    "GET /api/health as another user", "GET /global/health with a wrong password",
    "POST /api/pty /bin/cat", "GET /api/pty/{id} (/bin/cat)", "GET /api/pty",
    "DELETE /api/pty/{id} (/bin/cat)", "GET /api/pty/{id} after DELETE (/bin/cat)",
    "DELETE /api/pty/{id} after DELETE (/bin/cat)",
    "POST /api/pty /bin/sh", "GET /api/pty/{id} (/bin/sh)", "DELETE /api/pty/{id} (/bin/sh)",
    "GET /api/pty/{id} after DELETE (/bin/sh)",
    "GET /api/pty/{unknown id}", "DELETE /api/pty/{unknown id}",
]


@pytest.mark.parametrize("step", STEPS)
def test_same_shape(run, step):
    assert step in run.pairs, f"{step}: not reached ({'; '.join(run.handoff) or 'an earlier step failed'})"
    real, standin = run.pairs[step]
    problems = drift(real, standin)
    assert not problems, (f"{step}: the stand-in drifted from the real opencode server: " + "; ".join(problems)
                          + f"\n  real: {real.status} {real.body[:300]!r}\n  stand-in: {standin.status} "
                          f"{standin.body[:300]!r}")


def test_standin_hands_the_session_to_the_helper(run):
    assert not run.handoff, "; ".join(run.handoff) + f" (seen: {run.evidence})"


def test_shape_drift_names_the_field():
    """The comparison itself: a missing key, a changed type, a changed value are each named."""
    a = Exchange(200, "application/json", None, json.dumps(
        {"location": {"directory": "/w"}, "data": {"id": "pty_1", "pid": 1, "args": ["-l"]}}).encode())
    b = Exchange(200, "application/json", None, json.dumps(
        {"location": {"directory": "/w"}, "data": {"id": "pty_2", "pid": "1", "args": [], "x": 0}}).encode())
    got = drift(a, b)
    assert "data: key 'x' only in the stand-in's reply" in got
    assert "data.pid: int in the real server's reply, str in the stand-in's" in got
    assert "data.args: 1 items in the real server's reply, 0 in the stand-in's" in got
    assert "data.args: real server ['-l'], stand-in []" in got
    assert not any("data.id" in g for g in got)  # ids differ by nature, their type agrees
    c = Exchange(401, "", 'Basic realm="Secure Area"', b"")
    d = Exchange(401, "application/json", 'Basic realm="opencode"', b"{}")
    got = drift(c, d)
    assert any(g.startswith("content type:") for g in got)
    assert any(g.startswith("www-authenticate:") for g in got)
    assert any(g.startswith("body:") for g in got)
