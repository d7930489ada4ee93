"""The plugin smoke harness's isolated disposable supervisor (reference
deployment, fixture code): the supervisor side of the wire format
(TARGET-CONTRACT section 4) on a socket of its own, for an unprivileged run.

    python3 -I smoke-supervisor.py SOCKET

It authenticates nobody (it serves only its own 0700 directory), takes the
working directory from START's one SCM_RIGHTS descriptor (exactly one, a
directory, no MSG_CTRUNC, else ERROR PROTOCOL), runs the command in its own
process group on pipes (no systemd, no PTY), relays DATA in frames of at most
32,768 bytes, ends a session on STOP, disconnect or its runtime (SIGTERM to
the group, SIGKILL 2 s later) and reports EXIT. Prints READY once listening;
on SIGTERM or end of stdin it stops every session and prints
`live=<sessions still running>` last.
"""
import os, signal, socket, stat, struct, subprocess, sys, threading

HELLO, START, DATA, EOF, RESIZE, STOP = 1, 2, 3, 4, 5, 6
HELLO_OK, STARTED, DATA_OUT, EXIT, ERROR = 0x81, 0x82, 0x83, 0x84, 0x85
PROTOCOL, LIMIT = 2, 3
BOUNDS = {HELLO: (0, 0), START: (10, 70158), DATA: (0, 32768), EOF: (0, 0), RESIZE: (4, 4), STOP: (0, 0)}
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "TERM": "xterm-256color", "LANG": "C.UTF-8"}
KILL_AFTER_S = 2.0
sessions, lock = set(), threading.Lock()


class Bad(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def frame(t, p=b""):
    return struct.pack(">IB", len(p), t) + p


def recv_exact(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b


def header(c, fds=None):
    if fds is None:
        h = recv_exact(c, 5)
    else:  # START: the descriptor rides on its first byte
        h, anc, flags, _ = c.recvmsg(5, socket.CMSG_SPACE(4 * 4), socket.MSG_CMSG_CLOEXEC)
        if not h:
            raise EOFError
        for lvl, typ, data in anc:
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) // 4 * 4]))
        if flags & socket.MSG_CTRUNC:
            raise Bad(PROTOCOL, "MSG_CTRUNC")
        h += recv_exact(c, 5 - len(h))
    n, t = struct.unpack(">IB", h)
    if t not in BOUNDS:
        raise Bad(PROTOCOL, f"unknown or wrong-direction type 0x{t:x}")
    lo, hi = BOUNDS[t]
    if not lo <= n <= hi:
        raise Bad(PROTOCOL, f"type 0x{t:x} length {n} outside [{lo}, {hi}]")
    return t, recv_exact(c, n) if n else b""


def parse_start(p):
    runtime, rows, cols, argc = struct.unpack(">IHHH", p[:10])
    off, argv, agg = 10, [], 0
    for _ in range(argc):
        if off + 4 > len(p):
            raise Bad(PROTOCOL, "argc disagrees with the payload")
        (n,) = struct.unpack(">I", p[off:off + 4])
        s = p[off + 4:off + 4 + n]
        if len(s) != n:
            raise Bad(PROTOCOL, "length disagrees with the payload")
        if b"\0" in s:
            raise Bad(PROTOCOL, "NUL")
        try:
            argv.append(s.decode("utf-8"))
        except UnicodeDecodeError:
            raise Bad(PROTOCOL, "invalid UTF-8") from None
        agg += n if argv[1:] else 0
        off += 4 + n
    if off != len(p):
        raise Bad(PROTOCOL, "trailing bytes")
    if not argv or len(argv[0].encode()) > 4096 or len(argv) > 129 or agg > 65536 \
            or any(len(a.encode()) > 16384 for a in argv[1:]) or not 0 < runtime <= 3600:
        raise Bad(LIMIT, "over a limit")
    return runtime, argv


class Session:
    def __init__(self, conn, argv, dirfd, runtime):
        self.conn, self.wlock, self.stopped = conn, threading.Lock(), threading.Event()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, cwd=f"/proc/self/fd/{dirfd}",
                                     env=ENV, start_new_session=True, close_fds=True)
        self.timer = threading.Timer(runtime, self.stop)
        self.timer.daemon = True
        self.timer.start()

    def send(self, t, p=b""):
        with self.wlock:
            self.conn.sendall(frame(t, p))

    def stop(self):
        if self.stopped.is_set():
            return
        self.stopped.set()
        for sig, wait in ((signal.SIGTERM, KILL_AFTER_S), (signal.SIGKILL, None)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                pass

    def pump_out(self):
        try:
            while chunk := self.proc.stdout.read1(32768):
                self.send(DATA_OUT, chunk)
        except OSError:
            pass
        rc = self.proc.wait()
        self.timer.cancel()
        try:
            self.send(EXIT, struct.pack(">ii", rc if rc >= 0 else 0, -rc if rc < 0 else 0))
        except OSError:
            pass


def serve(c):
    s = None
    try:
        t, _ = header(c)
        if t != HELLO:
            raise Bad(PROTOCOL, "expected HELLO")
        c.sendall(frame(HELLO_OK, os.urandom(16)))
        fds = []
        try:
            t, p = header(c, fds)
            if t != START:
                raise Bad(PROTOCOL, "expected START")
            if len(fds) != 1 or not stat.S_ISDIR(os.fstat(fds[0]).st_mode):
                raise Bad(PROTOCOL, f"START must carry exactly one directory, carried {len(fds)} descriptors")
            runtime, argv = parse_start(p)
            try:
                s = Session(c, argv, fds[0], runtime)
            except OSError as e:
                c.sendall(frame(ERROR, struct.pack(">H", 5) + str(e).encode()[:200]))
                return
        finally:
            for fd in fds:
                os.close(fd)
        with lock:
            sessions.add(s)
        s.send(STARTED, b"opencode-pty-" + os.urandom(16).hex().encode() + b".service")
        out = threading.Thread(target=s.pump_out, daemon=True)
        out.start()
        while True:
            t, p = header(c)
            if t == DATA:
                if s.proc.stdin.closed:
                    raise Bad(PROTOCOL, "DATA after EOF")
                try:
                    s.proc.stdin.write(p)
                    s.proc.stdin.flush()
                except BrokenPipeError:
                    pass
            elif t == EOF:
                s.proc.stdin.close()
            elif t == STOP:
                s.stop()
            elif t != RESIZE:
                raise Bad(PROTOCOL, f"unexpected type 0x{t:x}")
    except Bad as e:
        try:
            c.sendall(frame(ERROR, struct.pack(">H", e.code) + str(e).encode()))
        except OSError:
            pass
    except (EOFError, OSError):
        pass
    finally:
        if s:
            s.stop()  # disconnect, protocol error: the session ends
            s.proc.wait()
            with lock:
                sessions.discard(s)
        c.close()


def shutdown(*_):
    with lock:
        live = list(sessions)
    for s in live:
        s.stop()
    alive = sum(1 for s in live if s.proc.poll() is None)
    print(f"live={alive}", flush=True)
    os._exit(0)


def main():
    path = sys.argv[1]
    os.umask(0o077)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    signal.signal(signal.SIGTERM, shutdown)
    threading.Thread(target=lambda: (sys.stdin.read(), shutdown()), daemon=True).start()
    print("READY", flush=True)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
