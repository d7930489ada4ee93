"""What a checkout's acceptance/ collects, by node id with each test's
requirement IDs: pytest's collection run in this process with the start-up
hooks inert (SUITE-3). The list it is compared with, and how it is read and
written, is decision/nodeids.py's.

Run as `python -m pty_acceptance.gate.node_listing ROOT`, the way the command
line (`pty-acceptance node-ids`: cli.py imports nothing of gate/) has it
collect, it prints what `collect` found as JSON, {"found": [[node id, [IDs]],
...]}, or {"error": the NodeIdsError's message}, and exits 0 or 2."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from pty_acceptance.decision.nodeids import NodeIdsError
from pty_acceptance.gate import early
from pty_acceptance.gate.failures import requirement_ids


class Lister:
    """The plugin object of a listing collection (`collect`): while one is
    registered, the start-up hooks and the gate stay inert (startup.py), so a
    listing takes no lock, removes no marker and reads nothing of the host."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[str, ...]] = {}

    def pytest_collection_finish(self, session) -> None:
        self.found = {item.nodeid: tuple(requirement_ids(item)) for item in session.items}


def listing(config) -> bool:
    """A listing collection (`collect`) is this session."""
    return any(isinstance(p, Lister) for p in config.pluginmanager.get_plugins())


def collect(root: Path, inifile: Path | None = None) -> dict[str, tuple[str, ...]]:
    """What the checkout's acceptance/ collects, with each test's requirement
    IDs, in this process: the project's own configuration and conftests, as a
    run loads them (Testinfra's `host` parametrization depends on them), with
    the start-up hooks inert (Lister)."""
    rec = Lister()
    args = ["--collect-only", "-q", "-p", "no:cacheprovider",
            "--rootdir", str(root), "-c", str(inifile or root / "pyproject.toml"), str(root / "acceptance")]
    said = io.StringIO()
    early.listing()  # not a run the early guard judges (its start-up file ran in this process)
    with contextlib.redirect_stdout(said):
        status = pytest.main(args, plugins=[rec])
    if status != 0:
        tail = " | ".join(said.getvalue().strip().splitlines()[-5:])
        raise NodeIdsError(f"collecting {root / 'acceptance'} ended with status {int(status)}: {tail}")
    return rec.found


def main(argv: list[str]) -> int:
    """The listing of the checkout at argv[0], as JSON on stdout (the module docstring)."""
    try:
        found = collect(Path(argv[0]))
    except NodeIdsError as e:
        print(json.dumps({"error": str(e)}))
        return 2
    print(json.dumps({"found": [[nodeid, list(ids)] for nodeid, ids in found.items()]}))
    return 0


if __name__ == "__main__":
    # through the package's module, not __main__'s copy: startup.py knows a
    # listing by the package's Lister class
    from pty_acceptance.gate import node_listing

    sys.exit(node_listing.main(sys.argv[1:]))
