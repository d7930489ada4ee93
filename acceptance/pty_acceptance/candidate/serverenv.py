"""server.env, read safely (CUT-3) and used for the candidate's Basic auth
and, as the runtime's only environment, by RUNTIME-2.

The path is walked from / without following a link in any component
(hostfs: a directory of the path made a link is itself the finding); the file
is judged by lstat (a symlink is itself the finding, and so is a hard link:
a file with more than one link, whose other names may be root's) and read through an
O_NOFOLLOW descriptor whose fstat must be the same regular file, at most
MAX_SIZE bytes. Lines are read the way systemd's EnvironmentFile= reads the
simple cases: blank lines and lines starting with ``#`` or ``;`` are ignored,
leading whitespace is dropped, the last assignment of a key wins, a value
wrapped in matching single or double quotes is unquoted.

The password never appears in evidence, a message or a repr: it is held by a
Secret whose str/repr is ``<redacted>``; only ``reveal()`` gives it out, for
the API client.

The variables it sets (CUT-3, RUNTIME-2): every name must be one of
`cutover.environment`, and none the contract's floor refuses
(spec/floor.py LOADS_CODE: NODE_OPTIONS, LD_PRELOAD, ...), since the file is the
runtime's only environment and the service user's own. The names are read as
a superset of what systemd's EnvironmentFile= parser assigns: systemd ends a
line at "\n" or "\r" and starts a name only at a line's start (after blanks),
up to "=" (blanks around it trimmed), so every physical line that is not
blank or a comment is judged by the text before its first "=", and a line
with none (what systemd ignores, or the continuation of a value it joins) is
a finding of its own. Where the two differ the suite is the stricter: a
refused name inside a multi-line value still fails. A finding shows a name
bounded and escaped and the line number, never anything after "=".

The live candidate (CUT-2): `live_environment` reads /proc/<pid>/environ of
the identified listener, bounded, as root (the process is the service user's:
hostile input), and `refused_in` names what the floor refuses in it (the
environment systemd gave it: an administrator's Environment= drop-in, a
restart with an edited server.env). What it reads is the process's initial
environment block, which the process itself can overwrite after it started:
a variable there is proof, its absence only that none was left visible.
So `changed_since` asks the question the process cannot answer for itself:
whether server.env, and every directory from / down to it that anyone but
root could put another at, is unchanged since before the process started
(each one's ctime, which only the kernel sets and every write, rename, link,
chmod or entry made or removed inside a directory moves,
older than the process's start by STEADY_S). If so, what systemd read for it
is what CUT-3 judged now; if not (a restart with an edited server.env, the
file put back afterwards: a red team's round five, whose preload then renamed
NODE_OPTIONS in its own environ block through /proc/self/mem), what it was started with is
unknown and it is not judged.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import cgroups, hostfs, proc
from pty_acceptance.host.terminal import escape
from pty_acceptance.spec import floor

KEY = floor.PASSWORD_VARIABLE
MAX_SIZE = 64 * 1024
ENVIRON_LIMIT = 1 << 20  # /proc/<pid>/environ read at most (a larger one is refused)
NAME_SHOWN = 64  # characters of a name a finding shows (escaped)
NAMES_SHOWN = 8  # findings on names listed before "and N more"
_LINE_END = re.compile(rb"\r\n|[\r\n]")
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__

    def __reduce__(self):  # never pickled / copied out by accident
        raise TypeError("a Secret cannot be serialised")


@dataclass(frozen=True)
class ServerEnv:
    path: str
    kind: str                    # "regular file", "symlink", "absent", ...
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    assignments: int = 0         # how many OPENCODE_PASSWORD= lines
    has_password: bool = False   # the last one has a non-empty value
    problem: str | None = None   # why the content could not be judged
    variables: tuple[tuple[int, str | None], ...] = ()  # (line, name before "=", or None: no "=")
    password: Secret | None = field(default=None, repr=False, compare=False)
    content: Secret | None = field(default=None, repr=False, compare=False)  # the whole file

    def describe(self) -> str:
        """Evidence: never the password, never any line's value."""
        if self.mode is None:
            head = f"{self.path}: {self.kind}"
        else:
            head = (f"{self.path}: {self.kind} uid={self.uid} gid={self.gid} "
                    f"mode={self.mode:04o} size={self.size}")
        tail = (f", {KEY}= lines: {self.assignments}, "
                f"non-empty value: {'yes' if self.has_password else 'no'}")
        if self.problem:
            tail += f", content not judged: {self.problem}"
        elif self.variables:
            sets = [shown_name(n) if n is not None else f"line {i}: no =" for i, n in self.variables]
            tail += f", sets: {', '.join(sets[:NAMES_SHOWN])}" + (
                f" and {len(sets) - NAMES_SHOWN} more" if len(sets) > NAMES_SHOWN else "")
        return head + tail


def shown_name(name: str) -> str:
    """A variable's name as a finding shows it: bounded, escaped, quoted when odd."""
    cut = name[:NAME_SHOWN]
    text = cut if floor.ENV_NAME.match(cut) else escape(repr(cut))
    return text + (f"... ({len(name)} characters)" if len(name) > NAME_SHOWN else "")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISREG, "regular file"),
                       (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def variables(data: bytes) -> tuple[tuple[int, str | None], ...]:
    """(line number, name) of every line that is not blank or a comment: the
    text before its first "=" with blanks trimmed (None: no "="). A superset of
    the names systemd's EnvironmentFile= assigns (the module's docstring)."""
    out: list[tuple[int, str | None]] = []
    for number, raw in enumerate(_LINE_END.split(data), 1):
        line = raw.lstrip(b" \t")
        if not line or line[:1] in (b"#", b";"):
            continue
        name, eq, _ = line.partition(b"=")
        out.append((number, name.rstrip(b" \t").decode("utf-8", "surrogateescape") if eq else None))
    return tuple(out)


def unlike_systemd(data: bytes) -> list[int]:
    """The lines (numbers) this module would read otherwise than systemd's
    EnvironmentFile= does (a blind red team's round seven: `KEY=\\` then a line
    that systemd joins to it as the rest of the password, which this module took
    for a variable's name and showed): a value holding a backslash (an escape, a
    line continuation), or a quote anywhere but around the whole value (quoted
    text joined to what follows, a quoted value over lines). Such a file is not
    judged line by line, and nothing of it is shown."""
    out = []
    for number, raw in enumerate(_LINE_END.split(data), 1):
        line = raw.strip(b" \t")
        if not line or line[:1] in (b"#", b";"):
            continue
        value = line.partition(b"=")[2].strip(b" \t")
        quoted = len(value) >= 2 and value[:1] in (b"'", b'"') and value[-1:] == value[:1] \
            and not any(q in value[1:-1] for q in (b"'", b'"'))
        if b"\\" in line or (not quoted and (b"'" in value or b'"' in value)) or (b"=" not in line and (
                b"'" in line or b'"' in line)):
            out.append(number)
    return out


def parse(data: bytes) -> tuple[int, Secret | None, str | None]:
    """(number of KEY= assignments, the last value or None, problem)."""
    count, last, problem = 0, None, None
    for raw in _LINE_END.split(data):
        line = raw.lstrip(b" \t")
        if not line.startswith(KEY.encode() + b"="):
            continue
        count += 1
        value = line[len(KEY) + 1:].rstrip(b" \t")
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            last, problem = None, f"the last {KEY}= value is not UTF-8"
            continue
        if "\0" in text:
            last, problem = None, f"the last {KEY}= value holds a NUL byte"
            continue
        last, problem = Secret(_unquote(text)), None
    return count, last, problem


_ANY_KEY = re.compile(rb"^[ \t]*" + KEY.encode() + rb"[ \t]*=(.*)$")


SECRETS_LIMIT = 64 << 20  # systemd reads an environment file whole up to 64 MiB (READ_FULL_BYTES_MAX)
_secrets_last: list = [None, ()]  # secrets()'s latest file, (dev, ino, size, mtime, ctime), and its answer


def secrets(path: str) -> tuple[str, ...]:
    """Every value server.env gives OPENCODE_PASSWORD however systemd or a reader may take
    it, for redaction only (never shown): each assignment's value as systemd's own parser
    makes it (its escapes, its quotes joined: `systemd_values`), and each `KEY=`, `KEY =`
    line's value raw, with its blanks taken off and unquoted (a blind red team's ninth pass
    put a decoy `OPENCODE_PASSWORD=` line before the real `OPENCODE_PASSWORD =` one; the
    eleventh a backslash inside the value). Read as read() reads it (no link followed, a
    regular file) but whatever its link count, and as far as systemd reads one (the eleventh
    put the password after 71 KiB of comments, past read()'s bound), again only when the file
    changed (the same inode, size, mtime and ctime give the same answer)."""
    parent, name = os.path.split(path)
    try:
        dfd = hostfs.open_dir(parent or "/")
    except OSError:
        return ()
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)
    except OSError:
        return ()
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ()
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key == _secrets_last[0]:
            return _secrets_last[1]
        buf = bytearray()
        while len(buf) < SECRETS_LIMIT and (chunk := os.read(fd, min(1 << 20, SECRETS_LIMIT - len(buf)))):
            buf += chunk
        data = bytes(buf)
    except OSError:
        return ()
    finally:
        os.close(fd)
    out: set[str] = set(_assigned(data, KEY.encode()))
    for raw in _LINE_END.split(data):
        m = _ANY_KEY.match(raw)
        if not m:
            continue
        value = m.group(1).decode("utf-8", "replace")
        for v in (value, value.strip(" \t"), _unquote(value.strip(" \t"))):
            if v:
                out.add(v)
    _secrets_last[:] = [key, tuple(sorted(v for v in out if v))]
    return _secrets_last[1]


_NEWLINE, _BLANK, _COMMENT = b"\n\r", b" \t\n\r", b"#;"
VALUE_LIMIT = 1 << 20  # of one assignment, what systemd_values is given from its line's start


def _assigned(data: bytes, key: bytes) -> list[str]:
    """systemd_values of `key` read from the start of each physical line where `key`
    appears (the file may be 64 MiB; a value is looked for only where the key is): the
    values systemd assigns, and, where a line only looks like an assignment (inside a
    quoted value), one more to redact."""
    out: list[str] = []
    at = data.find(key)
    while at >= 0:
        start = max(data.rfind(b"\n", 0, at), data.rfind(b"\r", 0, at)) + 1
        out += systemd_values(data[start:start + VALUE_LIMIT], key)[:1]
        at = data.find(key, at + len(key))
    return out


def systemd_values(data: bytes, key: bytes) -> list[str]:
    """The values systemd's EnvironmentFile= parser (parse_env_file_internal) assigns to
    `key`, every assignment in order: blanks around the key and before the value dropped,
    a value's trailing blanks chomped, a backslash escaping the next byte outside quotes
    (a newline after it joins lines), single quotes literal, double quotes with \\, \\",
    \\` and \\$ escaped, quoted and unquoted parts joined, `#` and `;` lines comments."""
    values: list[str] = []
    state, k, v, trail = "pre_key", bytearray(), bytearray(), None

    def assign() -> None:
        body = bytes(v[:trail] if trail is not None else v)
        if bytes(k).rstrip(b" \t") == key:
            values.append(body.decode("utf-8", "replace"))

    for c in data:
        b = bytes((c,))
        if state == "pre_key":
            if b in _COMMENT:
                state = "comment"
            elif b not in _BLANK:
                state, k, v, trail = "key", bytearray(b), bytearray(), None
        elif state == "key":
            if b in _NEWLINE:
                state = "pre_key"
            elif b == b"=":
                state = "pre_value"
            else:
                k += b
        elif state == "pre_value":
            if b in _NEWLINE:
                assign()
                state = "pre_key"
            elif b == b"'":
                state = "single"
            elif b == b'"':
                state = "double"
            elif b == b"\\":
                state = "escape"
            elif b not in _BLANK:
                state, trail = "value", None
                v += b
        elif state == "value":
            if b in _NEWLINE:
                assign()
                state = "pre_key"
            elif b == b"\\":
                state, trail = "escape", None
            else:
                if b not in _BLANK:
                    trail = None
                elif trail is None:
                    trail = len(v)
                v += b
        elif state == "escape":
            state = "value"
            if b not in _NEWLINE:
                v += b
        elif state == "single":
            if b == b"'":
                state = "pre_value"
            else:
                v += b
        elif state == "double":
            if b == b'"':
                state = "pre_value"
            elif b == b"\\":
                state = "double_escape"
            else:
                v += b
        elif state == "double_escape":
            state = "double"
            if b in b'"\\`$':
                v += b
            elif b != b"\n":
                v += b"\\" + b
        elif state == "comment":
            if b in _NEWLINE:
                state = "pre_key"
    if state in ("pre_value", "value", "escape", "single", "double", "double_escape"):
        assign()
    return values


def running_secrets(units: tuple[str, ...]) -> tuple[str, ...]:
    """OPENCODE_PASSWORD as each process of `units` (system.slice units: the candidate,
    production) was started with (/proc/<pid>/environ, bounded, read as root), for
    redaction only: the password systemd gave them, however server.env is now (a blind red
    team's round eleven made server.env a link, which secrets() never opens and systemd
    follows). Nothing readable, nothing given."""
    prefix = KEY.encode() + b"="
    out: set[str] = set()
    for unit in units:
        path = cgroups.cgroup_dir(f"/system.slice/{unit}")
        try:
            pids = cgroups.cgroup_pids(path) if path else []
        except OSError:
            continue
        for pid in pids:
            try:
                data = hostfs.read_nofollow(f"/proc/{pid}/environ", ENVIRON_LIMIT)
            except OSError:
                continue
            out.update(e[len(prefix):].decode("utf-8", "replace") for e in data.split(b"\0")
                       if e.startswith(prefix) and len(e) > len(prefix))
    return tuple(sorted(out))


def read(path: str) -> ServerEnv:
    """Its directory walked from / (no link followed), then lstat of the file
    and an O_NOFOLLOW read of the same regular file, bounded."""
    parent, name = os.path.split(path)
    try:
        dfd = hostfs.open_dir(parent or "/")
    except FileNotFoundError:
        return ServerEnv(path, "absent")
    except hostfs.PathRefused as e:
        return ServerEnv(path, "unreadable", problem=f"{e} (not followed)")
    except OSError as e:
        return ServerEnv(path, "unreadable", problem=f"{parent}: {e.strerror or e}")
    try:
        return _read_at(dfd, name, path)
    finally:
        os.close(dfd)


def _read_at(dfd: int, name: str, path: str) -> ServerEnv:
    try:
        lst = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return ServerEnv(path, "absent")
    except OSError as e:
        return ServerEnv(path, "unreadable", problem=f"lstat: {e.strerror}")
    base: dict[str, Any] = dict(path=path, kind=_kind(lst.st_mode), mode=stat.S_IMODE(lst.st_mode),
                uid=lst.st_uid, gid=lst.st_gid, size=lst.st_size)
    if not stat.S_ISREG(lst.st_mode):
        return ServerEnv(**base, problem="not a regular file, not opened")
    if lst.st_nlink > 1:  # the service user's tree: its other names may be root's (hostfs.one_link)
        return ServerEnv(**base, problem=f"a hard link ({lst.st_nlink} links), not opened")
    if lst.st_size > MAX_SIZE:
        return ServerEnv(**base, problem=f"larger than {MAX_SIZE} bytes, not read")
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)
    except OSError as e:
        why = "a symlink appeared" if e.errno == errno.ELOOP else e.strerror
        return ServerEnv(**base, problem=f"open: {why}")
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino) or not stat.S_ISREG(st.st_mode):
            return ServerEnv(**base, problem="the file changed between lstat and open")
        if st.st_nlink > 1:
            return ServerEnv(**base, problem=f"a hard link ({st.st_nlink} links) since lstat, not read")
        chunks, total = [], 0
        while total <= MAX_SIZE:
            chunk = os.read(fd, MAX_SIZE + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        return ServerEnv(**base, problem=f"read: {e.strerror}")
    finally:
        os.close(fd)
    if total > MAX_SIZE:
        return ServerEnv(**base, problem=f"grew past {MAX_SIZE} bytes while read")
    data = b"".join(chunks)
    # The descriptor's view is what was read: report its metadata.
    base.update(mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid, size=len(data))
    if unlike := unlike_systemd(data):
        return ServerEnv(**base, problem=f"line {_some([str(n) for n in unlike])}: a backslash or a quote that "
                         "systemd reads otherwise than a plain NAME=value line (an escape, a line continuation, "
                         "quoted text joined to more or over lines), so what it gives the candidate is not known "
                         "here; nothing of the file is shown (write each line as NAME=value, without them)")
    count, secret, problem = parse(data)
    return ServerEnv(**base, assignments=count, has_password=bool(secret), problem=problem,
                     variables=variables(data), password=secret if secret else None,
                     content=Secret(data.decode("utf-8", "surrogateescape")))


def variable_problems(found: tuple[tuple[int, str | None], ...], allowed: tuple[str, ...] | frozenset[str]
                      ) -> list[str]:
    """CUT-3: every variable server.env sets is one of `allowed`
    (cutover.environment) and none the floor refuses (spec/floor.py, even if
    listed); a line with no "=" is a finding too. Names only, bounded and
    escaped, the refused ones first; at most NAMES_SHOWN of each kind."""
    refused, unlisted, bare = [], [], []
    for line, name in found:
        if name is None:
            bare.append(line)
        elif why := floor.refused_variable(name):
            refused.append(f"{shown_name(name)} (line {line}: {why})")
        elif name not in allowed:
            unlisted.append(f"{shown_name(name)} (line {line})")
    out = []
    if refused:
        out.append(f"sets {_some(refused)}: it changes what the runtime or the dynamic loader loads, never "
                   "allowed (spec/floor.py), whatever cutover.environment lists")
    if unlisted:
        out.append(f"sets {_some(unlisted)}: not in cutover.environment {list(allowed)}")
    if bare:
        out.append(f"line {_some([str(n) for n in bare])}: neither blank, a comment nor a NAME=value assignment")
    return out


def _some(items: list[str]) -> str:
    more = f" and {len(items) - NAMES_SHOWN} more" if len(items) > NAMES_SHOWN else ""
    return ", ".join(items[:NAMES_SHOWN]) + more


def problems(env: ServerEnv, uid: int, gid: int | None = None, who: str = "",
             allowed: tuple[str, ...] | frozenset[str] = (KEY,)) -> list[str]:
    """CUT-3's findings on server.env (never its content): a regular file, mode
    exactly 0600, owned by `uid` (and group `gid` when given), holding a
    non-empty OPENCODE_PASSWORD= and no variable but the `allowed` ones
    (cutover.environment), none the floor refuses."""
    if env.kind != "regular file":
        kind = env.kind if env.kind in ("absent", "unreadable") else "a " + env.kind
        why = f" ({env.problem})" if env.kind == "unreadable" and env.problem else ""
        return [f"it is {kind}{why}, expected a regular file"]
    out = []
    if env.mode != 0o600:
        out.append(f"mode {env.mode:04o}, expected exactly 0600")
    if env.uid != uid:
        out.append(f"owned by uid {env.uid}, expected {uid}{who}")
    if gid is not None and env.gid != gid:
        out.append(f"group gid {env.gid}, expected {gid}")
    if env.problem:
        out.append(f"content not read: {env.problem}")
    elif not env.assignments:
        out.append("no OPENCODE_PASSWORD= line")
    elif not env.has_password:
        out.append("OPENCODE_PASSWORD= has an empty value")
    if not env.problem:
        out += variable_problems(env.variables, allowed)
    return out


# ------------------------------------------------------------------ the live candidate (CUT-2)
class EnvironUnreadable(Unreadable):
    """The identified candidate's environment could not be read from that very process."""

    requirements = ("CUT-2",)


def live_environment(pid: int, create_time: float | None) -> tuple[str, ...]:
    """The names in /proc/<pid>/environ (bounded, never followed; root reads
    it), read from the very process identified: it must still be that pid
    with that start time after the read (a pid is never reused while its
    process lives). EnvironUnreadable says why not."""
    try:
        data = hostfs.read_nofollow(f"/proc/{pid}/environ", ENVIRON_LIMIT)
    except OSError as e:
        raise EnvironUnreadable(f"/proc/{pid}/environ: {e.strerror or e}") from None
    if create_time is None or not proc.alive(pid, create_time):
        raise EnvironUnreadable(f"pid {pid} is no longer the process identified (gone or another one)")
    if len(data) > ENVIRON_LIMIT:
        raise EnvironUnreadable(f"/proc/{pid}/environ is larger than {ENVIRON_LIMIT} bytes: not judged")
    if not data:
        raise EnvironUnreadable(f"/proc/{pid}/environ is empty: the process hides its environment")
    return tuple(entry.partition(b"=")[0].decode("utf-8", "surrogateescape")
                 for entry in data.split(b"\0") if entry)


STEADY_S = 1.0  # far above the coarse clock of a ctime (a jiffy) and the start time's tick


def changed_since(path: str, started_ns: int) -> list[str]:
    """The components of server.env's `path` changed since STEADY_S before
    `started_ns` (the candidate's start): hostfs.relinked_since."""
    return hostfs.relinked_since(path, started_ns, STEADY_S)


def refused_in(names: tuple[str, ...]) -> list[str]:
    """The names (bounded, escaped) the floor never lets the runtime's environment hold."""
    return [f"{shown_name(n)} ({why})" for n in dict.fromkeys(names) if (why := floor.refused_variable(n))]
