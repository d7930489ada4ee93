systemd-run --quiet --no-block --unit=opencode-v2.service -p User=byk -p Group=byk \
  -p StandardOutput=file:/run/hold.out /usr/bin/python3 /opt/pty-acceptance/src/tests/reference/selftest/peer.py hold
for i in $(seq 100); do U=$(systemctl list-units --no-legend 'opencode-pty-*' | grep -o 'opencode-pty-[0-9a-f]\{32\}.service'); [ -n "$U" ] && break; sleep 0.05; done
sleep 0.5
CG=$(systemctl show -p ControlGroup --value $U)
grep Seccomp /proc/self/status
python3 - "$CG" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for pid in map(int, open('/sys/fs/cgroup' + sys.argv[1] + '/cgroup.procs').read().split()):
    pfd = os.pidfd_open(pid)
    fd = libc.syscall(438, pfd, 0, 0)
    print(pid, open(f'/proc/{pid}/comm').read().strip(), 'pidfd_getfd', fd, os.strerror(ctypes.get_errno()) if fd < 0 else os.isatty(fd))
    try:
        f = os.open(f'/proc/{pid}/fd/0', os.O_RDWR | os.O_NOCTTY)
        print('  open /proc/pid/fd/0 ok isatty', os.isatty(f))
    except OSError as e:
        print('  open /proc/pid/fd/0', e)
PY
systemctl stop $U
