# A watcher of the service user's (a blind red team's round eight, issue 37): ISO-2's
# probe was an ordinary python3 of the user's in a live session, so the watcher attached
# to it with ptrace and made its connect() to 127.0.0.1 return 0 ("connected") while the
# session has a network of its own (the supervisor switch session-private-network). The
# probe now runs the suite's execute-only Python (not dumpable: the attach is refused,
# logged TRIED) and the session's network namespace is read by root from outside. Every
# forged call is logged (FORGED); the after-suite check requires an attempt (TRIED or FORGED).
set -eu
. /opt/dev-script-0/common.sh  # user_watcher, ptrace_lib
ptrace_lib
cat > /usr/local/lib/pty-fault/watcher.py <<'PY'
# as the service user: ISO-2's probe (its code, create_connection and answer(out), in its command line)
# is traced; its connect() to 127.0.0.1 is made to return 0 ("connected")
import ctypes, os, sys, time
sys.path.insert(0, "/usr/local/lib/pty-fault")
from ptracelib import DETACH, ENOSYS, GETREGS, INTERRUPT, SEIZE, SETREGS, SYSCALL, WALL, WNOHANG, Regs, libc, log  # noqa
me = os.getuid()
def forge(pid):
    if libc.ptrace(SEIZE, pid, None, ctypes.c_void_p(1)) != 0:
        log.write(f"TRIED {pid}: seize failed errno {ctypes.get_errno()}\n"); return
    libc.ptrace(INTERRUPT, pid, None, None)
    for _ in range(100000):
        try:
            _, st = os.waitpid(pid, WALL)
        except ChildProcessError:
            log.write(f"{pid}: gone\n"); return
        if os.WIFEXITED(st) or os.WIFSIGNALED(st):
            log.write(f"{pid}: ended {st:#x}\n"); return
        sig, deliver = os.WSTOPSIG(st), 0
        if sig == 0x85:
            r = Regs(); libc.ptrace(GETREGS, pid, None, ctypes.byref(r))
            if r.orig_rax == 42 and r.rax != ENOSYS:  # connect, at its exit
                log.write(f"FORGED {pid}: connect returned {ctypes.c_longlong(r.rax).value}, made 0\n")
                r.rax = 0
                libc.ptrace(SETREGS, pid, None, ctypes.byref(r))
                libc.ptrace(DETACH, pid, None, None)
                return
        elif (st >> 16) == 0:
            deliver = sig
        libc.ptrace(SYSCALL, pid, None, ctypes.c_void_p(deliver))
done = set()
while True:
    for d in os.listdir('/proc'):
        if not d.isdigit() or d in done:
            continue
        try:
            if os.stat('/proc/' + d).st_uid != me:
                continue
            cmd = open('/proc/' + d + '/cmdline', 'rb').read()
        except OSError:
            continue
        if b'create_connection' in cmd and b'answer(out)' in cmd and \
                os.path.basename(cmd.split(b'\0')[0]).startswith(b'python3'):
            done.add(d)
            log.write(f"{d}: {cmd[:60]!r}\n")
            forge(int(d))
    time.sleep(0.001)
PY
user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/watcher.py /var/lib/pty-fault/watcher.log
echo "FAULT: byk makes ISO-2's probe's connect() return 0 by ptrace" >&2
