"""A live session seen from the host (as root) and from inside.

Host side: the processes of a session unit's cgroup, their /proc status and
command lines, polled until the session's command has exec'd (a Type=exec
unit's MainPID is the launcher, then script(1); only the command proves the
sandbox is in place). Inside: PROBE, a program run as a session's command
(by the suite's execute-only Python, session_probe.py) that answers what the
session can see and do on its own channel, then waits for end of input so
the host can read /proc while it lives.

Not Testinfra's `host.process`: a session's processes are its cgroup's
(cgroups.py), each judged by pid while the session lives. A peer for a whole
module is conftest's `module_peer`; stand-in listeners: standin_listener.py.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import proc
from pty_acceptance.supervisor import protocol as p, session_probe
from pty_acceptance.host.cgroups import cgroup_dir, cgroup_pids

POLL_S = 0.01
SEARCH_ENTRIES = 100_000  # names the probe looks at in the sockets' filesystems (UNIT-7)


class LiveError(Unreadable):
    pass


def environment_problems(env: list[str], want: dict[str, str]) -> list[str]:
    """What differs between the command's NAME=value list and the declared
    environment: a name missing, repeated or extra, or a value not as declared."""
    if not isinstance(env, list) or not all(isinstance(e, str) for e in env):
        return [f"the probe's environ is not a list of strings: {str(env)[:200]!r}"]
    seen: dict[str, list[str]] = {}
    for entry in env:
        name, _, value = entry.partition("=")
        seen.setdefault(name, []).append(value)
    problems = []
    extra = sorted(set(seen) - set(want))
    if extra:
        problems.append(f"variables beyond the fixed list {sorted(want)}: {extra}")
    for name in sorted(want):
        values = seen.get(name, [])
        if not values:
            problems.append(f"{name} is not set")
        elif len(values) > 1:
            problems.append(f"{name} is set {len(values)} times: {values}")
        elif values[0] != want[name]:
            problems.append(f"{name}={values[0]!r}, the inventory declares {want[name]!r}")
    return problems


# ------------------------------------------------------------------ /proc
def wait_for_command(control_group: str, argv: list[bytes], deadline_s: float) -> int:
    """Poll until a process of the cgroup runs exactly `argv`; return its pid."""
    end = time.monotonic() + deadline_s
    seen: dict[int, list[bytes]] = {}
    while True:
        path = cgroup_dir(control_group)
        pids = cgroup_pids(path) if path else []
        now = proc.walk(proc.cmdline, "the command line", among=pids)  # gone: left out
        seen.update(now)
        for pid, line in now.items():
            if line == argv:
                return pid
        if time.monotonic() > end:
            raise TimeoutError(f"no process of {control_group} ran {argv} within {deadline_s} s; "
                               f"seen {seen}")
        time.sleep(POLL_S)  # poll interval, not a wait for an outcome


def session_units(bus) -> set[str]:
    """Loaded units with a strict session name."""
    from pty_acceptance.host.systemd import STRICT_SESSION
    return {row[0] for row in bus.call("ListUnits")[0] if STRICT_SESSION.match(row[0])}


def wait_for_new_session_unit(bus, before: set[str], deadline_s: float) -> str:
    """Poll until exactly one strict session unit not in `before` is loaded."""
    end = time.monotonic() + deadline_s
    while True:
        new = sorted(session_units(bus) - before)
        if len(new) == 1:
            return new[0]
        if time.monotonic() > end:
            raise TimeoutError(f"no single new session unit within {deadline_s} s: {new}")
        time.sleep(POLL_S)  # poll interval, not a wait for an outcome


def chain_to(pid: int, top: int, limit: int = 16) -> list[int]:
    """pid, its parent, ... up to and including top (LiveError if top is not an ancestor)."""
    chain = [pid]
    while chain[-1] != top:
        if len(chain) > limit:
            raise LiveError(f"{top} is not an ancestor of {pid} within {limit} levels: {chain}")
        parent = proc.ppid(chain[-1])
        if parent <= 1:
            raise LiveError(f"{top} is not an ancestor of {pid}: chain {chain} reached {parent}")
        chain.append(parent)
    return chain


def host_seccomp_baseline() -> int:
    """Seccomp_filters of PID 1: what every process of this host already carries."""
    return int(proc.status(1).get("Seccomp_filters", "0"))


# ------------------------------------------------------------------ probe
# /proc as the probe lists and reads it inside a session (UNIT-5): its own part,
# so that tests/ can run it against processes that exit while they are read.
PROC_LISTING = r'''
import errno, os, re
CGROUP_LINE = re.compile(r"[0-9]+:[^:\n]*:/[^\n]*")
def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))
def read_pid(name):
    """{"cgroup", "uid"} of one listed process, read through one descriptor of its
    /proc directory (both of the same process); None when it is gone (exited after
    the listing: ENOENT, ESRCH); {"error"} when it is there and cannot be read,
    or its cgroup file is cut short, empty or malformed."""
    try:
        d = os.open("/proc/" + name, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return None if e.errno in (errno.ENOENT, errno.ESRCH) else {"error": errname(e)}
    try:
        uid = os.fstat(d).st_uid
        f = os.open("cgroup", os.O_RDONLY, dir_fd=d)
        try:
            data = b""
            while len(data) <= 4096:
                chunk = os.read(f, 4097 - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(f)
    except OSError as e:
        return None if e.errno in (errno.ENOENT, errno.ESRCH) else {"error": errname(e)}
    finally:
        os.close(d)
    if len(data) > 4096:
        return {"error": "cgroup longer than 4096 bytes"}
    text = data.decode("utf-8", "replace").strip()
    if not text or not all(CGROUP_LINE.fullmatch(line) for line in text.split("\n")):
        return {"error": "cgroup malformed: %r" % text[:200]}
    return {"cgroup": text, "uid": uid}
def list_procs():
    """({pid: what read_pid read}, [pids listed and gone before their read])."""
    procs, gone = {}, []
    for name in sorted(os.listdir("/proc")):
        if name.isdigit():
            got = read_pid(name)
            if got is None:
                gone.append(name)
            else:
                procs[name] = got
    return procs, gone
'''

PROBE = PROC_LISTING + r'''
import ctypes, errno, json, os, re, socket, stat, sys
out = {"pid": os.getpid()}
# /proc/self/environ is root's (the probe is not dumpable): root reads it (session_probe.environ)
out["environ"] = [f"{k}={v}" for k, v in os.environ.items()]
out["getcwd"] = os.getcwd()
out["proc_cwd"] = os.readlink("/proc/self/cwd")
st = os.stat(".")
out["cwd_dev_ino"] = [st.st_dev, st.st_ino]
try:
    out["cwd_token"] = open(sys.argv[1]).read(256)
except OSError as e:
    out["cwd_token"] = "error: " + errno.errorcode.get(e.errno, str(e.errno))
procs, gone = list_procs()
out["proc_pids"] = procs
out["proc_gone"] = gone
out["proc_other"] = sorted(n for n in os.listdir("/proc") if not n.isdigit())
out["self_cgroup"] = open("/proc/self/cgroup").read(4096).strip()
devs = []
for d, dirs, files in os.walk("/dev"):
    for n in sorted(dirs + files):
        p = os.path.join(d, n)
        try:
            s = os.lstat(p)
        except OSError:
            continue
        kind = ("chr" if stat.S_ISCHR(s.st_mode) else "blk" if stat.S_ISBLK(s.st_mode) else
                "lnk" if stat.S_ISLNK(s.st_mode) else "dir" if stat.S_ISDIR(s.st_mode) else
                "sock" if stat.S_ISSOCK(s.st_mode) else "fifo" if stat.S_ISFIFO(s.st_mode) else "file")
        devs.append([p, kind, os.major(s.st_rdev), os.minor(s.st_rdev)])
out["dev"] = devs
libc = ctypes.CDLL(None, use_errno=True)
ns = {}
for name, flag in (("CLONE_NEWUSER", 0x10000000), ("CLONE_NEWUSER|CLONE_NEWNET", 0x50000000),
                   ("CLONE_NEWUSER|CLONE_NEWNS", 0x10020000)):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        rc = libc.unshare(flag)
        os.write(w, json.dumps([rc, ctypes.get_errno()]).encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 256)
    os.close(r)
    os.waitpid(pid, 0)
    rc, err = json.loads(data or b"[null, null]")
    ns[name] = "ok" if rc == 0 else errno.errorcode.get(err, str(err))
out["unshare"] = ns
fam = {}
for name, af, kind in (("AF_NETLINK", socket.AF_NETLINK, socket.SOCK_RAW),
                       ("AF_PACKET", socket.AF_PACKET, socket.SOCK_RAW),
                       ("AF_UNIX", socket.AF_UNIX, socket.SOCK_STREAM)):
    try:
        socket.socket(af, kind).close()
        fam[name] = "ok"
    except OSError as e:
        fam[name] = errno.errorcode.get(e.errno, str(e.errno))
out["socket"] = fam
spec = json.loads(sys.argv[2])
conn = {}
for path in spec["connect"]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        conn[path] = "connected"
    except OSError as e:
        conn[path] = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
    finally:
        s.close()
out["connect"] = conn
devs, tops = set(spec["devices"]), set()
for line in open("/proc/self/mountinfo").read(1 << 22).splitlines():
    f = line.split(" ")
    if f[2] in devs:
        tops.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[4]))
found, unreadable, seen, todo, n = [], [], set(), sorted(tops), 0
while todo and n < spec["entries"]:
    p = todo.pop()
    n += 1
    try:
        st = os.lstat(p)
    except OSError as e:
        unreadable.append([p, errname(e)])
        continue
    if "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev)) not in devs:
        continue
    if stat.S_ISSOCK(st.st_mode):
        found.append([p, st.st_dev, st.st_ino])
    elif stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
        seen.add((st.st_dev, st.st_ino))
        try:
            todo.extend(os.path.join(p, x) for x in sorted(os.listdir(p)))
        except OSError as e:
            unreadable.append([p, errname(e)])
via, via_errors = [], {}
for pid, seen_pid in procs.items():
    if seen_pid.get("cgroup") == out["self_cgroup"]:
        continue
    for path in spec["connect"]:
        q = "/proc/%s/root%s" % (pid, path)
        try:
            st = os.lstat(q)
            via.append([q, st.st_dev, st.st_ino])
        except OSError as e:
            via_errors[errname(e)] = via_errors.get(errname(e), 0) + 1
out["sockets"] = {"mounts": sorted(tops), "found": found[:1000], "found_count": len(found), "entries": n,
                  "complete": not todo, "unreadable": unreadable[:50], "unreadable_count": len(unreadable),
                  "via_proc_root": via[:1000], "via_count": len(via), "via_errors": via_errors}
answer(out)  # on the probe's own channel (session_probe.py), never through the terminal
sys.stdin.read()
'''


def probe_argv(channel: session_probe.Channel, token_file: str, sockets: list[str],
               devices: list[tuple[int, int]], entries: int = SEARCH_ENTRIES) -> list[str]:
    """The probe's command line: it connects to each of `sockets` and searches every
    mount of the filesystems `devices` for sockets, at most `entries` names."""
    spec = {"connect": sockets, "devices": [f"{a}:{b}" for a, b in devices], "entries": entries}
    return channel.argv(PROBE, token_file, json.dumps(spec))


# ------------------------------------------------------------------ sockets
def can_connect(path: str) -> str:
    """Connect as the suite (root): 'connected' or the errno name."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        return "connected"
    except OSError as e:
        import errno
        return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
    finally:
        s.close()


def end_by_eof(raw, deadline_s: float) -> None:
    """End of input ends a probe session; its unit goes with it."""
    if raw.sock is None:
        return
    with contextlib.suppress(OSError):
        raw.send(p.encode(p.T.EOF))
    with contextlib.suppress(TimeoutError, OSError):
        raw.wait_end(deadline_s)
