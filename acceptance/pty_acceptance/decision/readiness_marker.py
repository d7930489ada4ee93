"""The content-bound readiness marker (MARK-1..4).

Four newline-terminated lines:
    revision=opencode-v2-pilot:git:<40 hex>;pty-source:sha256:<64 hex>
    <sha256>  /usr/local/libexec/opencode-pty-supervisor
    <sha256>  /usr/local/libexec/opencode-pty-launcher
    <sha256>  /usr/local/libexec/opencode-pty-client

`verify` is the independent reader (the seed's verify-readiness rules plus
MARK-3); `remove` and `write` are the gate's only writes to the host, and
only at a marker path (spec/inventory.py's MARKER_PATH): `remove` deletes
nothing but a root-owned file that parses as a marker (MARK-4).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

from pty_acceptance.errors import Refused
from pty_acceptance.host import hostfs
from pty_acceptance.spec import floor, inventory

MAX_BYTES = 4096
DEFAULT_PATH = floor.MARKER  # the seed's (spec/floor.py)
DEFAULT_BINARIES = tuple(floor.BINARIES.values())
LINE1 = re.compile(rb"^revision=opencode-v2-pilot:git:([0-9a-f]{40});pty-source:sha256:([0-9a-f]{64})$")
RECORD = re.compile(rb"^([0-9a-f]{64})  (/[^\n]+)$")


class MarkerRefused(Refused):
    """A marker that grants no readiness. `reason` is a short stable name
    ("absent", "symlink", ...), not a requirement ID."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Expectation:
    revision: str
    source_sha256: str
    binaries: tuple[str, ...]  # absolute paths, in marker order
    claimed: tuple[str, ...] = ()  # the review's SHA-256 per binary: `verify` refuses without one for each


def render(revision: str, source_sha256: str, records: list[tuple[str, str]]) -> bytes:
    lines = [f"revision=opencode-v2-pilot:git:{revision};pty-source:sha256:{source_sha256}"]
    lines += [f"{digest}  {path}" for digest, path in records]
    return ("\n".join(lines) + "\n").encode("ascii")


def _check_chain(path: str, root: str) -> None:
    problems = hostfs.chain_problems(path, root)
    if problems:
        raise MarkerRefused("unsafe-directory", problems[0])


def verify(marker: str, exp: Expectation, root: str = "/") -> bytes:
    """Return the marker's bytes if it grants readiness, else raise MarkerRefused.
    Never without the review's pin of every binary (exp.claimed): a marker
    over arbitrary binaries carries hashes of its own that match them."""
    if len(exp.claimed) != len(exp.binaries):
        raise MarkerRefused("pins", f"the review's SHA-256 of each of {len(exp.binaries)} binaries is needed, "
                                    f"{len(exp.claimed)} given: the marker is never judged against hashes it "
                                    "names itself")
    real = hostfs.under(root, marker)
    _check_chain(marker, root)
    node = hostfs.Node.at(real)
    if node.st is None:
        raise MarkerRefused("absent", f"{real} does not exist")
    if node.kind == "symlink":
        raise MarkerRefused("symlink", f"{real} is a symlink to {os.readlink(real)!r}")
    if node.kind != "regular file":
        raise MarkerRefused("not-regular", f"{real} is a {node.kind}")
    st = node.st
    if (st.st_uid, st.st_gid) != (0, 0):
        raise MarkerRefused("owner", f"{real} is owned {st.st_uid}:{st.st_gid}, not 0:0")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise MarkerRefused("writable", f"{real} has mode {mode:04o}: writable by group or other")
    if mode != 0o644:
        raise MarkerRefused("mode", f"{real} has mode {mode:04o}, not 0644")
    if st.st_nlink != 1:
        raise MarkerRefused("hard-link", f"{real} has {st.st_nlink} links")
    try:
        data = hostfs.read_nofollow(real, MAX_BYTES)
    except OSError as e:
        raise MarkerRefused("unreadable", f"{real}: {e}") from None
    if len(data) > MAX_BYTES:
        raise MarkerRefused("too-large", f"{real} is over {MAX_BYTES} bytes")
    if not data:
        raise MarkerRefused("empty", f"{real} is empty")
    if b"\r" in data:
        raise MarkerRefused("carriage-return", "the marker contains CR (CRLF line ends?)")
    if not data.endswith(b"\n"):
        raise MarkerRefused("no-final-newline", "the last line is not newline-terminated")
    lines = data[:-1].split(b"\n")
    if b"" in lines:
        raise MarkerRefused("blank-line", f"line {lines.index(b'') + 1} is empty")
    if len(lines) != 1 + len(exp.binaries):
        raise MarkerRefused("line-count", f"{len(lines)} lines, expected exactly {1 + len(exp.binaries)}")
    m = LINE1.match(lines[0])
    if not m and LINE1.match(lines[0].lower()) and lines[0].lower() != lines[0]:
        raise MarkerRefused("uppercase-hex", "line 1 has upper-case hex digits")
    if not m:
        raise MarkerRefused("malformed-revision-line", f"line 1 is {lines[0][:120]!r}")
    if m.group(1).decode() != exp.revision:
        raise MarkerRefused("revision-mismatch",
                            f"marker revision {m.group(1).decode()} != expected {exp.revision}")
    if m.group(2).decode() != exp.source_sha256:
        raise MarkerRefused("source-mismatch",
                            f"marker source {m.group(2).decode()} != expected {exp.source_sha256}")
    records = []
    for n, line in enumerate(lines[1:], start=2):
        rm = RECORD.match(line)
        if not rm:
            if re.match(rb"^[0-9a-fA-F]{64} \*", line):
                raise MarkerRefused("binary-flag", f"line {n} uses the '*' binary-mode flag")
            if re.match(rb"^[0-9a-fA-F]{64}  /", line):
                raise MarkerRefused("uppercase-hex", f"line {n} has upper-case hex digits")
            raise MarkerRefused("malformed-record", f"line {n} is not '<64 lowercase hex>  <path>': {line[:120]!r}")
        records.append((rm.group(1).decode(), rm.group(2).decode("utf-8", "replace")))
    paths = [p for _, p in records]
    if len(set(paths)) != len(paths):
        raise MarkerRefused("duplicate-record", f"a path appears twice: {paths}")
    if paths != list(exp.binaries):
        rule = "wrong-order" if sorted(paths) == sorted(exp.binaries) else "wrong-path"
        raise MarkerRefused(rule, f"records name {paths}, expected {list(exp.binaries)}")
    for n, ((digest, path), claim) in enumerate(zip(records, exp.claimed, strict=True), start=2):
        if digest != claim:
            raise MarkerRefused("claim-mismatch",
                                f"line {n}: {path} recorded as {digest}, the inventory claims {claim}")
    for n, (digest, path) in enumerate(records, start=2):
        actual_path = hostfs.under(root, path)
        try:
            actual = hostfs.sha256_nofollow(actual_path)
        except OSError as e:
            raise MarkerRefused("binary-unreadable", f"line {n}: {actual_path}: {e}") from None
        if actual != digest:
            raise MarkerRefused("binary-mismatch",
                                f"line {n}: {actual_path} hashes to {actual}, marker says {digest}")
    return data


# ---------------------------------------------------------------- writing
class UnsafeChain(Refused):
    pass


def _check_dir_fd(fd: int, where: str) -> None:
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != 0 or mode & 0o022:
        raise UnsafeChain(f"{where} is uid {st.st_uid} mode {mode:04o}: "
                          "not root-owned or writable by group/other")


def open_parent(path: str, create: bool, strict: bool = True) -> int:
    """Open the marker's directory by walking from / without following links;
    every directory must be root-owned and not group/other-writable."""
    try:
        return hostfs.open_dir(str(PurePosixPath(path).parent),
                               each=_check_dir_fd if strict else None, create=create)
    except hostfs.PathRefused as e:
        raise UnsafeChain(str(e)) from None


class NotRemoved(Refused):
    """MARK-4: what a run found at a marker path and will not delete (not a
    root-owned regular file that parses as a marker), or a path that names no
    marker at all: named, never deleted. The run is refused at start-up."""

    requirements = ("MARK-4",)


def format_problem(data: bytes) -> str | None:
    """Why `data` does not parse as a marker in MARK-2's shape: four
    newline-terminated lines, the revision line and three sha256sum records
    of absolute paths (any paths: the inventory names the binaries). None
    when it does. Says what is wrong, never the bytes."""
    if not data.endswith(b"\n"):
        return "empty" if not data else "its last line is not newline-terminated"
    if b"\r" in data or b"\0" in data:
        return "it holds a carriage return or a NUL byte"
    lines = data[:-1].split(b"\n")
    if len(lines) != 1 + len(DEFAULT_BINARIES):
        return f"{len(lines)} lines, not {1 + len(DEFAULT_BINARIES)}"
    if not LINE1.match(lines[0]):
        return "line 1 is not the revision line"
    for n, line in enumerate(lines[1:], start=2):
        if not RECORD.match(line):
            return f"line {n} is not a sha256sum record of an absolute path"
    return None


def remove(path: str) -> str:
    """MARK-4: remove the marker an earlier run left at `path`, the path a
    marker path (inventory.MARKER_PATH). Removed is only a root-owned regular
    file with one link, opened without following a link and read bounded,
    that parses as a marker (format_problem), in a directory chain root
    alone controls, by its directory's descriptor. Anything else there raises
    NotRemoved naming it, and nothing is deleted. A directory missing, or a
    link in the chain (no marker can be written there: MARK-1), is said, not
    raised. Returns what happened, in words for the report."""
    if not inventory.MARKER_PATH.match(path):
        raise NotRemoved(f"{path!r} is not a marker path (an absolute path ending in "
                         f"/{inventory.MARKER_NAME}): nothing there is removed or written")
    try:
        dfd = open_parent(path, create=False, strict=False)  # no link followed, any owner
    except FileNotFoundError:
        return f"no marker at {path} (its directory does not exist)"
    except UnsafeChain as e:
        return f"no marker looked for at {path}: {e}"
    name = PurePosixPath(path).name
    try:
        try:
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return f"no marker at {path}"
        _removable(dfd, name, path)
        os.unlink(name, dir_fd=dfd)
        os.fsync(dfd)
        try:  # gone, not only said to be (a blind red team's fourteenth pass: a seccomp filter of
            # the run's starter made unlink() return 0 and do nothing)
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return f"removed an existing marker at {path}"
        raise NotRemoved(f"the marker at {path} is still there after it was unlinked (unlink() said it "
                         "succeeded): not removed")
    finally:
        os.close(dfd)


def _removable(dfd: int, name: str, path: str) -> None:
    """NotRemoved unless `name` in `dfd` is a marker this run may delete."""
    unsafe = hostfs.chain_problems(path)
    if unsafe:
        raise NotRemoved(f"{path}: its directory is not root's alone ({unsafe[0]}): not removed")
    try:
        fd = hostfs.open_file_at(dfd, name, path)  # never a link, FIFO, socket or device
    except hostfs.PathRefused as e:
        raise NotRemoved(f"{e}: not a marker, not removed") from None
    st = os.fstat(fd)
    why = (f"is owned by uid {st.st_uid}, not root" if st.st_uid != 0 else
           f"has {st.st_nlink} links (its other names would stay)" if st.st_nlink != 1 else None)
    if why:
        os.close(fd)
        raise NotRemoved(f"{path} {why}: not a marker the suite wrote, not removed")
    try:
        data = hostfs.read_fd(fd, MAX_BYTES, path)  # closes fd
    except hostfs.TooLarge:
        raise NotRemoved(f"{path} is over {MAX_BYTES} bytes: not a marker, not removed") from None
    problem = format_problem(data)
    if problem:
        raise NotRemoved(f"{path} does not parse as a marker ({problem}): not removed")


def write(path: str, content: bytes) -> None:
    """Write the marker: O_EXCL temp file, fchown 0:0, fchmod 0644, fsync,
    rename into place, fsync the directory."""
    dfd = open_parent(path, create=True)
    try:
        hostfs.replace_at(dfd, PurePosixPath(path).name, content, 0o644, owner=(0, 0))
    finally:
        os.close(dfd)
