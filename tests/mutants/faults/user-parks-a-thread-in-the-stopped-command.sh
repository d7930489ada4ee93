# The stop of a session never sends SIGTERM (the supervisor switch session-stop-sigkill, set by
# the catalogue), and a watcher of the service user's (a blind red team's round nine, issue 37)
# attaches to CONC-3's stop-test command the moment it appears, has it name itself as if it had
# seen SIGTERM (prctl PR_SET_NAME) and start a thread of its own, keeps that thread in a ptrace
# stop and lets go of the main thread: the stop's SIGKILL leaves a zombie leader whose thread
# group lives on until the watcher lets the thread go 3.6 s later, as a command granted its
# grace would. The stop-test command is now the suite's execute-only Python, held only untraced,
# not dumpable and with one thread: the attach is refused (TRIED). FORGED for each command it
# changed; the after-suite check requires an attempt (TRIED or FORGED).
set -eu
. /opt/dev-script-0/common.sh  # user_watcher
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/watcher.py <<'PY'
# The service user's watcher (round 9, attack 3). Every stop-test command of a session
# (python3 ... pty-acceptance-term-<token>, a dumpable process of the user's) is ptraced the
# moment it appears: two of its own syscalls are swapped for prctl(PR_SET_NAME,
# "pty-acc-TERM") (its comm now says it saw a SIGTERM) and clone(CLONE_THREAD) (a second
# thread, kept in a ptrace stop with PTRACE_O_TRACEEXIT), then the main thread is detached.
# The stop's SIGKILL leaves a zombie leader (state Z, never T/t) whose thread group is not
# empty (its pidfd not readable) until we let the parked thread go 3.6 s later.
import ctypes, os, signal, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
PEEKTEXT, CONT, DETACH, SYSCALL, GETREGS, SETREGS = 1, 7, 17, 24, 12, 13
SEIZE, INTERRUPT, GETEVENTMSG = 0x4206, 0x4207, 0x4201
O_TRACECLONE, O_TRACEEXIT = 0x8, 0x40
WALL = 0x40000000
FIELDS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
          "fs_base gs_base ds es fs gs").split()
class Regs(ctypes.Structure):
    _fields_ = [(f, ctypes.c_ulonglong) for f in FIELDS]
LOG = sys.argv[1]
log = open(LOG, "a", buffering=1)
def say(s):
    log.write(f"{time.time():.3f} {s}\n")
def pt(req, pid, addr=None, data=None):
    r = libc.ptrace(req, pid, addr, data)
    if r == -1 and req != PEEKTEXT:
        raise OSError(ctypes.get_errno(), f"ptrace {req} {pid}")
    return r
def wait(pid):
    _, st = os.waitpid(pid, WALL)
    return st
POKEDATA = 5
ENOSYS = (1 << 64) - 38
def _resume_to_enter(pid, sig=0):
    """Run `pid` to its next syscall-enter stop; its registers there."""
    while True:
        pt(SYSCALL, pid, None, ctypes.c_void_p(sig))
        sig = 0
        st = wait(pid)
        if os.WSTOPSIG(st) != signal.SIGTRAP and st >> 16 == 0:
            sig = os.WSTOPSIG(st)  # a signal for it: delivered on resume
            continue
        if st >> 16:
            continue
        r = Regs()
        pt(GETREGS, pid, None, ctypes.byref(r))
        if r.rax == ENOSYS:
            return r
def _substitute(pid, enter, nr, args):
    """At a syscall-enter stop: run syscall `nr` instead, then rewind to re-run the original.
    Returns (result, new thread id or None)."""
    r = Regs.from_buffer_copy(enter)
    r.orig_rax = nr
    r.rdi, r.rsi, r.rdx, r.r10, r.r8 = (list(args) + [0] * 5)[:5]
    pt(SETREGS, pid, None, ctypes.byref(r))
    tid = None
    while True:
        pt(SYSCALL, pid)
        st = wait(pid)
        if st >> 16 == 3:  # PTRACE_EVENT_CLONE
            msg = ctypes.c_ulong()
            pt(GETEVENTMSG, pid, None, ctypes.byref(msg))
            tid = msg.value
            continue
        break
    got = Regs()
    pt(GETREGS, pid, None, ctypes.byref(got))
    back = Regs.from_buffer_copy(enter)
    back.rip -= 2
    back.rax = enter.orig_rax
    pt(SETREGS, pid, None, ctypes.byref(back))
    return got.rax, tid
def inject_thread(pid):
    """comm set to pty-acc-TERM (prctl PR_SET_NAME), and a new thread in `pid`, left in a
    ptrace stop; the main thread detached. Returns the new thread's id."""
    pt(SEIZE, pid, None, ctypes.c_void_p(O_TRACECLONE | O_TRACEEXIT))
    pt(INTERRUPT, pid)
    wait(pid)
    enter = _resume_to_enter(pid)
    buf = (enter.rsp - 1024) & ~15
    name = b"pty-acc-TERM\0\0\0\0"
    for i in range(0, 16, 8):
        pt(POKEDATA, pid, ctypes.c_void_p(buf + i), ctypes.c_void_p(int.from_bytes(name[i:i + 8], "little")))
    res, _ = _substitute(pid, enter, 157, (15, buf))  # prctl(PR_SET_NAME, buf)
    enter = _resume_to_enter(pid)
    res2, tid = _substitute(pid, enter, 56, (0x50f00, 0, 0, 0, 0))  # clone(CLONE_THREAD|...)
    if tid is None:
        raise RuntimeError(f"no clone event (prctl {res:x}, clone {res2:x})")
    wait(tid)  # its first stop: left stopped
    pt(DETACH, pid, None, None)
    return tid
def sigcgt(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0
def main():
    log.write(f"STARTED uid {os.getuid()}\n")
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no other process of the user reaches our /proc/<pid>/root
    me = os.getuid()
    seen, parked, release = set(), set(), {}
    while True:
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) in seen:
                continue
            pid = int(d)
            try:
                if os.stat(f"/proc/{d}").st_uid != me:
                    continue
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                if not any(a.startswith(b"pty-acceptance-term-") for a in argv) or b"python3" not in argv[0]:
                    continue
            except OSError:
                continue
            seen.add(pid)
            try:
                tid = inject_thread(pid)
                parked.add(tid)
                say(f"{pid}: comm set, thread {tid} parked, main thread detached")
                log.write(f"FORGED {pid}\n")
            except Exception as e:  # noqa: BLE001
                say(f"{pid}: failed: {type(e).__name__}: {e}")
                log.write(f"TRIED {pid}: {type(e).__name__}: {e}\n")
        while parked:
            try:
                wpid, st = os.waitpid(-1, os.WNOHANG | WALL)
            except ChildProcessError:
                parked.clear()
                break
            if wpid == 0:
                break
            if os.WIFSTOPPED(st) and st >> 16 == 6:
                release[wpid] = time.monotonic() + 3.6
                say(f"thread {wpid} at its exit stop (killed)")
            elif os.WIFSTOPPED(st):
                say(f"thread {wpid} stop {st:x}: left stopped")
            else:
                parked.discard(wpid)
                say(f"thread {wpid} gone {st:x}")
        for tid, t in list(release.items()):
            if time.monotonic() >= t:
                pt(CONT, tid, None, None)
                del release[tid]
                say(f"thread {tid} released")
        time.sleep(0.002)
if __name__ == "__main__":
    main()
PY
user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/watcher.py /var/lib/pty-fault/watcher.log
echo "FAULT: byk names each stop-test command as if it saw SIGTERM and parks a thread of it past the SIGKILL" >&2
