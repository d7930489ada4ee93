"""Throwaway peer for exercising the reference supervisor (not the suite).

Runs as MainPID of a transient opencode-v2.service (User=byk), acts as the
peer: connects, HELLO, spawns the helper with fd 3 = dup of the socket and
fd 4 = an O_DIRECTORY cwd. Prints one JSON line per scenario.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import time

SOCK = '/run/opencode-pty/supervisor.sock'
CLIENT = '/usr/local/libexec/opencode-pty-client'


def frame(t, p=b''):
    return struct.pack('>IB', len(p), t) + p


def recv_frame(s, timeout=10):
    s.settimeout(timeout)
    h = b''
    while len(h) < 5:
        d = s.recv(5 - len(h))
        if not d:
            return None
        h += d
    n, t = struct.unpack('>IB', h)
    p = b''
    while len(p) < n:
        d = s.recv(n - len(p))
        if not d:
            return None
        p += d
    return t, p


def hello():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SOCK)
    s.sendall(frame(1))
    return s, recv_frame(s)


def spawn(s, argv, cwd='/tmp', extra=()):
    d = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY)
    a = os.dup(s.fileno())
    b = os.dup(d)
    while a < 5 or b < 5:
        a2, b2 = os.dup(a), os.dup(b)
        a, b = a2, b2
    r0, w0 = os.pipe()
    r1, w1 = os.pipe()
    fa = [(os.POSIX_SPAWN_DUP2, r0, 0), (os.POSIX_SPAWN_DUP2, w1, 1),
          (os.POSIX_SPAWN_DUP2, a, 3), (os.POSIX_SPAWN_DUP2, b, 4)]
    pid = os.posix_spawn(CLIENT, [CLIENT, *extra, '--', *argv], {'PATH': '/usr/bin:/bin'}, file_actions=fa)
    for fd in (r0, w1, a, b, d):
        os.close(fd)
    return pid, os.fdopen(w0, 'wb', buffering=0), os.fdopen(r1, 'rb', buffering=0)


def session(argv, stdin=b'', cwd='/tmp', extra=(), close_stdin=True, sig_after=None):
    t0 = time.monotonic()
    s, r = hello()
    t_hello = time.monotonic() - t0
    if r is None or r[0] != 0x81:
        return {'hello': repr(r)}
    pid, w, rd = spawn(s, argv, cwd, extra)
    s.close()
    if stdin:
        w.write(stdin)
    if close_stdin:
        w.close()
    if sig_after is not None:
        time.sleep(sig_after)
        os.kill(pid, 15)
    out = rd.read()
    _, st = os.waitpid(pid, 0)
    if not close_stdin:
        w.close()
    return {'inv': r[1].hex(), 'hello_ms': round(t_hello * 1000, 1), 'exit': os.waitstatus_to_exitcode(st),
            'out': out.decode(errors='replace'), 'ms': round((time.monotonic() - t0) * 1000, 1)}


def raw_start(payload, fds=None, t=2):
    s, r = hello()
    if r[0] != 0x81:
        return repr(r)
    msg = frame(t, payload)
    if fds is None:
        s.sendall(msg)
    else:
        s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('%di' % len(fds), *fds))])
    r = recv_frame(s)
    if r and r[0] == 0x85:
        return ('ERROR', struct.unpack('>H', r[1][:2])[0], r[1][2:].decode())
    return repr(r)


def start_payload(argv, runtime=60, rows=24, cols=80):
    p = struct.pack('>IHHH', runtime, rows, cols, len(argv))
    for a in argv:
        a = a if isinstance(a, bytes) else a.encode()
        p += struct.pack('>I', len(a)) + a
    return p


def out(name, **kw):
    print(json.dumps({'scenario': name, **kw}), flush=True)


def main():
    which = sys.argv[1:] or ['basic']
    inv = os.environ.get('INVOCATION_ID')
    if 'basic' in which:
        r = session(['/bin/sh', '-c', 'stty size'], extra=['--rows', '33', '--cols', '101'])
        out('winsize', ok='33 101' in r.get('out', ''), **r)
        r = session(['/bin/echo', 'hello', 'world'])
        out('echo', ok=r.get('exit') == 0 and 'hello world' in r.get('out', '') and r.get('inv') == inv, **r)
        r = session(['/bin/sh', '-c', 'exit 3'])
        out('exit3', ok=r.get('exit') == 3, **r)
        r = session(['/usr/bin/printf', '[%s]\\n', 'a b', '"q\'', '$x;|&*', 'new\nline', ''])
        out('argv', ok='[a b]' in r['out'] and '[$x;|&*]' in r['out'] and '[]' in r['out'], **r)
        r = session(['cat'], stdin=b'abc\n')
        out('cat', ok=r.get('exit') == 0 and r['out'].count('abc') >= 1, **r)
        r = session(['/bin/pwd'], cwd='/home/byk')
        out('cwd', ok='/home/byk' in r['out'], **r)
        r = session(['/bin/sh', '-c', 'kill -TERM $$'])
        out('signal', **r)
        r = session(['/usr/bin/env'])
        out('env', **r)
        r = session(['/bin/sh', '-c', 'id; cat /proc/self/status | grep -E "^(Cap|NoNewPrivs|Groups)"; ls /run/opencode-pty /run/dbus 2>&1; echo tty=$(tty)'])
        out('sandbox', **r)
        r = session(['/bin/sleep', '30'], close_stdin=False, sig_after=0.5)
        out('stop', **r)
        r = session(['/bin/sleep', '30'], extra=['--runtime', '1'])
        out('runtime', **r)
        r = session(['/bin/sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" x; echo'])
        out('bigout', ok=r['out'].count('x') == 100000, n=r['out'].count('x'), exit=r['exit'], ms=r['ms'])
    if 'hold' in which:
        r = session(['/bin/sleep', '60'], close_stdin=False)
        out('hold', **r)
    if 'resize' in which:
        s, r = hello()
        d = os.open('/tmp', os.O_RDONLY | os.O_DIRECTORY)
        pl = start_payload(['sh', '-c', 'stty size; read x; stty size'], rows=33, cols=101)
        s.sendmsg([frame(2, pl)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('i', d))])
        got = [recv_frame(s)]
        buf = b''
        while b'\r\n' not in buf:
            t, pp = recv_frame(s)
            buf += pp
        s.sendall(frame(5, struct.pack('>HH', 50, 132)) + frame(3, b'go\n') + frame(4))
        while True:
            f = recv_frame(s)
            if f is None or f[0] != 0x83:
                got.append(f)
                break
            buf += f[1]
        out('resize', ok=b'50 132' in buf, out=buf.decode(), frames=repr(got))
    if 'proto' in which:
        d = os.open('/tmp', os.O_RDONLY | os.O_DIRECTORY)
        f = os.open('/etc/hostname', os.O_RDONLY)
        p = start_payload(['/bin/true'])
        out('no-fd', r=raw_start(p))
        out('two-fds', r=raw_start(p, [d, d]))
        out('file-fd', r=raw_start(p, [f]))
        out('unknown-type', r=raw_start(b'', [d], t=0x10))
        out('wrong-dir', r=raw_start(b'', [d], t=0x81))
        out('data-first', r=raw_start(b'xx', None, t=3))
        out('oversize', r=raw_start(b'\0' * 32769, None, t=3))
        out('bad-utf8', r=raw_start(start_payload([b'/bin/\xff']), [d]))
        out('nul', r=raw_start(start_payload([b'/bin/t\0rue']), [d]))
        out('mismatch', r=raw_start(start_payload(['/bin/true'])[:-1], [d]))
        out('runtime0', r=raw_start(start_payload(['/bin/true'], runtime=0), [d]))
        out('runtime3601', r=raw_start(start_payload(['/bin/true'], runtime=3601), [d]))
        out('args129', r=raw_start(start_payload(['/bin/true'] + ['x'] * 129), [d]))
        out('arg16385', r=raw_start(start_payload(['/bin/true', 'x' * 16385]), [d]))
        out('cmd4097', r=raw_start(start_payload(['/' + 'x' * 4096]), [d]))
        out('agg65537', r=raw_start(start_payload(['/bin/true'] + ['x' * 16384] * 4 + ['x']), [d]))
        big = ['-c', 'echo $#', 'sh'] + ['y' * 16384] * 3 + ['y' * (16384 - 11)] + [''] * 121
        assert len(big) == 128 and sum(map(len, big)) == 65536
        r = session(['/bin/sh'] + big, extra=['--runtime', '3600'])
        out('at-limits', ok=r.get('exit') == 0, exit=r.get('exit'), out=r.get('out', '')[:50], ms=r.get('ms'))
        # a child of the peer (not MainPID) connecting
        c = subprocess.run([sys.executable, '-c', f'''
import socket,struct
s=socket.socket(socket.AF_UNIX);s.connect({SOCK!r});s.sendall(struct.pack(">IB",0,1))
print(s.recv(200))'''], capture_output=True, text=True)
        out('not-mainpid', r=c.stdout.strip(), err=c.stderr[-200:])
    if 'flood' in which:
        d = os.open('/tmp', os.O_RDONLY | os.O_DIRECTORY)
        out('ctrunc', r=raw_start(start_payload(['/bin/true']), [d] * 20))
        code = f'''
import socket,struct,time,sys
socks=[];rej=0
for i in range(60):
    s=socket.socket(socket.AF_UNIX);s.connect({SOCK!r});socks.append(s)
time.sleep(0.3)
for s in socks:
    s.setblocking(False)
    try:
        d=s.recv(100)
        if d[4:5]==b"\\x85" and d[5:7]==b"\\x00\\x06": rej+=1
    except BlockingIOError: pass
print(rej, flush=True)
sys.stdin.read()
'''
        fl = subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        rej = fl.stdout.readline().strip()
        r = session(['/bin/echo', 'during-flood'])
        out('flood', rejected_of_60=rej, mainpid_during_flood=r.get('exit'), out=r.get('out'))
        fl.stdin.close(); fl.wait()
        time.sleep(0.1)
        c = subprocess.run([sys.executable, '-c', f'''
import socket,struct
s=socket.socket(socket.AF_UNIX);s.connect({SOCK!r});s.sendall(struct.pack(">IB",0,1))
print(s.recv(200))'''], capture_output=True, text=True)
        out('after-flood-nonpeer', r=c.stdout.strip())
    if 'capacity' in which:
        held = []
        t0 = time.monotonic()
        for i in range(16):
            s, r = hello()
            pid, w, rd = spawn(s, ['/bin/sleep', '60'])
            s.close()
            held.append((pid, w, rd))
        # wait for 16 STARTED: approximate by the 17th HELLO result
        s, r = hello()
        out('17th', r=repr(r)[:120], ms=round((time.monotonic() - t0) * 1000))
        s.close()
        t1 = time.monotonic()
        for pid, w, rd in held:
            os.kill(pid, 15)
        codes = []
        for pid, w, rd in held:
            rd.read()
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        out('16-stop', codes=codes, ms=round((time.monotonic() - t1) * 1000))
        r = session(['/bin/true'])
        out('after-capacity', ok=r.get('exit') == 0, **r)


main()
