"""Running library code that could hang in a child process with a deadline
(a regression hangs a child, not the suite), and the sparse files that test
the bounds of a read (test_hostfs.py, test_bounds.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

CHILD_DEADLINE_S = 60  # generous on a shared machine; each case takes well under a second
TIB = 1 << 40


def in_child(code: str, deadline_s: float = CHILD_DEADLINE_S, **env) -> subprocess.CompletedProcess:
    """Run `code` (the library importable) in a child; fail if it outlives the deadline."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=deadline_s, env=dict(os.environ, PYTHONPATH=str(REPO / "acceptance"), **env))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"still running {deadline_s} s later (hung): {(e.stdout or b'')[-500:]!r}")


def sparse(path: Path, size: int = 8 * TIB) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path
