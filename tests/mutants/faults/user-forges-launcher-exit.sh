# The launcher accepts non-canonical base64 (faults/launcher-lenient.sh), and a watcher of the
# service user's (issue 37, the audit of what the suite believes): PROTO-4
# runs the installed launcher directly as the service user, an ordinary dumpable program of
# the user's. The watcher attaches to every such run (the launcher outside a session unit)
# and turns its next system call into exit_group(1), so a lenient launcher would look as if it
# refused its non-canonical arguments. The suite's runs of it are behind its gate, traced by
# root from their first instruction: the attach is refused (TRIED), or a run it changed is
# no answer. The after-suite check requires an attempt (TRIED or FORGED).
set -eu
. /opt/dev-script-0/common.sh  # user_watcher, rebuild
# the defect: faults/launcher-lenient.sh's
rebuild launcher cmd/launcher/main.go "	if base64.RawURLEncoding.EncodeToString(raw) != s[1:] {" "	if false {" "	if !argPattern.MatchString(s) {" "	s = strings.TrimRight(s, \"=\")
	if !argPattern.MatchString(s) {"
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/watcher.py <<'PY'
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
SEIZE, INTERRUPT, SYSCALL, GETREGS, SETREGS, DETACH = 0x4206, 0x4207, 24, 12, 13, 17
WALL = 0x40000000
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
        "fs_base gs_base ds es fs gs").split()]
log = open(sys.argv[1], 'a', buffering=1)
log.write(f"STARTED uid {os.getuid()}\n")
me, done = os.getuid(), set()
def forge(pid):
    if libc.ptrace(SEIZE, pid, None, ctypes.c_void_p(1)) != 0:
        log.write(f"TRIED {pid}: seize failed errno {ctypes.get_errno()}\n"); return
    libc.ptrace(INTERRUPT, pid, None, None)
    for _ in range(1000):
        try:
            _, st = os.waitpid(pid, WALL)
        except ChildProcessError:
            return
        if not os.WIFSTOPPED(st):
            return
        if os.WSTOPSIG(st) == 0x85:  # a system call's entry: made exit_group(1)
            r = Regs(); libc.ptrace(GETREGS, pid, None, ctypes.byref(r))
            r.orig_rax, r.rdi = 231, 1
            libc.ptrace(SETREGS, pid, None, ctypes.byref(r))
            log.write(f"FORGED {pid}: its next system call made exit_group(1)\n")
            libc.ptrace(DETACH, pid, None, None)
            return
        libc.ptrace(SYSCALL, pid, None, None)
while True:
    for d in os.listdir('/proc'):
        if not d.isdigit() or d in done:
            continue
        try:
            if os.stat('/proc/' + d).st_uid != me:
                continue
            cmd = open('/proc/' + d + '/cmdline', 'rb').read()
            group = open('/proc/' + d + '/cgroup', 'rb').read()
        except OSError:
            continue
        if cmd.startswith(b'/usr/local/libexec/opencode-pty-launcher\0') and b'/opencode-pty-' not in group:
            done.add(d)
            forge(int(d))
    time.sleep(0.001)
PY
user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/watcher.py /var/lib/pty-fault/watcher.log
echo "FAULT: byk makes the launcher's direct runs exit 1 by ptrace" >&2
