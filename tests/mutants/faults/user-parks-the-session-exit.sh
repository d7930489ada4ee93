# Once a session's unit has ended, the supervisor drops the output not yet written and sends
# EXIT at once (the supervisor switch exit-without-flush, set by the catalogue); a watcher of the
# service user's (a blind red team's round nine, issue 37, attack 6) hides it. For every session
# whose command writes the suite's counted lines (CONC-2's "output held past the end"), it
# attaches to the session's script(1), a process of its own, injects a thread (clone
# CLONE_THREAD) and keeps that thread in a ptrace stop. When script(1) exits, its leader is a
# zombie (never in state T) while the parked thread holds the process, and the unit, alive:
# the suite, finding the unit not gone in its bound, takes the supervisor for one that
# throttles, and reads every byte before the watcher lets the thread go 15 s later. PARKED for
# each script(1) held; the after-suite check requires one.
# With PTY_FAULT_EVERY=1 every session's script(1) is held, and with PTY_FAULT_HOLD=never none is
# let go (attack 8: every wait on a session's end runs to its bound, and the units' own stops
# cannot end either).
set -eu
HOLD=${PTY_FAULT_HOLD:-15}
EVERY=${PTY_FAULT_EVERY:-0}
. /opt/dev-script-0/common.sh  # ptrace_lib, user_watcher
ptrace_lib
cat > /usr/local/lib/pty-fault/parker.py <<'PY'
import ctypes, os, sys, time
sys.path.insert(0, "/usr/local/lib/pty-fault")
from ptracelib import libc, log, Regs, SEIZE, INTERRUPT, SYSCALL, GETREGS, SETREGS, DETACH, WALL, WNOHANG, ENOSYS
GETEVENTMSG, CONT = 0x4201, 7
O_TRACECLONE, O_TRACEEXIT = 0x8, 0x40
HOLD_S = None if sys.argv[2] == "never" else float(sys.argv[2])  # how long an exiting script(1) is held
EVERY = sys.argv[3] == "1"  # every session's script(1), not only the counted-lines ones
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the suite's UNIT-7 does not reach our /proc/<pid>/root
def say(s):
    log.write(f"{time.time():.3f} {s}\n")
def pt(req, pid, addr=None, data=None):
    if libc.ptrace(req, pid, addr, data) == -1:
        raise OSError(ctypes.get_errno(), f"ptrace {req} {pid}")
def regs(pid):
    r = Regs()
    pt(GETREGS, pid, None, ctypes.byref(r))
    return r
def to_enter(pid):
    """Run `pid` to its next system call's entry stop (a signal for it delivered on the way)."""
    sig = 0
    while True:
        pt(SYSCALL, pid, None, ctypes.c_void_p(sig))
        sig = 0
        _, st = os.waitpid(pid, WALL)
        if st >> 16:
            continue
        if os.WSTOPSIG(st) != 5:
            sig = os.WSTOPSIG(st)
            continue
        r = regs(pid)
        if r.rax == ENOSYS:
            return r
def park_thread(pid):
    """A new thread in `pid` (its clone swapped for the call it was making, which then runs
    again), left in its first ptrace stop; `pid` itself detached. The thread's id."""
    pt(SEIZE, pid, None, ctypes.c_void_p(O_TRACECLONE | O_TRACEEXIT))
    pt(INTERRUPT, pid)
    os.waitpid(pid, WALL)
    enter = to_enter(pid)
    r = Regs.from_buffer_copy(enter)
    r.orig_rax, r.rdi, r.rsi, r.rdx, r.r10, r.r8 = 56, 0x50f00, 0, 0, 0, 0  # clone(CLONE_THREAD...)
    pt(SETREGS, pid, None, ctypes.byref(r))
    tid = None
    while True:
        pt(SYSCALL, pid)
        _, st = os.waitpid(pid, WALL)
        if st >> 16 == 3:  # PTRACE_EVENT_CLONE
            msg = ctypes.c_ulong()
            pt(GETEVENTMSG, pid, None, ctypes.byref(msg))
            tid = msg.value
            continue
        break
    back = Regs.from_buffer_copy(enter)
    back.rip -= 2
    back.rax = enter.orig_rax
    pt(SETREGS, pid, None, ctypes.byref(back))
    if tid is None:
        raise RuntimeError("no clone event")
    os.waitpid(tid, WALL)  # its first stop: left there
    pt(DETACH, pid)
    return tid
def script_of(pid):
    """The script(1) of the session `pid` runs in (cgroup.procs of its unit), or None."""
    line = open(f"/proc/{pid}/cgroup").read().strip().split("\n")[-1]
    group = line.split("::", 1)[1]
    if "/opencode-pty-" not in group:
        return None
    for p in open(f"/sys/fs/cgroup{group}/cgroup.procs").read().split():
        try:
            if open(f"/proc/{p}/comm").read().strip() == "script":
                return int(p)
        except OSError:
            pass
    return None
me, seen, held, release, held_scripts = os.getuid(), set(), set(), {}, set()
while True:
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in seen:
            continue
        try:
            if os.stat(f"/proc/{d}").st_uid != me:
                continue
            if EVERY and open(f"/proc/{d}/comm").read().strip() == "script":
                seen.add(int(d))
                script = int(d) if script_of(int(d)) is not None else None
            elif b"read go && seq" in open(f"/proc/{d}/cmdline", "rb").read():
                seen.add(int(d))
                script = script_of(int(d))
            else:
                continue
        except OSError:
            continue
        if script is None or script in held_scripts:
            continue
        held_scripts.add(script)
        seen.add(script)
        try:
            tid = park_thread(script)
            held.add(tid)
            log.write(f"PARKED script {script}, its thread {tid}\n")
        except Exception as e:  # noqa: BLE001
            log.write(f"TRIED script {script}: {type(e).__name__}: {e}\n")
    while held:
        try:
            wpid, st = os.waitpid(-1, WNOHANG | WALL)
        except ChildProcessError:
            held.clear()
            break
        if wpid == 0:
            break
        if os.WIFSTOPPED(st) and st >> 16 == 6:  # PTRACE_EVENT_EXIT: script(1) has exited
            release[wpid] = float("inf") if HOLD_S is None else time.monotonic() + HOLD_S
            say(f"thread {wpid} at its exit stop: held {HOLD_S} s")
        elif not os.WIFSTOPPED(st):
            held.discard(wpid)
            say(f"thread {wpid} gone")
    for tid, t in list(release.items()):
        if time.monotonic() >= t:
            try:
                pt(CONT, tid)
            except OSError as e:
                say(f"thread {tid}: {e}")
            del release[tid]
            say(f"thread {tid} let go")
    time.sleep(0.002)
PY
user_watcher pty-fault-parker /var/lib/pty-fault/parker.log /usr/local/lib/pty-fault/parker.py /var/lib/pty-fault/parker.log \
	"$HOLD" "$EVERY"
echo "FAULT: byk parks a thread of each counted-lines session's script(1) past its exit" >&2
