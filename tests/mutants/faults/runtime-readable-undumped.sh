# The runtime binary made readable (0755: the defect), the candidate restarted:
# the kernel makes it dumpable at exec. Then the service user, alone, attaches
# to it (same uid, no Yama: allowed for a dumpable process) and has it run
# prctl(PR_SET_DUMPABLE, 0) once, its registers put back after: a process of
# the user's could have done anything else the same way, yet the candidate
# now refuses every probe of ISO-1 as an execute-only runtime's would (a red
# team's round five did it with a preload's native library; this is the same
# view, reached from outside). Only the binary's own mode says it; with
# PTY_FAULT_CHMOD_BACK=1 the binary is 0711 again afterwards (a red team's
# round six), and only its ctime against the candidate's start says it.
set -eu
. /opt/dev-script-0/common.sh  # RUNTIME, wait_port
chmod 0755 "$RUNTIME"
systemctl restart opencode-v2-preview.service
wait_port 14102
pid=$(systemctl show -P MainPID opencode-v2-preview.service)
[ "$(stat -c %U "/proc/$pid/fd")" = byk ] || { echo "FAULT: the candidate ($pid) is not dumpable" >&2; exit 1; }
echo "FAULT: the runtime binary is readable (0755); the candidate ($pid) is dumpable" >&2
runuser -u byk -- sh -c 'cat >"$1"' sh /home/byk/.undump.py <<'PY'
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
ATTACH, DETACH, GETREGS, SETREGS, STEP, PEEK = 16, 17, 12, 13, 9, 1
NAMES = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
         "fs_base gs_base ds es fs gs").split()
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in NAMES]
def call(req, pid, addr=None, data=None):
    ctypes.set_errno(0)
    r = libc.ptrace(req, pid, addr, data)
    if r == -1 and ctypes.get_errno():
        raise OSError(ctypes.get_errno(), f"ptrace {req}: {os.strerror(ctypes.get_errno())}")
    return r
pid = int(sys.argv[1])
for attempt in range(200):  # until it stops right after a syscall instruction (its loop's epoll_wait)
    call(ATTACH, pid)
    os.waitpid(pid, 0)
    regs = Regs()
    call(GETREGS, pid, None, ctypes.byref(regs))
    if call(PEEK, pid, ctypes.c_void_p(regs.rip - 2)) & 0xffff == 0x050f:
        break
    call(DETACH, pid, None, None)
    time.sleep(0.01)
else:
    sys.exit("never stopped after a syscall instruction")
saved = Regs.from_buffer_copy(regs)
regs.rip, regs.rax, regs.rdi, regs.rsi, regs.orig_rax = saved.rip - 2, 157, 4, 0, (1 << 64) - 1
call(SETREGS, pid, None, ctypes.byref(regs))
call(STEP, pid, None, None)
os.waitpid(pid, 0)
done = Regs()
call(GETREGS, pid, None, ctypes.byref(done))
call(SETREGS, pid, None, ctypes.byref(saved))
call(DETACH, pid, None, None)
print(f"prctl(PR_SET_DUMPABLE, 0) in {pid}: {ctypes.c_longlong(done.rax).value}")
PY
runuser -u byk -- python3 -I /home/byk/.undump.py "$pid" >&2
[ "$(stat -c %U "/proc/$pid/fd")" = root ] || { echo "FAULT: the candidate ($pid) is still dumpable" >&2; exit 1; }
wait_port 14102
echo "FAULT: byk made the candidate ($pid) not dumpable from outside; it still serves" >&2
if [ "${PTY_FAULT_CHMOD_BACK:-0}" = 1 ]; then  # and the binary as reviewed again (a red team's round six)
	chmod 0711 "$RUNTIME"
	echo "FAULT: the runtime binary is 0711 again; the candidate ($pid) was started from it at 0755" >&2
fi
