"""Drive bin/opencode-pty-client against a fake supervisor on a socketpair
(no systemd needed): START + exactly one SCM_RIGHTS fd, 65,536-byte write ->
two DATA frames, EOF, STOP on SIGTERM, EXIT/ERROR exit codes.
    python3 local_client.py /path/to/opencode-pty-client [strace]"""
import array, os, signal, socket, struct, subprocess, sys, time

client = sys.argv[1]
use_strace = 'strace' in sys.argv[2:]


def rf(s):
    h = b''
    while len(h) < 5:
        d = s.recv(5 - len(h))
        assert d, 'eof'
        h += d
    n, t = struct.unpack('>IB', h)
    p = b''
    while len(p) < n:
        p += s.recv(n - len(p))
    return t, p


def run(final, stdin_data=b'', sig=False):
    a, b = socket.socketpair()
    d = os.open('/tmp', os.O_RDONLY | os.O_DIRECTORY)
    argv = [client, '--runtime', '7', '--rows', '30', '--cols', '100', '--', 'cmd', 'a b', '']
    if use_strace:
        argv = ['strace', '-f', '-qq', '-e', 'trace=connect,open,openat,socket,execve', '-o', '/tmp/client.strace'] + argv
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         pass_fds=(3, 4), preexec_fn=lambda: (os.dup2(b.fileno(), 3), os.dup2(d, 4)))
    b.close(); os.close(d)
    msg, anc, flags, _ = a.recvmsg(5, socket.CMSG_SPACE(4 * 4))
    fds = array.array('i'); [fds.frombytes(x[2]) for x in anc]
    n, t = struct.unpack('>IB', msg)
    body = b''
    while len(body) < n:
        body += a.recv(n - len(body))
    res = {'start_type': t, 'nfds': len(fds), 'ctrunc': bool(flags & socket.MSG_CTRUNC),
           'hdr': struct.unpack_from('>IHHH', body), 'isdir': os.path.isdir(f'/proc/self/fd/{fds[0]}')}
    for f in fds:
        os.close(f)
    a.sendall(struct.pack('>IB', 4, 0x82) + b'unit')
    sizes = []
    if stdin_data:
        p.stdin.write(stdin_data); p.stdin.flush()
        got = 0
        while got < len(stdin_data):
            t, pl = rf(a); assert t == 3, t
            sizes.append(len(pl)); got += len(pl)
    if sig:
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        res['after_sigterm'] = rf(a)[0]
    p.stdin.close()
    t, pl = rf(a)
    res['after_stdin_close'] = t
    a.sendall(struct.pack('>IB', 3, 0x83) + b'out')
    a.sendall(final)
    p.stdin = None
    out, err = p.communicate(timeout=5)
    res.update(sizes=sizes, out=out, err=err.decode().strip(), rc=p.returncode)
    return res


print(run(struct.pack('>IBii', 8, 0x84, 3, 0), b'x' * 65536))
print(run(struct.pack('>IBii', 8, 0x84, 0, 9), sig=True))
print(run(struct.pack('>IBH', 6, 0x85, 4) + b'full'))
