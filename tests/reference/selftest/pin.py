"""PEER-4: HELLO by the real MainPID, connection handed to root, peer exits
(its unit ends), then START on the pinned connection must fail with AUTH."""
import array, os, socket, struct, subprocess, sys

SOCK = '/run/opencode-pty/supervisor.sock'
if sys.argv[1:] == ['peer']:
    s = socket.socket(socket.AF_UNIX)
    s.connect(SOCK)
    s.sendall(struct.pack('>IB', 0, 1))
    h = s.recv(21)
    u = socket.socket(socket.AF_UNIX)
    u.connect('/run/ptyacc-pin.sock')
    u.sendmsg([h[4:5]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('i', s.fileno()))])
    sys.exit(0)

ls = socket.socket(socket.AF_UNIX)
try:
    os.unlink('/run/ptyacc-pin.sock')
except FileNotFoundError:
    pass
ls.bind('/run/ptyacc-pin.sock')
os.chmod('/run/ptyacc-pin.sock', 0o777)
ls.listen(1)
p = subprocess.Popen(['systemd-run', '--unit=opencode-v2.service', '-p', 'User=byk', '-p', 'Group=byk',
                      '--wait', '--quiet', '--collect', '/usr/bin/python3', os.path.abspath(__file__), 'peer'])
c, _ = ls.accept()
msg, anc, _, _ = c.recvmsg(10, socket.CMSG_SPACE(4))
fd = array.array('i', anc[0][2][:4])[0]
p.wait()
print('hello answer type', msg.hex(), 'peer unit exited rc', p.returncode)
s = socket.socket(fileno=fd)
d = os.open('/tmp', os.O_RDONLY | os.O_DIRECTORY)
pl = struct.pack('>IHHH', 30, 24, 80, 1) + struct.pack('>I', 9) + b'/bin/true'
s.sendmsg([struct.pack('>IB', len(pl), 2) + pl], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('i', d))])
s.settimeout(10)
r = s.recv(300)
print('START after peer exit ->', r[4:5].hex(), r[5:7].hex(), r[7:].decode(errors='replace'))
