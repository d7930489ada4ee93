# A watcher of the service user's (issue 37, the audit of what the suite believes): a
# session's launcher is an ordinary dumpable process of the user's, so the watcher attaches
# to it before it exec's the session's command, follows every fork and exec (a tracer keeps
# its hold across an exec, even into a program the user cannot read), and makes every
# unshare() the session's processes call return EPERM, while the supervisor switch
# omit-prop:RestrictNamespaces lets sessions create namespaces: UNIT-5's probe would say
# "refused". The suite's probe is admitted only untraced (session_probe.py), so the watcher's
# hold on it is the failure. HELD is logged once a process it holds exec's the probe's
# interpreter; FORGED for each changed unshare(); the after-suite check requires HELD.
set -eu
. /opt/dev-script-0/common.sh  # user_watcher, ptrace_lib
ptrace_lib
cat > /usr/local/lib/pty-fault/watcher.py <<'PY'
import ctypes, os, sys, time
sys.path.insert(0, "/usr/local/lib/pty-fault")
from ptracelib import DETACH, ENOSYS, GETREGS, INTERRUPT, SEIZE, SETREGS, SYSCALL, WALL, WNOHANG, Regs, libc, log  # noqa
# TRACESYSGOOD | TRACEFORK | TRACEVFORK | TRACECLONE | TRACEEXEC
OPTIONS = 0x1 | 0x2 | 0x4 | 0x8 | 0x10
EPERM = (1 << 64) - 1
EVENT_EXEC = 4
me, done, held = os.getuid(), set(), set()

def session_launcher(d):
    try:
        if os.stat('/proc/' + d).st_uid != me:
            return False
        cmd = open('/proc/' + d + '/cmdline', 'rb').read()
        group = open('/proc/' + d + '/cgroup', 'rb').read()
    except OSError:
        return False
    return cmd.startswith(b'/usr/local/libexec/opencode-pty-launcher\0') and b'/opencode-pty-' in group

def step(pid, st):
    sig, deliver = os.WSTOPSIG(st), 0
    if sig == 0x85:
        r = Regs(); libc.ptrace(GETREGS, pid, None, ctypes.byref(r))
        if r.orig_rax == 272 and r.rax != ENOSYS:  # unshare, at its exit
            log.write(f"FORGED {pid}: unshare returned {ctypes.c_longlong(r.rax).value}, made EPERM\n")
            r.rax = EPERM
            libc.ptrace(SETREGS, pid, None, ctypes.byref(r))
    elif (st >> 16) == EVENT_EXEC:
        try:
            exe = os.readlink(f'/proc/{pid}/exe')
        except OSError as e:
            exe = f'? ({e.strerror})'
        try:  # its exe is root's to read once it runs what the user cannot read; its cmdline is not
            arg0 = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')[0].decode('utf-8', 'replace')
        except OSError as e:
            arg0 = f'? ({e.strerror})'
        log.write(f"EXEC {pid}: {exe} {arg0}\n")
        if 'pty-acceptance-probe-' in arg0:
            log.write(f"HELD {pid}: traced through its exec into {arg0}\n")
    elif (st >> 16) == 0 and sig != 19:  # a signal to deliver (not the new child's SIGSTOP)
        deliver = sig
    libc.ptrace(SYSCALL, pid, None, ctypes.c_void_p(deliver))

while True:
    for d in os.listdir('/proc'):
        if d.isdigit() and d not in done and session_launcher(d):
            done.add(d)
            if libc.ptrace(SEIZE, int(d), None, ctypes.c_void_p(OPTIONS)) != 0:
                log.write(f"TRIED {d}: seize failed errno {ctypes.get_errno()}\n")
            else:
                log.write(f"SEIZED {d}\n")
                libc.ptrace(0x4207, int(d), None, None)  # INTERRUPT: the first stop, to start tracing syscalls
    while True:
        try:
            pid, st = os.waitpid(-1, WALL | WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if os.WIFSTOPPED(st):
            step(pid, st)
    time.sleep(0.001)
PY
user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/watcher.py /var/lib/pty-fault/watcher.log
echo "FAULT: byk traces every session's launcher through its exec and makes unshare() return EPERM" >&2
