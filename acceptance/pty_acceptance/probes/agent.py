"""The peer agent: the MainPID of the suite's disposable opencode-v2.service.

It runs as the service user, stdlib only, from a private copy of this file
and protocol.py. Its stdin is a control socket to the suite: one JSON object
per line in each direction, descriptors passed with SCM_RIGHTS. It does only
what the suite asks, the way the real peer would: connect, HELLO, spawn the
fixed helper with fd 3 = a duplicate of the connected socket and fd 4 = an
O_DIRECTORY descriptor of the approved directory, or hand the connected
socket to the suite. It can also fork a child that is an agent of its own: a
process of the same unit that is not MainPID (PEER-5, ISO-3).
"""

import ctypes
import json
import os
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol as p  # noqa: E402  (the copy staged beside this file)

HELPER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
RAW_KEPT = 4096  # bytes of the supervisor's first answer kept for the suite


class Agent:
    def __init__(self, ctrl):
        self.ctrl = ctrl
        self.sock = None
        self.buf = b""
        self.children = {}
        self.flooded = []  # unauthenticated connections held by op_flood

    # -- control channel
    def read_request(self):
        fds = []
        while b"\n" not in self.buf:
            data, got, _ = p.recv_with_fds(self.ctrl, 65536, maxfds=8)
            fds += got
            if not data:
                return None, fds
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line), fds

    def reply(self, obj, fds=()):
        p.send_frame(self.ctrl, json.dumps(obj).encode() + b"\n", list(fds))

    # -- operations
    def op_ready(self, req, fds):
        return {"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid(),
                "invocation": os.environ.get("INVOCATION_ID", "")}

    def op_connect(self, req, fds):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(req.get("timeout", 10))
        s.connect(req["path"])
        self.sock = s
        return {}

    def op_hello(self, req, fds):
        self.sock.sendall(p.encode(p.T.HELLO))
        return {"frame": read_frame(self.sock, req.get("timeout", 10))}

    def op_take(self, req, fds):
        # settimeout() left O_NONBLOCK on the open file, which the suite shares
        self.sock.setblocking(True)
        fd = self.sock.fileno()
        if not req.get("keep", False):
            self.reply({"ok": True}, [fd])
            self.sock.close()
            self.sock = None
            return None
        self.reply({"ok": True}, [fd])
        return None

    def op_close(self, req, fds):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        return {}

    def op_spawn(self, req, fds):
        """fds: the helper's stdin, stdout, stderr."""
        if len(fds) != 3:
            raise ValueError(f"spawn needs 3 descriptors, got {len(fds)}")
        dirfd = os.open(req["cwd"], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.sock.setblocking(True)  # the helper gets the socket as the real peer gives it
        sockfd = self.sock.fileno()
        pid = os.fork()
        if pid == 0:  # child: exactly fds 0-4, then exec the fixed helper
            try:
                high = [os.dup(fd) for fd in (*fds, sockfd, dirfd)]
                moved = [os.dup2(fd, 100 + i) if fd < 100 else fd for i, fd in enumerate(high)]
                for n, fd in enumerate(moved):
                    os.dup2(fd, n)
                os.closerange(5, os.sysconf("SC_OPEN_MAX"))
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as a peer starts its helper
                os.execve(req["argv"][0], req["argv"], HELPER_ENV)
            finally:
                os._exit(127)
        os.close(dirfd)
        p.close_all(fds)
        self.children[pid] = None
        if req.get("close_socket", True):
            self.sock.close()
            self.sock = None
        return {"pid": pid}

    def op_wait(self, req, fds):
        pid = req["pid"]
        end = req.get("timeout", 30)
        pidfd = os.pidfd_open(pid)
        try:
            ready, _, _ = select.select([pidfd], [], [], end)
        finally:
            os.close(pidfd)
        if not ready:
            return {"status": None}
        _, status = os.waitpid(pid, 0)
        self.children.pop(pid, None)
        return {"status": os.waitstatus_to_exitcode(status)}

    def op_signal(self, req, fds):
        os.kill(req["pid"], req["signal"])
        return {}

    def op_child_hello(self, req, fds):
        """A process of this unit that is not MainPID connects and says HELLO."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect(req["path"])
                s.sendall(p.encode(p.T.HELLO))
                out = json.dumps({"frame": read_frame(s, 10), "pid": os.getpid()})
            except Exception as e:  # reported, not raised: this is a child
                out = json.dumps({"error": f"{type(e).__name__}: {e}"})
            os.write(w, out.encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.close(r)
        os.waitpid(pid, 0)
        return json.loads(data or b'{"error": "child wrote nothing"}')

    def op_fork_agent(self, req, fds):
        """Fork a child that is an agent of its own, on a new control socket handed
        to the suite: a process of this unit that is not MainPID and still answers
        while this one is stopped or dead. ignore_term: it outlives the SIGTERM of
        a stopping unit (until systemd's SIGKILL)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            try:
                mine.close()
                for s in [self.ctrl, self.sock, *self.flooded]:
                    if s is not None:
                        s.close()
                if req.get("ignore_term"):
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                Agent(theirs).run()
            finally:
                os._exit(0)
        theirs.close()
        self.children[pid] = None
        self.reply({"ok": True, "pid": pid}, [mine.fileno()])
        mine.close()
        return None

    def op_flood(self, req, fds):
        """Open `count` unauthenticated connections (every `junk_every`-th sends
        junk), give the supervisor `window` s to answer, keep the silent ones."""
        import resource
        import time
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, req["count"] + 256)
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        junk = [b"\xff" * 64, p.HEADER.pack(0, 0x7f), p.HEADER.pack(16, p.T.HELLO_OK) + b"\0" * 16,
                p.HEADER.pack(0xFFFFFFF0, p.T.DATA), p.encode(p.T.EOF)]
        out = {"connect_errors": {}, "answers": {}, "junk_sent": 0}
        live, start = [], time.monotonic()
        for i in range(req["count"]):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
            err = s.connect_ex(req["path"])
            if err:
                s.close()
                name = os.strerror(err)
                out["connect_errors"][name] = out["connect_errors"].get(name, 0) + 1
                continue
            if req.get("junk_every") and i % req["junk_every"] == 0:
                try:
                    s.send(junk[(i // req["junk_every"]) % len(junk)], socket.MSG_NOSIGNAL)
                    out["junk_sent"] += 1
                except OSError:
                    pass
            live.append(s)
        out["connect_s"] = time.monotonic() - start
        held = classify(live, req.get("window", 1.0), out["answers"])
        self.flooded += held
        out["held"] = len(held)
        return out

    def op_slow_flood(self, req, fds):
        """One silent connection every `interval` s for `duration` s (a flood under
        the rate limit, held longer than the HELLO timeout). A connection is held
        when it is open and has been silent for `window` s; after every poll
        (every answer and close read first) the held ones are counted. Returns
        the most held at once, what the supervisor answered, and after how long
        it closed the held ones it closed; every connection is closed at the end."""
        import time
        out = {"opened": 0, "connect_errors": {}, "answers": {}, "max_held": 0, "max_held_at_s": None,
               "held_closed_after_s": []}
        live, poller = {}, select.poll()
        start = time.monotonic()
        next_at, end = start, start + req["duration"]
        try:
            while (now := time.monotonic()) < end:
                if now >= next_at:
                    next_at += req["interval"]
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                    err = s.connect_ex(req["path"])
                    out["opened"] += 1
                    if err:
                        s.close()
                        name = os.strerror(err)
                        out["connect_errors"][name] = out["connect_errors"].get(name, 0) + 1
                    else:
                        live[s.fileno()] = (s, now)
                        poller.register(s.fileno(), select.POLLIN)
                wait_s = max(0.0, min(next_at, end) - time.monotonic())
                for fd, _ in poller.poll(min(wait_s, 0.05) * 1000):
                    poller.unregister(fd)
                    s, opened = live.pop(fd)
                    kind = answer_kind(s)
                    out["answers"][kind] = out["answers"].get(kind, 0) + 1
                    if time.monotonic() - opened >= req["window"]:
                        out["held_closed_after_s"].append(round(time.monotonic() - opened, 2))
                    s.close()
                now = time.monotonic()
                held = sum(1 for _, opened in live.values() if now - opened >= req["window"])
                if held > out["max_held"]:
                    out["max_held"], out["max_held_at_s"] = held, round(now - start, 2)
        finally:
            for s, _ in live.values():
                s.close()
        out["still_open_at_end"] = len(live)
        return out

    def op_flood_release(self, req, fds):
        """Close the held flood connections; say how many the supervisor had closed."""
        held, self.flooded = self.flooded, []
        answers = {}
        still = classify(held, 0, answers)
        for s in held:
            s.close()
        return {"released": len(held), "still_open": len(still), "answers": answers}

    def op_run(self, req, fds):
        """Run host programs one after the other, as this unit's user: each
        argv's program by absolute path, stdin /dev/null, the helper's fixed
        environment; each one's exit status (None: killed at its timeout) and
        the first bytes of its output. The suite's forged signals (busctl)."""
        import subprocess
        results = []
        for argv in req["argvs"]:
            if not argv or not argv[0].startswith("/"):
                raise ValueError(f"not a program by absolute path: {argv[:1]}")
            try:
                r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=HELPER_ENV,
                                   timeout=req.get("timeout", 10))
                results.append({"status": r.returncode,
                                "output": (r.stdout + r.stderr)[:RAW_KEPT].decode("utf-8", "replace")})
            except subprocess.TimeoutExpired:
                results.append({"status": None, "output": "timed out"})
        return {"results": results}

    def op_move_mainpid(self, req, fds):
        """Fork a child and tell systemd it is the new MainPID (NotifyAccess=all);
        this process, the authenticated one, stays alive. The child lives until
        this process exits."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        self.keep_child = w
        n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        addr = os.environ["NOTIFY_SOCKET"]
        n.sendto(f"MAINPID={pid}".encode(), "\0" + addr[1:] if addr.startswith("@") else addr)
        n.close()
        return {"child": pid}

    def run(self):
        while True:
            req, fds = self.read_request()
            if req is None:
                return
            op = getattr(self, "op_" + req.get("op", ""), None)
            try:
                if op is None:
                    raise ValueError(f"unknown op {req.get('op')!r}")
                out = op(req, fds)
                if out is not None:
                    self.reply({"ok": True, **out})
            except Exception as e:  # every failure goes back to the suite
                p.close_all(fds)
                self.reply({"ok": False, "error": f"{type(e).__name__}: {e}"})
            if req.get("op") == "exit":
                return


def read_frame(sock, timeout):
    """One frame from the supervisor (bounded), as JSON-safe fields; EOF is None.
    "raw": the first bytes received (hex, at most RAW_KEPT), for the suite's
    judgement of the wire format (protocol.handshake_problem)."""
    sock.settimeout(timeout)
    dec = p.Decoder(p.FROM_SUPERVISOR)
    raw = b""
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, socket.timeout) as e:
            return {"closed": type(e).__name__, "raw": raw.hex()}
        if not data:
            return {"closed": "eof", "raw": raw.hex()}
        raw = (raw + data)[:RAW_KEPT]
        try:
            frames = dec.feed(data)
        except p.ProtocolError as e:
            return {"bad": str(e), "raw": raw.hex()}
        if frames:
            f = frames[0]
            return {"type": f.type, "name": f.name, "payload": f.payload.hex(), "raw": raw.hex()}


def classify(socks, window, answers):
    """Read what the supervisor says on each socket within `window` s:
    answers[first frame name or 'closed'] counts; returns those still silent."""
    import time
    end = time.monotonic() + window
    silent = {s.fileno(): s for s in socks}
    poller = select.poll()  # not select(): a flood goes past FD_SETSIZE
    for fd in silent:
        poller.register(fd, select.POLLIN)
    while silent:
        left = max(0.0, end - time.monotonic())
        ready = poller.poll(left * 1000)
        for fd, _ in ready:
            poller.unregister(fd)
            kind = answer_kind(silent.pop(fd))
            answers[kind] = answers.get(kind, 0) + 1
        if not ready and left == 0:
            break
    return list(silent.values())


def answer_kind(s):
    """What the supervisor said first on a flood connection that became readable:
    "ERROR <code>", "frame 0x<type>", "closed" or the receive error's name."""
    try:
        data, kind = s.recv(256), "closed"
    except OSError as e:
        data, kind = b"", type(e).__name__
    if len(data) >= 7 and data[4] == p.T.ERROR:
        kind = f"ERROR {int.from_bytes(data[5:7], 'big')}"
    elif len(data) >= 5:
        kind = f"frame 0x{data[4]:02x}"
    return kind


PR_SET_DUMPABLE = 4


def main():
    # the suite's stand-in for the runtime, which runs non-dumpable (RUNTIME-1's
    # execute-only binary): not dumpable either, so that no other process of the
    # user, a session's included, reaches its descriptors or root through /proc
    # (ISO-1, UNIT-7); what it execs (the helper) decides for itself
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # SIGPIPE stays ignored (Python's own setting): a write to a connection the
    # supervisor already closed (a rate-limited flood) is an error reported to
    # the suite, never the agent's death; what it execs gets the default back
    ctrl = socket.socket(fileno=os.dup(0))
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    Agent(ctrl).run()


if __name__ == "__main__":
    main()
