"""`.git/packed-refs`, read only in the form git itself reads the same way (SCOPE-3).

git (refs/packed-backend.c) loads packed-refs whenever a ref it looks for
has no loose file, and `git rev-parse HEAD` looks for several (HEAD, then
refs/HEAD, refs/tags/HEAD, ... to warn of an ambiguous name), so git reads
it even when HEAD's branch is loose: a line git cannot parse stops git.
git finds an entry by binary search, trusting the file's order (its
`sorted` trait, or its own sort of the records, whose order among repeated
names is not defined), so a name listed twice, or out of order, can give git
another entry than a reading from the top. The suite therefore accepts only
what git writes, and refuses the rest:

- an optional first line `# pack-refs with: ...` (its traits are git's
  business: peeling is not part of resolving HEAD);
- records `<40 lowercase hex> <name>`, the name printable bytes (no space,
  no control byte), each followed by at most one peel line `^<40 hex>`;
- names in strictly ascending byte order (so none twice), and a final newline.

Nothing read is echoed: a refusal names the line number.
"""

from __future__ import annotations

import re

from pty_acceptance.provenance.gitdir import GitError

RECORD = re.compile(rb"([0-9a-f]{40}) ([\x21-\x7e\x80-\xff]+)")
PEEL = re.compile(rb"\^[0-9a-f]{40}")
HEADER = b"# pack-refs with:"


def parse(data: bytes, where: str) -> dict[bytes, str]:
    """name -> commit id of every record; GitError for anything else."""
    if not data:
        return {}
    if not data.endswith(b"\n"):
        raise GitError(f"{where} does not end with a newline: git stops on its unterminated last line")
    out: dict[bytes, str] = {}
    prev: bytes | None = None
    peelable = False  # the line before was a record
    for n, line in enumerate(data[:-1].split(b"\n"), start=1):
        if n == 1 and line.startswith(b"#"):
            if not line.startswith(HEADER):
                raise GitError(f"{where} line 1 is a comment other than git's '{HEADER.decode()}' "
                               "header: git stops on it")
            continue
        if line.startswith(b"^"):
            if not peelable or not PEEL.fullmatch(line):
                raise GitError(f"{where} line {n} ({len(line)} bytes) is not a peel line right "
                               "after a record: not a packed-refs file git reads the same way")
            peelable = False
            continue
        m = RECORD.fullmatch(line)
        if not m:
            raise GitError(f"{where} line {n} is malformed ({len(line)} bytes): not "
                           "'<commit id> <ref name>' as git writes it")
        name = m.group(2)
        if prev is not None and name <= prev:
            raise GitError(f"{where} line {n}: a ref name {'repeated' if name == prev else 'out of order'} "
                           "(git finds entries by binary search: it could read another one)")
        out[name] = m.group(1).decode()
        prev, peelable = name, True
    return out
