"""The checklist's every test, by node id: `acceptance/node-ids.txt` (SUITE-3).

"Each requirement has some passing test" is not enough: a run that drops one
test of a requirement (an ini option such as `python_functions`, a stray
conftest, a plugin) still covers the ID through its other tests. The gate
therefore knows the full set of node ids the checkout holds, from a file in
the checkout (root's, checked with the rest of it: owntree.py), and blocks on
any test of it that was not collected, on any test collected that it does not
list, and on a test whose requirement IDs differ from the listed ones.

The file is generated from the checkout and checked in
(`pty-acceptance node-ids --write`); `tests/test_linters.py` fails when it no
longer matches what the checkout collects. One line per test:
``<node id><TAB><ID> <ID> ...``; lines starting with ``#`` are comments.

This module reads, writes and compares the list; what a checkout collects
is gate/node_listing.py's (it runs pytest's collection; the command line
runs it in a process of its own: cli.py imports nothing of gate/).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs

FILE = "acceptance/node-ids.txt"
LIMIT = 1 << 20
_ID = re.compile(r"^[A-Z]+-\d+$")
HEADER = ("# Every test of the checklist, by node id, with its requirement IDs (SUITE-3).\n"
          "# Generated from the checkout: pty-acceptance node-ids --write. The gate blocks on\n"
          "# a test listed here that a run did not collect, and on one it collected that is\n"
          "# not listed.\n")


class NodeIdsError(AcceptanceError):
    """The node-id list cannot be read or parsed; the message says where."""


def parse(text: str, where: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        nodeid, sep, ids = line.partition("\t")
        words = ids.split()
        if not sep or "::" not in nodeid or not words or not all(_ID.match(w) for w in words):
            raise NodeIdsError(f"{where}:{n}: expected '<node id><TAB><IDs>', got {line[:120]!r}")
        if nodeid in out:
            raise NodeIdsError(f"{where}:{n}: {nodeid} is listed twice")
        out[nodeid] = tuple(words)
    if not out:
        raise NodeIdsError(f"{where}: lists no test")
    return out


def load(root: Path) -> dict[str, tuple[str, ...]]:
    where = str(root / FILE)
    try:
        data = hostfs.read_file(where, LIMIT)
    except OSError as e:
        raise NodeIdsError(f"{where}: {e.strerror or e}") from None
    try:
        return parse(data.decode("utf-8"), where)
    except UnicodeDecodeError as e:
        raise NodeIdsError(f"{where}: not UTF-8 (byte {e.start})") from None


def render(found: dict[str, tuple[str, ...]]) -> str:
    return HEADER + "".join(f"{nodeid}\t{' '.join(ids)}\n" for nodeid, ids in found.items())


def differences(expected: Mapping[str, tuple[str, ...]], collected: Mapping[str, tuple[str, ...]]
                ) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """(module -> its listed tests that were not collected, tests collected but
    not listed, tests whose IDs differ from the list (described))."""
    missing: dict[str, list[str]] = {}
    for nodeid in expected:
        if nodeid not in collected:
            missing.setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
    extra = [n for n in collected if n not in expected]
    changed = [f"{n} names {' '.join(ids) or 'no ID'}, the list says {' '.join(expected[n])}"
               for n, ids in collected.items() if n in expected and tuple(ids) != expected[n]]
    return missing, extra, changed

