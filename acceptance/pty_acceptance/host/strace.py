"""strace on this host: where it is, and its -f output read into system calls.

Both tracers of the suite read their trace here: the fixed helper run under
strace (supervisor/helpertrace.py: -f -v -xx, every string in hex) and the
candidate runtime strace attaches to (candidate/runtimetrace.py: -f -yy,
descriptors decoded). A line is `<tid> <call>(<args>) = <result>`; a call
another thread interrupted is printed as `<call>(<args> <unfinished ...>`
and later `<... call resumed><rest>`, which parse() joins into one call
(`whole` False). Everything read here is hostile text: nothing is
unescaped but the hex strings of -xx, decoded to bytes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from pty_acceptance.host import programs

# A string as -xx prints it (every byte in hex), and "..." when -s cut it.
HEX_STRING = re.compile(r'"((?:\\x[0-9a-f]{2})*)"(\.\.\.)?')
_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^([a-z_0-9]+)\((.*)$")
_RESUMED = re.compile(r"^<\.\.\. ([a-z_0-9]+) resumed>(.*)$")
UNREAD_ENTRY = "???( <unfinished ...>"  # strace could not read the thread's registers at a call's entry
# ... or at a call it then printed whole, no call and no result (a good trixie host's bun thread, ended
# by its process's exit_group under load): taken as UNREAD_ENTRY is
_UNREAD_WHOLE = re.compile(r"\?\?\?\(\)\s+= \?")
_RET = re.compile(r"\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)(?:\s+(E[A-Z0-9]+))?[^)]*(?:\))?\s*$")


def installed() -> str | None:
    """strace's absolute path (programs.path), or None when it is not installed."""
    path = programs.path("strace")
    return path if os.path.isfile(path) else None


def unhex(s: str) -> bytes:
    return bytes.fromhex(s.replace("\\x", ""))


@dataclass
class Syscall:
    pid: int
    name: str
    args: str
    ret: int | None
    err: str | None
    whole: bool = True  # printed on one line (not <unfinished ...>, then resumed)
    result: str = ""    # the text after the arguments as printed: ") = 0", ")   = -1 EAGAIN (...)"

    def strings(self) -> list[bytes]:
        """The -xx strings among the arguments, decoded."""
        return [unhex(m.group(1)) for m in HEX_STRING.finditer(self.args)]

    def first_int(self) -> int | None:
        m = re.match(r"\s*(-?\d+)", self.args)
        return int(m.group(1)) if m else None

    def show(self, limit: int = 160) -> str:
        args = HEX_STRING.sub(lambda m: repr(unhex(m.group(1))[:48]) + ("..." if m.group(2) else ""),
                              self.args)
        return f"{self.pid} {self.name}({args[:limit]}) = {self.ret}{' ' + self.err if self.err else ''}"


def parse(text: str) -> tuple[list[Syscall], list[str]]:
    """strace -f output -> (system calls in completion order, other lines)."""
    calls: list[Syscall] = []
    other: list[str] = []
    pending: dict[int, tuple[str, str]] = {}
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            other.append(raw)
            continue
        pid, rest = int(m.group(1)), m.group(2)
        if rest.startswith(("---", "+++")):
            other.append(raw)
            continue
        r = _RESUMED.match(rest)
        if r:
            name, body = pending.pop(pid, (r.group(1), ""))
            rest = f"{name}({body}{r.group(2)}"
        if rest.endswith("<unfinished ...>"):
            c = _CALL.match(rest)
            if c:
                pending[pid] = (c.group(1), c.group(2)[: -len("<unfinished ...>")].rstrip())
            continue
        c = _CALL.match(rest)
        if not c:
            other.append(raw)
            continue
        name, body = c.group(1), c.group(2)
        ret = _RET.search(body)
        if ret:
            args = body[: ret.start()]
            value = ret.group(1)
            num = None if value == "?" else int(value, 0)
            calls.append(Syscall(pid, name, args, num, ret.group(2), not r, ret.group(0)))
        else:
            calls.append(Syscall(pid, name, body, None, None, not r))
    for pid, (name, body) in pending.items():
        calls.append(Syscall(pid, name, body, None, "unfinished", False))
    return calls, other


# ------------------------------------------------------------------ every call, in order
_PID_CHANGED = re.compile(r"^(.*) <pid changed to (\d+) \.\.\.>$")
_ENDED = re.compile(r"^\+\+\+ (.*) \+\+\+$")
_SUPERSEDED = re.compile(r"^superseded by execve in pid (\d+)$")
_SOCKETLIKE = re.compile(r"[A-Za-z0-9_-]+:\[")


@dataclass
class Call:
    """One system call of a -f trace, its two halves joined when another thread
    interrupted it: `body` is everything after `name(`, `head` the part printed
    when it began (what -yy decoded then), `entered` and `done` the line numbers
    where it began and completed (equal when printed whole; done is -1 when the
    trace ended before it completed)."""
    tid: int
    name: str
    body: str
    head: str
    entered: int
    done: int


@dataclass
class Ended:
    """A `+++ ... +++` line: the thread exited, was killed, or was superseded by
    an exec in another thread of its process (`superseded_by`)."""
    line: int
    tid: int
    what: str
    superseded_by: int | None = None


EXEC_CALLS = ("execve", "execveat")


def events(text: str) -> tuple[list[Call], list[Ended], list[str]]:
    """A -f trace read whole: its calls (joined, in the order they completed;
    unfinished at the end: done -1), its +++ lines, and the lines it could not
    read (neither a call nor a +++ nor a --- signal line).

    `TID ???( <unfinished ...>` (or `TID ???() = ?`) is strace failing to read a thread's registers
    at a system call's entry: the thread was already gone (a process killed
    while its threads are in the kernel; seen on the reference host under
    load, the fixed helper's Go threads at its SIGTERM). It is no call when
    that thread's +++ line follows with no `<... ??? resumed>` for it; anything
    else of the kind (resumed, or no end seen) is a line it could not read."""
    calls: list[Call] = []
    ended: list[Ended] = []
    other: list[str] = []
    pending: dict[int, tuple[str, str, int]] = {}
    unread: dict[int, str] = {}  # tid -> its `???( <unfinished ...>` line, until the thread's end
    for n, raw in enumerate(text.splitlines()):
        m = _LINE.match(raw)
        if not m:
            other.append(raw)
            continue
        tid, rest = int(m.group(1)), m.group(2)
        if rest.startswith("---"):
            continue
        if rest == UNREAD_ENTRY or _UNREAD_WHOLE.fullmatch(rest):
            if tid in unread:
                other.append(unread[tid])
            unread[tid] = raw
            continue
        if e := _ENDED.match(rest):
            s = _SUPERSEDED.match(e.group(1))
            ended.append(Ended(n, tid, e.group(1), int(s.group(1)) if s else None))
            unread.pop(tid, None)  # gone at that entry: the call never ran
            if s and pending.get(int(s.group(1)), ("",))[0] in EXEC_CALLS:
                # the exec of thread T (its unfinished line printed before strace knew its pid would
                # change: the Go launcher under load) resumes as the leader's, this tid: the leader's
                # own unfinished call never completes
                if tid in pending:
                    name, head, entered = pending.pop(tid)
                    calls.append(Call(tid, name, head, head, entered, -1))
                pending[tid] = pending.pop(int(s.group(1)))
            continue
        if tid in unread:  # the thread went on after a call strace could not read
            other.append(unread.pop(tid))
        r = _RESUMED.match(rest)
        if r:
            if tid not in pending:
                other.append(raw)
                continue
            name, head, entered = pending.pop(tid)
            if name != r.group(1):
                other.append(raw)
                continue
            calls.append(Call(tid, name, head + r.group(2), head, entered, n))
            continue
        c = _CALL.match(rest)
        if not c:
            other.append(raw)
            continue
        name, body = c.group(1), c.group(2)
        if body.endswith("<unfinished ...>"):
            pending[tid] = (name, body[: -len("<unfinished ...>")].rstrip(" "), n)
        elif body.endswith("<detached ...>"):  # strace let go of it in the call: it never completed here
            head = body[: -len("<detached ...>")].rstrip(" ")
            calls.append(Call(tid, name, head, head, n, -1))
        elif moved := _PID_CHANGED.match(body):  # an exec by a thread that now takes the leader's pid
            pending[int(moved.group(2))] = (name, moved.group(1).rstrip(" "), n)
        else:
            calls.append(Call(tid, name, body, body, n, n))
    for tid, (name, head, entered) in pending.items():
        calls.append(Call(tid, name, head, head, entered, -1))
    other.extend(unread.values())  # no end of the thread seen after it
    return calls, ended, other


def skeleton(body: str) -> tuple[str, list[str]]:
    """A call's text with every quoted string replaced by `""` and every
    descriptor -yy decoded (`3</path>`, `AT_FDCWD</dir>`, `5<UNIX-STREAM:[1->2]>`)
    by `<#k>`, k indexing the descriptions returned: what is left holds no text a
    process chose, so its numbers and flags can be read by pattern. A path's own
    '<' and '>' are escaped by strace (\\74, \\76); a socket's description is
    closed by the ']' that matches its '['."""
    out: list[str] = []
    descs: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == '"':
            j = i + 1
            while j < n and body[j] != '"':
                j += 2 if body[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "<" and i > 0 and (body[i - 1].isalnum() or body[i - 1] == "_"):
            end = _description_end(body, i)
            if end is None:
                out.append(body[i:])
                break
            descs.append(body[i + 1:end])
            out.append(f"<#{len(descs) - 1}>")
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out), descs


def _description_end(body: str, start: int) -> int | None:
    """The index of the '>' that closes the description opened at body[start] ('<')."""
    n = len(body)
    if _SOCKETLIKE.match(body, start + 1):
        j, depth = body.index("[", start) + 1, 1
        while j < n and depth:
            if body[j] == '"':
                j += 1
                while j < n and body[j] != '"':
                    j += 2 if body[j] == "\\" else 1
            elif body[j] == "[":
                depth += 1
            elif body[j] == "]":
                depth -= 1
            j += 1
        return j if j < n and body[j] == ">" and not depth else None
    depth, j = 0, start
    while j < n:
        if body[j] == "<":
            depth += 1
        elif body[j] == ">":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return None
