"""RUNTIME-2, judged over the whole session: every process of the candidate
runtime's tree that held the supervisor connection or the session's directory
at any time, from strace's record of that tree (runtimetrace.py), not from a
sample of /proc while the session lives (a process of the user may kill a
holder the moment it appears, long before any sample).

strace follows the runtime from before the session until after the sample:
which processes and threads were created (clone, clone3, fork, vfork), what
they exec'd, and every call that gives, copies, moves or takes a descriptor
(open*, socket, socketpair, accept*, dup*, fcntl F_DUPFD*, recvmsg and
recvmmsg with SCM_RIGHTS, pidfd_getfd), changes its close-on-exec flag
(fcntl F_SETFD, ioctl FIOCLEX/FIONCLEX, close_range CLOSE_RANGE_CLOEXEC) or
ends it (close, close_range, an exec for close-on-exec descriptors). Each
process's descriptor table is replayed from that record: a child starts with
a copy of its parent's (a thread or CLONE_FILES shares it), and an exec keeps
only the descriptors without close-on-exec.

The tracked objects are the supervisor connections (a socket connect()ed to
the supervisor's path in the trace, or the client end the live sample found)
and the session's directory (the path strace decodes the descriptor to). A
process held one when it ran a program with it: kept across its exec, or
taken after its exec; a process that never exec'd runs the runtime's own
image in a copy, and holds what its table has when it ends (the instant
between a fork and the exec that follows is not a holding: close-on-exec
copies go with the exec, and what the exec keeps is judged there). Judged as
the live sample judges: only the runtime itself, and the fixed helper with the
connection as fd 3 and the directory as fd 4 when it exec'd; anything a
process sent by SCM_RIGHTS of either, but the helper's directory in START,
is a hand-off too.

A trace that cannot say fails with the reason, never passes: strace missing,
gone or complaining before the end, a trace cut at its read bound, a process
or thread whose creation the trace did not record or created untraced
(CLONE_UNTRACED), a process of the tree at the sample or at the end that was
not followed, io_uring used by any process but the runtime (its operations
open and close descriptors no system call shows), or the replayed tables
disagreeing with what strace decoded a descriptor to, or with what the live
sample saw. The trace is parsed here, never shown; only pids, descriptor
numbers, the executables exec'd (escaped, bounded) and the tracked objects
reach the evidence.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from pty_acceptance.host import strace
from pty_acceptance.host.terminal import escape

CONNECTION, DIRECTORY = "connection", "directory"
NEVER_EXECD = "the runtime's image in a copy (never exec'd)"
ALREADY_RUNNING = "? (a process of the runtime's, already running when the trace began)"

_SOCKET_DESC = re.compile(r"[A-Za-z0-9_-]+:\[(\d+)(?:->\d+)?(?:,.*)?\]")
_FD_TOKEN = re.compile(r"(?<![\w#])(\d+)<#(\d+)>")
_UNKNOWN = re.compile(r"\) += \?$")
_RETURNS = re.compile(r"\) +=\s")
_RESULT = re.compile(r"\) += (-?\d+|0x[0-9a-f]+|\?)(?:<#(\d+)>)?(?: (E[A-Z0-9]+))?.*$")
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./+-]*")
_SUN_PATH = re.compile(r'sun_path="((?:[^"\\]|\\.)*)"')
_EXEC_PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')
_CMSG = re.compile(r"cmsg_type=SCM_RIGHTS, cmsg_data=\[([^\]]*)\]")
_FLAGS = re.compile(r"flags=([A-Z0-9_|]+)")
_FIRST_INT = re.compile(r"\s*(-?\d+)")
_RANGE = re.compile(r"\s*(\d+|~0U?), (\d+|~0U?), ([A-Z_|0-9]+)")

FD_CALLS = ("open", "openat", "openat2", "creat", "open_by_handle_at", "socket", "accept", "accept4",
            "dup", "dup2", "dup3", "pidfd_getfd")
CLONES = ("clone", "clone3", "fork", "vfork")
EXECS = ("execve", "execveat")
URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")
# every call runtimetrace.attach asks strace for
TRACED = (EXECS + CLONES + FD_CALLS + URING
          + ("close", "close_range", "fcntl", "ioctl", "socketpair", "connect", "recvmsg", "recvmmsg",
             "sendmsg", "sendmmsg", "unshare"))


@dataclass(frozen=True)
class Obj:
    """A tracked object: a supervisor connection (its client socket inode) or the directory."""
    kind: str
    ident: str

    def __str__(self) -> str:
        return (f"the supervisor connection socket:[{self.ident}]" if self.kind == CONNECTION
                else f"the session's directory {self.ident}")


@dataclass(frozen=True)
class Held:
    pid: int
    image: str
    obj: Obj
    fd: int
    how: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.image}) held {self.obj} as fd {self.fd}: {self.how}"


@dataclass
class Judgement:
    """What the trace says of one session: every holding by a process other
    than the runtime (`held`), those not allowed (`findings`), why it cannot
    say (`cannot_say`: each fails), what each process of the tree ran and how
    it ended (`processes`, evidence), every SCM_RIGHTS send of a tracked
    object (`sent`) and what the runtime itself held (`runtime_held`)."""
    held: list[Held] = field(default_factory=list)
    findings: list[tuple[str, str]] = field(default_factory=list)  # (kind of the object, what)
    cannot_say: list[str] = field(default_factory=list)
    processes: dict[int, str] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    runtime_held: list[str] = field(default_factory=list)

    def holdings(self, kind: str) -> list[str]:
        return [str(h) for h in self.held if h.obj.kind == kind]

    def findings_of(self, kind: str) -> list[str]:
        return [what for k, what in self.findings if k == kind]


@dataclass(frozen=True)
class Sampled:
    """What the live sample saw a process of the runtime's tree hold."""
    pid: int
    fd: int
    kind: str
    ident: str


def _shown(text: str, limit: int = 200) -> str:
    return escape(text[:limit])


class _Replay:
    """The descriptor tables of the runtime's tree, replayed from the trace."""

    def __init__(self, main: int, tids: dict[int, int], classify, helper_path: str):
        self.main, self.classify, self.helper_path = main, classify, helper_path
        self.tgid: dict[int, int] = dict(tids)
        self.tables: dict[int, dict[int, tuple[Obj, bool]]] = {}
        for tid, group in tids.items():
            self.tables[tid] = self.tables.setdefault(group, {})  # a process's threads share one table
        self.image: dict[int, str | None] = {g: "the runtime" if g == main else ALREADY_RUNNING
                                             for g in tids.values()}
        self.ever: set[tuple[int, int, Obj]] = set()
        self.ends: dict[int, str] = {}
        self.out = Judgement()
        self._unknown: set[int] = set()

    # ---------------------------------------------------------------- tables
    def group(self, tid: int, line: int) -> int:
        if tid not in self.tgid:
            if tid not in self._unknown:
                self._unknown.add(tid)
                self.out.cannot_say.append(f"pid {tid} shows in the trace (line {line + 1}) without a traced "
                                           "creation: a process or thread the trace did not follow from its start")
            self.tgid[tid] = tid
            self.tables[tid] = {}
            self.image.setdefault(tid, "? (not followed from its start)")
        return self.tgid[tid]

    def put(self, tid: int, fd: int, obj: Obj | None, cloexec: bool, how: str) -> None:
        table = self.tables[tid]
        if obj is None:
            table.pop(fd, None)
            return
        table[fd] = (obj, cloexec)
        g = self.tgid[tid]
        self.ever.add((g, fd, obj))
        if g == self.main:
            self.out.runtime_held.append(f"{obj} as fd {fd}{' (close-on-exec)' if cloexec else ''}: {how}")
        elif self.image.get(g) is not None:
            self.hold(g, fd, obj, f"took it by {how} after its exec")

    def hold(self, g: int, fd: int, obj: Obj, how: str) -> None:
        self.out.held.append(Held(g, _shown(self.image.get(g) or NEVER_EXECD), obj, fd, how))

    def mention(self, tid: int, fd: int, desc: str, line: int) -> None:
        """strace decoded descriptor `fd` of `tid` to `desc` when the call began:
        the replayed table must agree (a tracked object exactly where it says)."""
        obj, had = self.classify(desc), self.tables[tid].get(fd)
        if obj is not None and (had is None or had[0] != obj):
            self.out.cannot_say.append(f"pid {tid} used {obj} as fd {fd} (line {line + 1}), but the trace "
                                       f"never showed that process getting it there")
        elif obj is None and had is not None:
            self.out.cannot_say.append(f"pid {tid}'s fd {fd} was {_shown(desc, 80)} (line {line + 1}), but the "
                                       f"trace showed it holding {had[0]} there: a call it did not record")

    # ---------------------------------------------------------------- events
    def begin(self, c: strace.Call) -> None:
        """What the call's first half says: the descriptors as they were, and a
        new process's table (a copy of its parent's at the clone)."""
        self.group(c.tid, c.entered)
        skel, descs = strace.skeleton(c.head)
        inputs = _args(skel)  # not what it returned
        if c.name == "socketpair":
            inputs = ""
        elif c.name in ("recvmsg", "recvmmsg"):  # the descriptors it received are new
            inputs = skel.split(",", 1)[0]
        for m in _FD_TOKEN.finditer(inputs):
            self.mention(c.tid, int(m.group(1)), descs[int(m.group(2))], c.entered)
        if c.name in CLONES:
            self.clone(c)

    def clone(self, c: strace.Call) -> None:
        skel, _ = strace.skeleton(c.body)
        child = _result(skel)[0]
        if child is None or child <= 0:
            return
        flags = set(m.group(1).split("|")) if (m := _FLAGS.search(skel)) else set()
        if "CLONE_UNTRACED" in flags:
            self.out.cannot_say.append(f"pid {c.tid} created pid {child} with CLONE_UNTRACED (line {c.entered + 1}): "
                                       "a process strace could not follow")
        parent = self.tgid[c.tid]
        self.tgid[child] = parent if "CLONE_THREAD" in flags else child
        if "CLONE_FILES" in flags or "CLONE_THREAD" in flags:
            self.tables[child] = self.tables[c.tid]
        else:
            self.tables[child] = dict(self.tables[c.tid])
        if "CLONE_THREAD" not in flags:
            self.image[child] = None
            for fd, (obj, _) in self.tables[child].items():
                self.ever.add((child, fd, obj))

    def complete(self, c: strace.Call) -> None:
        """What the call did, once it returned."""
        skel, descs = strace.skeleton(c.body)
        value, res_desc, err = _result(skel)
        g = self.tgid[c.tid]
        name = c.name
        if name in URING and g != self.main:
            self.out.cannot_say.append(f"pid {g} ({_shown(self.image.get(g) or NEVER_EXECD)}) called {name}: what "
                                       "it does through io_uring opens and closes descriptors no call shows")
        if name in EXECS and value is None and _UNKNOWN.search(skel):
            # killed inside its exec (strace saw no return): it never ran another instruction of
            # the old image, so it is judged as exec'd, by what the exec would have kept
            self.exec(c, g, skel, descs, " (killed inside that exec)")
            return
        if value is None or value < 0:
            if name == "close" and err == "EBADF":
                fd = _first_int(skel)
                if fd is not None and fd in self.tables[c.tid]:
                    self.out.cannot_say.append(f"pid {c.tid} closed fd {fd} (line {c.done + 1}) and got EBADF, "
                                               f"but the trace showed it holding {self.tables[c.tid][fd][0]}")
            elif name == "close" and value is not None:  # closed on Linux whatever it returned
                fd = _first_int(skel)
                if fd is not None:
                    self.tables[c.tid].pop(fd, None)
            return
        if name in EXECS:
            self.exec(c, g, skel, descs)
        elif name == "close":
            fd = _first_int(skel)
            if fd is not None:
                self.tables[c.tid].pop(fd, None)
        elif name == "close_range":
            self.close_range(c, skel)
        elif name in FD_CALLS or (name == "fcntl" and re.search(r", F_DUPFD(_CLOEXEC)?,", skel)):
            self.new_fd(c, skel, descs, value, res_desc)
        elif name == "fcntl" and ", F_SETFD, " in skel:
            self.set_cloexec(c, skel, skel.split(", F_SETFD, ", 1)[1].split(")")[0].strip() != "0")
        elif name == "ioctl" and re.search(r", FIO(N?)CLEX\)", skel):
            self.set_cloexec(c, skel, ", FIOCLEX)" in skel)
        elif name == "socketpair":
            cloexec = "SOCK_CLOEXEC" in skel.split(", [", 1)[0]
            for m in _FD_TOKEN.finditer(skel.split(", [", 1)[-1]):
                self.put(c.tid, int(m.group(1)), self.classify(descs[int(m.group(2))]), cloexec, "socketpair")
        elif name in ("recvmsg", "recvmmsg"):
            cloexec = "MSG_CMSG_CLOEXEC" in skel.rsplit("}", 1)[-1]
            for cm in _CMSG.finditer(skel):
                for m in _FD_TOKEN.finditer(cm.group(1)):
                    self.put(c.tid, int(m.group(1)), self.classify(descs[int(m.group(2))]), cloexec,
                             f"{name} (SCM_RIGHTS)")
        elif name in ("sendmsg", "sendmmsg"):
            self.send(c, g, skel, descs)
        elif name == "unshare" and "CLONE_FILES" in skel:
            self.tables[c.tid] = dict(self.tables[c.tid])

    def new_fd(self, c: strace.Call, skel: str, descs: list[str], value: int, res_desc: int | None) -> None:
        name = c.name
        args = _args(skel)
        if name in ("dup", "dup2", "dup3", "fcntl"):
            old = _first_int(skel)
            if name == "dup2" and old == value:
                return  # dup2(fd, fd) changes nothing, not even close-on-exec
            src = self.tables[c.tid].get(old) if old is not None else None
            cloexec = (name == "dup3" and "O_CLOEXEC" in args) or (name == "fcntl" and "F_DUPFD_CLOEXEC" in args)
            self.put(c.tid, value, src[0] if src else None, cloexec, name)
            return
        if value in self.tables[c.tid]:
            self.out.cannot_say.append(f"pid {c.tid} got a new fd {value} from {name} (line {c.done + 1}), but the "
                                       f"trace showed it still holding {self.tables[c.tid][value][0]} there")
        obj = self.classify(descs[res_desc]) if res_desc is not None else None
        cloexec = (name == "pidfd_getfd" or "O_CLOEXEC" in args or "SOCK_CLOEXEC" in args)
        self.put(c.tid, value, obj, cloexec, name)

    def set_cloexec(self, c: strace.Call, skel: str, on: bool) -> None:
        fd = _first_int(skel)
        table = self.tables[c.tid]
        if fd is not None and fd in table:
            table[fd] = (table[fd][0], on)

    def close_range(self, c: strace.Call, skel: str) -> None:
        m = _RANGE.match(skel)
        if not m:
            self.out.cannot_say.append(f"pid {c.tid}: close_range as printed (line {c.done + 1}) cannot be read")
            return
        first, last = (int(x) if x[0] != "~" else 2 ** 32 - 1 for x in m.group(1, 2))
        flags = m.group(3)
        if "CLOSE_RANGE_UNSHARE" in flags:
            self.tables[c.tid] = dict(self.tables[c.tid])
        table = self.tables[c.tid]
        for fd in [fd for fd in table if first <= fd <= last]:
            if "CLOSE_RANGE_CLOEXEC" in flags:
                table[fd] = (table[fd][0], True)
            else:
                del table[fd]

    def exec(self, c: strace.Call, g: int, skel: str, descs: list[str], note: str = "") -> None:
        if c.name == "execve":
            m = _EXEC_PATH.match(c.body)
            image = m.group(1) if m else "?"
        else:  # execveat(dirfd, path, ...): the descriptor's file with AT_EMPTY_PATH
            m = _FD_TOKEN.match(skel)
            image = descs[int(m.group(2))] if m and "AT_EMPTY_PATH" in skel else "? (execveat)"
        kept = {fd: (obj, False) for fd, (obj, cloexec) in self.tables[c.tid].items() if not cloexec}
        for tid, group in list(self.tgid.items()):
            if group == g and tid != c.tid:
                self.tables[tid] = kept  # the other threads are gone; the table is the process's own now
        self.tables[c.tid] = kept
        if g == self.main:
            self.image[g] = "the runtime"
            return
        self.image[g] = image
        for fd, (obj, _) in sorted(kept.items()):
            self.hold(g, fd, obj, f"kept it across its exec of {_shown(image)}{note}")

    def send(self, c: strace.Call, g: int, skel: str, descs: list[str]) -> None:
        on = _FD_TOKEN.match(skel)
        where = f"fd {on.group(1)} ({_shown(descs[int(on.group(2))], 80)})" if on else "?"
        for cm in _CMSG.finditer(skel):
            for m in _FD_TOKEN.finditer(cm.group(1)):
                held = self.tables[c.tid].get(int(m.group(1)))
                if held is not None:
                    self.out.sent.append(f"pid {g} ({_shown(self.image.get(g) or NEVER_EXECD)}) sent {held[0]} "
                                         f"(its fd {m.group(1)}) by SCM_RIGHTS on {where}")
                    if not (self.image.get(g) == self.helper_path and held[0].kind == DIRECTORY):
                        self.out.findings.append((held[0].kind, self.out.sent[-1] + ": only the fixed helper "
                                                  "may pass a descriptor, and only the directory"))

    def end(self, e: strace.Ended) -> None:
        if e.superseded_by is not None:
            return
        g = self.tgid.get(e.tid)
        if g is None or (e.tid != g):
            return  # a thread: its process goes on
        self.ends[g] = e.what
        self.finish(g, f"when it ended ({_shown(e.what, 60)})")

    def finish(self, g: int, when: str) -> None:
        if g == self.main or self.image.get(g) is not None:
            return
        for fd, (obj, _) in sorted(self.tables.get(g, {}).items()):
            self.hold(g, fd, obj, f"held it {when} without having exec'd")


def _result(skel: str) -> tuple[int | None, int | None, str | None]:
    """(return value, index of its decoded description, errno name) of a skeleton
    (its last ') = ': nothing a process chose is left in a skeleton to look like one)."""
    ends = [m.start() for m in _RETURNS.finditer(skel)]
    m = _RESULT.match(skel, ends[-1]) if ends else None
    if not m or m.group(1) == "?":
        return None, None, None
    return int(m.group(1), 0), int(m.group(2)) if m.group(2) else None, m.group(3)


def _args(skel: str) -> str:
    """A skeleton without what the call returned (strace pads ' = ' to a column)."""
    ends = [m.start() for m in _RETURNS.finditer(skel)]
    return skel[:ends[-1]] if ends else skel


def _first_int(skel: str) -> int | None:
    m = _FIRST_INT.match(skel)
    return int(m.group(1)) if m else None


def judge(text: str, *, main: int, tids: dict[int, int], socket_path: str, workspace: str,
          connections: set[int], helper_path: str, sampled: Sequence[Sampled] = (),
          tree_at_sample: Collection[int] = frozenset(), problems: Sequence[str] = ()) -> Judgement:
    """The trace of the runtime `main` (its threads and the processes followed
    from the attach: `tids`, tid -> its process), judged.

    `connections` are the client ends of supervisor connections the live sample
    found; sockets connect()ed to `socket_path` in the trace count too.
    `sampled` is what the live sample saw processes of the runtime's tree hold
    (`tree_at_sample`: those processes): each must be in the trace. `problems`
    are the tracer's own reasons it cannot say (attached_trace.Tracer.end)."""
    calls, ended, other = strace.events(text)
    conns = set(connections)
    for c in calls:
        if c.name == "connect":
            skel, descs = strace.skeleton(c.body)
            value, _, err = _result(skel)
            path = _SUN_PATH.search(c.body)
            first = _FD_TOKEN.match(skel)
            if path and path.group(1) == socket_path and first and (value == 0 or err == "EINPROGRESS"):
                if m := _SOCKET_DESC.fullmatch(descs[int(first.group(2))]):
                    conns.add(int(m.group(1)))

    def classify(desc: str) -> Obj | None:
        if desc == workspace:
            return Obj(DIRECTORY, workspace)
        m = _SOCKET_DESC.fullmatch(desc)
        return Obj(CONNECTION, m.group(1)) if m and int(m.group(1)) in conns else None

    r = _Replay(main, tids, classify, helper_path)
    r.out.cannot_say.extend(problems)
    if not _PLAIN_PATH.fullmatch(workspace):
        r.out.cannot_say.append(f"the directory's path {_shown(workspace)!r} is not one strace prints as it is: "
                                "its descriptors cannot be told in the trace")
    if other:
        r.out.cannot_say.append(f"{len(other)} lines of the trace are no system call strace prints "
                                f"(first: {_shown(other[0], 120)!r})")
    # in the order strace printed them: a call's first half where it began, its effect where it returned
    steps = sorted([(c.entered, 0, i) for i, c in enumerate(calls)]
                   + [(c.done, 1, i) for i, c in enumerate(calls) if c.done >= 0]
                   + [(e.line, 2, i) for i, e in enumerate(ended)])
    for _, phase, i in steps:
        if phase == 0:
            r.begin(calls[i])
        elif phase == 1:
            r.complete(calls[i])
        else:
            r.end(ended[i])
    for g in sorted({g for g in r.tgid.values()}):
        if g not in r.ends:
            r.finish(g, "at the end of the trace")
    _judge_holdings(r, helper_path)
    _against_the_sample(r, sampled, tree_at_sample)
    for g in sorted(set(r.tgid.values())):
        ran = "the runtime" if g == main else (r.image.get(g) or NEVER_EXECD)
        r.out.processes[g] = f"{_shown(ran)}; {_shown(r.ends.get(g, 'alive at the end of the trace'), 60)}"
    return r.out


def _judge_holdings(r: _Replay, helper_path: str) -> None:
    helpers = sorted({h.pid for h in r.out.held if r.image.get(h.pid) == helper_path})
    for h in r.out.held:
        if h.pid in helpers and len(helpers) == 1:
            at_exec = h.how.startswith("kept it across its exec")
            want = 3 if h.obj.kind == CONNECTION else 4
            if not at_exec or h.fd == want:
                continue
            r.out.findings.append((h.obj.kind, f"{h}: the fixed helper may get it only as fd {want}"))
        elif h.pid in helpers:
            r.out.findings.append((h.obj.kind, f"{h}: {len(helpers)} processes ran the fixed helper holding it "
                                               f"(pids {helpers}), only one may"))
        else:
            r.out.findings.append((h.obj.kind, f"{h}: only the runtime and the fixed helper may hold it"))


def _against_the_sample(r: _Replay, sampled: Sequence[Sampled], tree: Collection[int]) -> None:
    for pid in sorted(tree):
        if pid not in r.tgid.values():
            r.out.cannot_say.append(f"pid {pid}, of the runtime's tree at the live sample, is not in the trace")
    for s in sampled:
        obj = Obj(s.kind, s.ident)
        if s.pid in r.tgid.values() and (s.pid, s.fd, obj) not in r.ever:
            r.out.cannot_say.append(f"the live sample saw pid {s.pid} hold {obj} as fd {s.fd}; the trace never "
                                    "showed it there")
