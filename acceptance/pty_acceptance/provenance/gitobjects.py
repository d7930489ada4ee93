"""A git repository's objects, read from .git without running git: loose
objects and packs (version 2 index, deltas against an offset or an object
id), the commit HEAD names and the tree it holds, flattened to paths.

Running git as root would run the repository's configuration (core.fsmonitor
and friends, gitrev.py); reading needs no program. Used for the suite's own
checkout (suite_identity.py: which commit judged, and whether the files
differ from it), a tree root owns and the OWN-1 walk judges. Every read is
bounded; a malformed object is a GitError saying where, never its bytes.
"""

from __future__ import annotations

import os
import zlib

from pty_acceptance.host import hostfs
from pty_acceptance.provenance import gitrev
from pty_acceptance.provenance.gitrev import GitError

LIMIT = 1 << 30  # one pack or object file
MAX_DEPTH = 64  # delta chains (git's default is 50)
TYPES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}


class Objects:
    """The object store of one repository (.git/objects)."""

    def __init__(self, git: str):
        self.git = git
        self.store = os.path.join(git, "objects")
        self._packs: list[tuple[str, bytes, bytes]] | None = None  # (pack path, idx bytes, pack bytes)

    def packs(self) -> list[tuple[str, bytes, bytes]]:
        if self._packs is None:
            d = os.path.join(self.store, "pack")
            try:
                names = sorted(n for n in os.listdir(d) if n.endswith(".idx"))
            except FileNotFoundError:
                names = []
            out = []
            for n in names:
                idx = hostfs.read_file(os.path.join(d, n), LIMIT)
                pack_path = os.path.join(d, n[:-4] + ".pack")
                out.append((pack_path, idx, hostfs.read_file(pack_path, LIMIT)))
            self._packs = out
        return self._packs

    def read(self, oid: str, depth: int = 0) -> tuple[bytes, bytes]:
        """(type, content) of object `oid` (40 hex)."""
        loose = os.path.join(self.store, oid[:2], oid[2:])
        try:
            raw = zlib.decompress(hostfs.read_file(loose, LIMIT))
        except FileNotFoundError:
            raw = None
        except zlib.error as e:
            raise GitError(f"{loose} is not a zlib stream: {e}") from None
        if raw is not None:
            head, sep, body = raw.partition(b"\0")
            kind, _, size = head.partition(b" ")
            if not sep or not size.isdigit() or int(size) != len(body):
                raise GitError(f"{loose}: a malformed object header ({len(head)} bytes)")
            return kind, body
        for pack_path, idx, pack in self.packs():
            offset = _find(idx, bytes.fromhex(oid), pack_path)
            if offset is not None:
                return self._at(pack_path, pack, offset, depth)
        raise GitError(f"object {oid} is in no loose file and no pack of {self.store}")

    def _at(self, where: str, pack: bytes, offset: int, depth: int) -> tuple[bytes, bytes]:
        if depth > MAX_DEPTH:
            raise GitError(f"{where}: a delta chain deeper than {MAX_DEPTH} at offset {offset}")
        try:
            byte = pack[offset]
            kind, size, shift, pos = (byte >> 4) & 7, byte & 15, 4, offset + 1
            while byte & 0x80:
                byte = pack[pos]
                size |= (byte & 0x7F) << shift
                shift, pos = shift + 7, pos + 1
            if kind == 6:  # OFS_DELTA: the base at a negative offset
                byte = pack[pos]
                back, pos = byte & 0x7F, pos + 1
                while byte & 0x80:
                    byte = pack[pos]
                    back, pos = ((back + 1) << 7) | (byte & 0x7F), pos + 1
                base_kind, base = self._at(where, pack, offset - back, depth + 1)
                return base_kind, _apply(base, _inflate(pack, pos, where), where)
            if kind == 7:  # REF_DELTA: the base by its id
                base_kind, base = self.read(pack[pos:pos + 20].hex(), depth + 1)
                return base_kind, _apply(base, _inflate(pack, pos + 20, where), where)
            if kind not in TYPES:
                raise GitError(f"{where}: an object of unknown type {kind} at offset {offset}")
            body = _inflate(pack, pos, where)
        except IndexError:
            raise GitError(f"{where}: truncated at offset {offset}") from None
        if len(body) != size:
            raise GitError(f"{where}: the object at offset {offset} holds {len(body)} bytes, its header {size}")
        return TYPES[kind], body

    def tree_of_head(self) -> str:
        """The tree id of the commit HEAD names."""
        commit = gitrev.head(os.path.dirname(self.git))
        kind, body = self.read(commit)
        if kind != b"commit" or not body.startswith(b"tree ") or len(body) < 45:
            raise GitError(f"HEAD {commit} is not a commit holding a tree")
        return body[5:45].decode()

    def files(self, tree: str, prefix: str = "", depth: int = 0) -> dict[str, tuple[int, str]]:
        """path -> (mode, blob id) of every file below `tree` (links, and
        submodules as their commit, included)."""
        if depth > MAX_DEPTH:
            raise GitError(f"tree {tree} lies deeper than {MAX_DEPTH} directories")
        kind, body = self.read(tree)
        if kind != b"tree":
            raise GitError(f"{tree} is a {kind.decode(errors='replace')}, not a tree")
        out: dict[str, tuple[int, str]] = {}
        pos = 0
        while pos < len(body):
            space, nul = body.find(b" ", pos), body.find(b"\0", pos)
            if space < 0 or nul < space or nul + 21 > len(body):
                raise GitError(f"tree {tree} is malformed at byte {pos}")
            mode, name, oid = int(body[pos:space], 8), body[space + 1:nul], body[nul + 1:nul + 21].hex()
            path = prefix + name.decode("utf-8", errors="surrogateescape")
            pos = nul + 21
            if mode == 0o40000:
                out.update(self.files(oid, path + "/", depth + 1))
            else:
                out[path] = (mode, oid)
        return out


def _find(idx: bytes, oid: bytes, where: str) -> int | None:
    """The offset of `oid` in the pack a version 2 index describes."""
    if idx[:8] != b"\377tOc\0\0\0\2":
        raise GitError(f"{where[:-5]}.idx is not a version 2 pack index")
    fan = [_be(idx, 8 + 4 * i, 4) for i in range(256)]
    n = fan[255]
    lo, hi = (fan[oid[0] - 1] if oid[0] else 0), fan[oid[0]]
    names = 8 + 1024
    while lo < hi:
        mid = (lo + hi) // 2
        here = idx[names + 20 * mid:names + 20 * mid + 20]
        if here == oid:
            offsets = names + 24 * n
            off = _be(idx, offsets + 4 * mid, 4)
            if off & 0x80000000:
                large = offsets + 4 * n + 8 * (off & 0x7FFFFFFF)
                off = _be(idx, large, 8)
            return off
        if here < oid:
            lo = mid + 1
        else:
            hi = mid
    return None


def _be(data: bytes, pos: int, n: int) -> int:
    """An n-byte big-endian number at `pos` (git's on-disk order; not a wire
    format: int.from_bytes, never struct, as tests/test_linters.py holds)."""
    if pos + n > len(data):
        raise IndexError(pos)
    return int.from_bytes(data[pos:pos + n], "big")


def _inflate(pack: bytes, pos: int, where: str) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(pack[pos:pos + (1 << 26)])
    except zlib.error as e:
        raise GitError(f"{where}: not a zlib stream at offset {pos}: {e}") from None
    if not d.eof:
        raise GitError(f"{where}: the object at offset {pos} is cut short")
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        shift, pos = shift + 7, pos + 1
        if not byte & 0x80:
            return value, pos


def _apply(base: bytes, delta: bytes, where: str) -> bytes:
    """A git delta applied to `base`."""
    try:
        size, pos = _varint(delta, 0)
        want, pos = _varint(delta, pos)
        if size != len(base):
            raise GitError(f"{where}: a delta for a base of {size} bytes applied to {len(base)}")
        out = bytearray()
        while pos < len(delta):
            op = delta[pos]
            pos += 1
            if op & 0x80:
                off = n = 0
                for i in range(4):
                    if op & (1 << i):
                        off |= delta[pos] << (8 * i)
                        pos += 1
                for i in range(3):
                    if op & (1 << (4 + i)):
                        n |= delta[pos] << (8 * i)
                        pos += 1
                n = n or 0x10000
                out += base[off:off + n]
            elif op:
                out += delta[pos:pos + op]
                pos += op
            else:
                raise GitError(f"{where}: a delta with a zero instruction")
    except IndexError:
        raise GitError(f"{where}: a delta cut short") from None
    if len(out) != want:
        raise GitError(f"{where}: a delta made {len(out)} bytes, it says {want}")
    return bytes(out)
