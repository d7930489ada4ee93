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
