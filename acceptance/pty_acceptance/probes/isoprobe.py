"""ISO-1 probe: what another process of the service user can do to a target.

    python3 -I isoprobe.py PID STARTTICKS

Run by the suite AS THE SERVICE USER (a disposable unit, see isolation.py);
stdlib only, x86_64 syscall numbers. STARTTICKS is field 22 of
/proc/PID/stat as root read it: when the probe can read it too, it must be
the same before the first attempt and after the last (PID reuse), or the
report carries an error and no result counts.

One attempt per vector, each {"vector", "outcome": "refused"|"worked",
"detail"}; a detail names an errno or how much was read, never the bytes:

  ptrace             PTRACE_SEIZE in a forked tracer (SEIZE never stops the
                     target); if it worked, PTRACE_DETACH at once, and the
                     tracer exits, which detaches for certain. PTRACE_ATTACH
                     (it stops the target) is never used.
  proc-fd-list       listing /proc/PID/fd
  proc-fd-open       opening /proc/PID/fd/N (N >= 3) with O_PATH: the same
                     access check as any open, without side effects on what
                     the descriptor is
  proc-environ       reading /proc/PID/environ
  proc-fdinfo        listing /proc/PID/fdinfo and reading one entry
  proc-mem           reading one page of /proc/PID/mem at a mapped address
  process_vm_readv   8 bytes at that address; EFAULT means the kernel
                     granted access (its check comes before the copy)
  pidfd_getfd        pidfd_open, then pidfd_getfd of 3..63 until one works;
                     EBADF for every one still means access was granted (the
                     access check comes first); when none works, the detail
                     says whether pidfd_getfd works on the probe itself (if
                     not, a system call filter blocks it on this host)
  kill               kill(PID, 0)
  pidfd_send_signal  pidfd_send_signal(pidfd, 0)

Signal 0 only; nothing obtained is used. The probe makes itself not dumpable
first, so that no other process of the user can ptrace it and forge the
report. Output: one JSON object between the BEGIN and END lines on stdout.
"""
import ctypes
import errno
import json
import os
import sys

BEGIN, END = "ISOPROBE-BEGIN", "ISOPROBE-END"
SYS_PROCESS_VM_READV, SYS_PIDFD_SEND_SIGNAL, SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 310, 424, 434, 438
PTRACE_SEIZE, PTRACE_DETACH = 0x4206, 17
PR_SET_DUMPABLE = 4
FD_RANGE = range(3, 64)
PAGE = 4096
SPECIAL_MAPPINGS = ("[vvar]", "[vvar_vclock]", "[vsyscall]")
GUESSED_ADDRESS = 0x400000  # only when maps is unreadable: EFAULT still proves access

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def name(e):
    return errno.errorcode.get(e, str(e))


def syscall(n, *args):
    """(result, errno) of a raw syscall; ints travel as longs."""
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(n), *[ctypes.c_long(a) if isinstance(a, int) else a
                                         for a in args])
    return r, (ctypes.get_errno() if r < 0 else 0)


def worked(vector, detail):
    return {"vector": vector, "outcome": "worked", "detail": detail}


def refused(vector, detail):
    return {"vector": vector, "outcome": "refused", "detail": detail}


def start_ticks(pid):
    """Field 22 of /proc/PID/stat, or an errno name if the probe cannot read it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read(4096)
    except OSError as e:
        return name(e.errno)
    return int(data[data.rindex(b")") + 2:].split()[19])


def tracer_of(pid):
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f.read(16384).splitlines():
                if line.startswith(b"TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


# ------------------------------------------------------------------ ptrace
def probe_ptrace(pid):
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # the tracer; its exit detaches whatever it still traces
        try:
            os.close(r)
            ctypes.set_errno(0)
            seized = libc.ptrace(PTRACE_SEIZE, pid, None, None)
            out = {"seize": 0 if seized == 0 else ctypes.get_errno()}
            if seized == 0:
                ctypes.set_errno(0)
                detached = libc.ptrace(PTRACE_DETACH, pid, None, None)
                out["detach"] = 0 if detached == 0 else ctypes.get_errno()
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = os.read(r, 256)
    finally:
        os.close(r)
        os.waitpid(child, 0)
    got = json.loads(data or b"{}")
    if "seize" not in got:
        raise RuntimeError("the ptrace child reported nothing")
    if got["seize"] != 0:
        return refused("ptrace", f"PTRACE_SEIZE: {name(got['seize'])}")
    # a running tracee refuses PTRACE_DETACH (ESRCH); the tracer's exit detached it
    detach = "ok" if got.get("detach") == 0 else name(got.get("detach", 0))
    return worked("ptrace", f"PTRACE_SEIZE succeeded (PTRACE_DETACH: {detach}; tracer exited; "
                            f"TracerPid now {tracer_of(pid)})")


# ------------------------------------------------------------------ /proc
def first_mapping(pid):
    """(address of the first readable ordinary mapping, how maps went)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError as e:
        return None, f"maps {name(e.errno)}"
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[1].startswith(b"r") and \
                not (len(fields) >= 6 and fields[5].decode("ascii", "replace") in SPECIAL_MAPPINGS):
            return int(fields[0].split(b"-")[0], 16), f"maps readable ({len(lines)} mappings)"
    return None, f"maps readable ({len(lines)} mappings), none readable"


def probe_fd_list(base):
    try:
        fds = sorted(int(n) for n in os.listdir(f"{base}/fd"))
    except OSError as e:
        return refused("proc-fd-list", f"listdir {base}/fd: {name(e.errno)}"), []
    high = [n for n in fds if n >= 3]
    return worked("proc-fd-list", f"listed {len(fds)} descriptors, {len(high)} of them >= 3"), high


def probe_fd_open(base, listed):
    kinds = {0o140000: "socket", 0o100000: "regular file", 0o010000: "pipe",
             0o020000: "character device", 0o040000: "directory"}
    seen = []
    for n in listed or range(3, 16):
        path = f"{base}/fd/{n}"
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == errno.ENOENT:  # no such descriptor (closed meanwhile, or never)
                seen.append(n)
                continue
            return refused("proc-fd-open", f"open {path}: {name(e.errno)}")
        try:
            mode = os.fstat(fd).st_mode & 0o170000
        finally:
            os.close(fd)
        return worked("proc-fd-open", f"opened {path} (O_PATH): a {kinds.get(mode, 'special file')}")
    return refused("proc-fd-open", f"no descriptor >= 3 to open (ENOENT for {len(seen)})")


def probe_environ(base):
    try:
        with open(f"{base}/environ", "rb") as f:
            n = len(f.read(1 << 16))
    except OSError as e:
        return refused("proc-environ", f"{base}/environ: {name(e.errno)}")
    return worked("proc-environ", f"read {n} bytes of {base}/environ")


def probe_fdinfo(base, listed):
    try:
        names = os.listdir(f"{base}/fdinfo")
    except OSError as e:
        return refused("proc-fdinfo", f"listdir {base}/fdinfo: {name(e.errno)}")
    for n in listed:
        try:
            with open(f"{base}/fdinfo/{n}", "rb") as f:
                size = len(f.read(4096))
        except OSError:
            continue
        return worked("proc-fdinfo", f"listed {len(names)} entries, read {size} bytes of fdinfo/{n}")
    return worked("proc-fdinfo", f"listed {len(names)} entries of {base}/fdinfo")


def probe_mem(base, addr, maps):
    try:
        fd = os.open(f"{base}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        return refused("proc-mem", f"open {base}/mem: {name(e.errno)} ({maps})")
    try:
        if addr is None:
            return worked("proc-mem", f"opened {base}/mem ({maps}, so no address to read)")
        try:
            n = len(os.pread(fd, PAGE, addr))
        except OSError as e:
            return worked("proc-mem", f"opened {base}/mem; reading the first readable "
                                      f"mapping: {name(e.errno)}")
        return worked("proc-mem", f"read {n} bytes of the first readable mapping ({maps})")
    finally:
        os.close(fd)


def probe_vm_readv(pid, addr, maps):
    buf = ctypes.create_string_buffer(8)
    local, remote = IOVec(ctypes.addressof(buf), 8), IOVec(addr or GUESSED_ADDRESS, 8)
    n, e = syscall(SYS_PROCESS_VM_READV, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    where = "the first readable mapping" if addr else f"a guessed address ({maps})"
    if n >= 0:
        return worked("process_vm_readv", f"read {n} bytes at {where}")
    if e == errno.EFAULT:  # the access check passed; only the address was wrong
        return worked("process_vm_readv", f"access granted (EFAULT at {where})")
    return refused("process_vm_readv", f"{name(e)} ({maps})")


# ------------------------------------------------------------------ pidfd, signals
def pidfd_getfd_on_itself():
    """pidfd_getfd of the probe's own descriptor (access to itself is always
    granted): 'works', or the errno a system call filter answers with."""
    own, e = syscall(SYS_PIDFD_OPEN, os.getpid(), 0)
    if own < 0:
        return f"pidfd_open {name(e)}"
    try:
        fd, e = syscall(SYS_PIDFD_GETFD, own, own, 0)
        if fd < 0:
            return name(e)
        os.close(fd)
        return "works"
    finally:
        os.close(own)


def getfd_all(pidfd):
    """pidfd_getfd of 3..63 until one works: (descriptor obtained or None, {errno: [fds]})."""
    errors = {}
    for n in FD_RANGE:
        fd, e = syscall(SYS_PIDFD_GETFD, pidfd, n, 0)
        if fd >= 0:
            os.close(fd)
            return n, errors
        errors.setdefault(name(e), []).append(n)
    return None, errors


def probe_getfd(pidfd):
    got, errors = getfd_all(pidfd)
    itself = pidfd_getfd_on_itself()
    if got is not None:
        return worked("pidfd_getfd", f"obtained a copy of descriptor {got}")
    seen = ", ".join(f"{e} for {len(fds)} (first {fds[0]})" for e, fds in sorted(errors.items()))
    if set(errors) == {"EBADF"}:  # EBADF comes only after the access check passed
        return worked("pidfd_getfd", f"access granted but nothing to take ({seen})")
    where = "works on the probe itself" if itself == "works" else \
        f"refused even on the probe itself ({itself}): a system call filter blocks it"
    return refused("pidfd_getfd", f"{seen}; pidfd_getfd {where}")


def probe_pidfd(pid):
    pidfd, e = syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        why = f"pidfd_open: {name(e)}"
        return [refused("pidfd_getfd", why), refused("pidfd_send_signal", why)]
    try:
        got = probe_getfd(pidfd)
        r, e = syscall(SYS_PIDFD_SEND_SIGNAL, pidfd, 0, None, 0)
        sent = worked("pidfd_send_signal", "pidfd_send_signal(pidfd, 0) succeeded") if r == 0 \
            else refused("pidfd_send_signal", f"pidfd_send_signal(pidfd, 0): {name(e)}")
        return [got, sent]
    finally:
        os.close(pidfd)


def probe_kill(pid):
    try:
        os.kill(pid, 0)
    except OSError as e:
        return refused("kill", f"kill(pid, 0): {name(e.errno)}")
    return worked("kill", "kill(pid, 0) succeeded")


# ------------------------------------------------------------------ main
def run(pid):
    base = f"/proc/{pid}"
    results = [probe_ptrace(pid)]
    listing, listed = probe_fd_list(base)
    results += [listing, probe_fd_open(base, listed), probe_environ(base),
                probe_fdinfo(base, listed)]
    addr, maps = first_mapping(pid)
    results += [probe_mem(base, addr, maps), probe_vm_readv(pid, addr, maps)]
    results += probe_pidfd(pid)
    results.append(probe_kill(pid))
    return results


def own_status():
    """CapEff (-1 if unreadable: it must be 0) and seccomp mode/filters of the probe itself."""
    fields = {}
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f.read(16384).splitlines():
                key, _, value = line.partition(b":")
                fields[key.decode("ascii", "replace")] = value.strip().decode("ascii", "replace")
    except OSError:
        pass
    try:
        cap = int(fields.get("CapEff", ""), 16)
    except ValueError:
        cap = -1
    return cap, f"Seccomp {fields.get('Seccomp', '?')}, filters {fields.get('Seccomp_filters', '?')}"


def main(argv):
    # another process of the same user must not be able to ptrace the probe
    # and forge its report: non-dumpable from the start (it still probes as is)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    cap, seccomp = own_status()
    report = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
              "egid": os.getegid(), "cap_eff": cap, "seccomp": seccomp, "results": []}
    try:
        pid, want = int(argv[1]), int(argv[2])
        report["pid"] = pid
        if os.uname().machine != "x86_64":
            raise RuntimeError(f"the probe's syscall numbers are x86_64, this is {os.uname().machine}")
        before = start_ticks(pid)
        report["start_ticks_before"] = before
        if isinstance(before, int) and before != want:
            raise RuntimeError(f"pid {pid} started at {before} ticks, not {want}: replaced "
                               "before the probe ran")
        results = run(pid)
        after = start_ticks(pid)
        report["start_ticks_after"] = after
        if isinstance(after, int) and after != want:
            raise RuntimeError(f"pid {pid} started at {after} ticks, not {want}: replaced "
                               "while it was probed")
        report["results"] = results
    except Exception as e:  # any surprise voids the whole report (the suite fails closed)
        report["error"] = f"{type(e).__name__}: {e}"[:500]
    sys.stdout.write(f"{BEGIN}\n{json.dumps(report)}\n{END}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
