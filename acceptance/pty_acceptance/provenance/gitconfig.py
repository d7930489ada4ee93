"""The repository format in `.git/config`, read as git reads it (SCOPE-3).

Before it resolves a single ref, git checks the repository's format
(setup.c, check_repo_format): `core.repositoryformatversion` and the
`extensions.*` keys of `.git/config`. An extension can change where the refs
are (`extensions.refStorage = reftable`: a git that knows it reads
`.git/reftable/`, never `.git/refs`) or what a commit id is
(`extensions.objectFormat = sha256`), and a version above 1, or an extension
a git does not know, makes git refuse the repository. So the suite reads the
config with git's own grammar (config.c, git_parse_source: sections,
`[section "subsection"]`, keys case-insensitive, quoting, escapes,
continuation lines, comments, a key on its header's line, a leading UTF-8
byte order mark), and what git would reject, or reads in a way the suite
does not, is refused:

- a config git cannot parse (git stops on it), or one holding a NUL byte;
- `core.repositoryformatversion` other than 0 or 1 (every occurrence: git
  parses each);
- every extension but those that leave refs alone: `noop`, `preciousObjects`
  and `worktreeConfig` (with a boolean git accepts), `partialClone` (with a
  value), and, in a version-1 repository, `noop-v1` and `objectFormat = sha1`
  (the default). `refStorage`, `compatObjectFormat`, `objectFormat = sha256`
  and any other are refused, whatever the version (a newer git knows more
  extensions than git 2.39 does: refusing them all needs no guess which).

`include.path` and `includeIf` are not followed: git reads the repository
format from this one file without its includes (git_config_from_file), and
no included key changes what a ref resolves to. A value git would reject for
some other key (`core.fileMode = banana`) makes git stop, never resolve
another commit: it is not judged here. Nothing read is echoed: a refusal
names the key git reads and a length, or an extension by a name of its own.
"""

from __future__ import annotations

from pty_acceptance.provenance.gitdir import GitError

BOM = b"\xef\xbb\xbf"
SPACE = b" \t\n\r"  # git's isspace (sane_ctype), not C's
ALPHA = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
KEYCHAR = ALPHA | frozenset(b"0123456789-")
BOOL = {b"", b"true", b"false", b"yes", b"no", b"on", b"off"}
# what the suite says of an extension it refuses (any other is "one git 2.39 does not know")
LABEL = {"refstorage": "extensions.refStorage (the refs are not in .git/refs: reftable)",
         "objectformat": "extensions.objectFormat other than sha1 in a version-1 repository",
         "compatobjectformat": "extensions.compatObjectFormat",
         "noop-v1": "extensions.noop-v1 outside a version-1 repository",
         "preciousobjects": "extensions.preciousObjects with a value git does not take for a boolean",
         "worktreeconfig": "extensions.worktreeConfig with a value git does not take for a boolean",
         "partialclone": "extensions.partialClone without a value"}


class _Syntax(GitError):
    """Where git's parser stops: entries() says where, in GitError's words."""


class _Source:
    """git's get_next_char: CR LF reads as LF, the end reads as LF (again and again)."""

    def __init__(self, data: bytes):
        self.data, self.pos, self.eof = data, 0, False

    def getc(self) -> int:
        if self.pos >= len(self.data):
            self.eof = True
            return 10
        c = self.data[self.pos]
        self.pos += 1
        if c == 13 and self.pos < len(self.data) and self.data[self.pos] == 10:
            self.pos += 1
            c = 10
        return c


def entries(data: bytes, where: str) -> list[tuple[bytes, bytes | None]]:
    """(name, value) of every key in order, as git's parser hands them on:
    name is `section[.subsection].key` (section and key lowercased), value
    None for a key without `=`. GitError when git could not parse it."""
    if b"\0" in data:
        raise GitError(f"{where} holds a NUL byte: not read as git config")
    if data.startswith(BOM):
        data = data[len(BOM):]
    elif data[:1] == BOM[:1]:
        raise GitError(f"{where} begins with part of a byte order mark: git cannot parse it")
    src = _Source(data)
    try:
        return _parse(src)
    except _Syntax:
        line = data[:max(src.pos - 1, 0)].count(b"\n") + 1  # the line of the byte it stopped at
        raise GitError(f"{where} is not config git can parse (line {line}): "
                       "git stops on it, so it resolves no revision") from None


def _parse(src: _Source) -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    comment = False
    var = bytearray()
    baselen = 0
    while True:
        c = src.getc()
        if c == 10:
            if src.eof:
                return out
            comment = False
            continue
        if comment or c in SPACE:
            continue
        if c in b"#;":
            comment = True
            continue
        if c == ord("["):
            var = _base_var(src)
            if not var:
                raise _Syntax
            var += b"."
            baselen = len(var)
            continue
        if c not in ALPHA:
            raise _Syntax
        del var[baselen:]
        var.append(c | 0x20)
        out.append(_value(src, var))


def _base_var(src: _Source) -> bytearray:
    name = bytearray()
    while True:
        c = src.getc()
        if src.eof:
            raise _Syntax
        if c == ord("]"):
            return name
        if c in SPACE:
            return _extended_base_var(src, name, c)
        if c not in KEYCHAR and c != ord("."):
            raise _Syntax
        name.append(c | 0x20 if c in ALPHA else c)


def _extended_base_var(src: _Source, name: bytearray, c: int) -> bytearray:
    while True:
        if c == 10:
            raise _Syntax
        c = src.getc()
        if c not in SPACE:
            break
    if c != ord('"'):
        raise _Syntax
    name += b"."
    while True:
        c = src.getc()
        if c == 10:
            raise _Syntax
        if c == ord('"'):
            break
        if c == ord("\\"):
            c = src.getc()
            if c == 10:
                raise _Syntax
        name.append(c)
    if src.getc() != ord("]"):
        raise _Syntax
    return name


def _value(src: _Source, var: bytearray) -> tuple[bytes, bytes | None]:
    while True:
        c = src.getc()
        if src.eof or c not in KEYCHAR:
            break
        var.append(c | 0x20 if c in ALPHA else c)
    while c in b" \t":
        c = src.getc()
    if c == 10:
        return bytes(var), None
    if c != ord("="):
        raise _Syntax
    return bytes(var), _parse_value(src)


ESCAPES = {ord("t"): 9, ord("b"): 8, ord("n"): 10, ord("\\"): ord("\\"), ord('"'): ord('"')}


def _parse_value(src: _Source) -> bytes:
    quote = comment = False
    space = 0
    value = bytearray()
    while True:
        c = src.getc()
        if c == 10:
            if quote:
                raise _Syntax
            return bytes(value)
        if comment:
            continue
        if c in SPACE and not quote:
            if value:
                space += 1
            continue
        if not quote and c in b";#":
            comment = True
            continue
        value += b" " * space
        space = 0
        if c == ord("\\"):
            c = src.getc()
            if c == 10:
                continue
            if c not in ESCAPES:
                raise _Syntax
            value.append(ESCAPES[c])
            continue
        if c == ord('"'):
            quote = not quote
            continue
        value.append(c)


def check_format(data: bytes, where: str) -> None:
    """GitError unless the config's repository format is one whose refs the
    suite reads as git does (the module docstring says which)."""
    version = -1
    extensions: list[tuple[str, bytes | None, int]] = []
    for name, value in entries(data, where):
        if name == b"core.repositoryformatversion":
            if value not in (b"0", b"1"):
                raise GitError(f"{where}: core.repositoryformatversion is not 0 or 1 "
                               f"({'no value' if value is None else f'{len(value)} bytes'}): "
                               "a format git 2.39 refuses or the suite does not read")
            version = 1 if value == b"1" else 0
        elif name.startswith(b"extensions."):
            raw = name[len(b"extensions."):]
            extensions.append((raw.decode("ascii", "replace"), value, len(raw)))
    for ext, value, n in extensions:
        if _harmless(ext, value, version):
            continue
        said = LABEL.get(ext, f"an extension git 2.39 does not know ({n} bytes)")
        raise GitError(f"{where} sets {said}: a repository format the suite does not read "
                       "(refs, or what a commit id is, may be other than in .git/refs and "
                       "packed-refs), refused, never read past")


def _harmless(ext: str, value: bytes | None, version: int) -> bool:
    if ext in ("preciousobjects", "worktreeconfig"):
        return value is None or value.lower() in BOOL or (value.isdigit() and len(value) < 10)
    if ext == "partialclone":
        return value is not None
    if ext == "noop":
        return True
    if ext == "noop-v1":
        return version == 1
    if ext == "objectformat":
        return version == 1 and value == b"sha1"
    return False
