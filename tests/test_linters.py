"""Rules about the suite's own code, run as tests (SUITE-3).

- No `assert` statement in the library: pytest rewrites only test modules,
  conftests and plugins; an assert anywhere else is compiled away by
  `python -O`, and a check that can be compiled away is no check.
- The checked-in node-id list (acceptance/node-ids.txt, which the gate
  compares every run's collection with) matches what the checkout collects.
"""

import ast
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
LIB = REPO / "acceptance" / "pty_acceptance"


def asserts_in(source: str) -> list[int]:
    return [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assert)]


def test_the_library_has_no_assert_statement():
    found = {str(p.relative_to(REPO)): lines for p in sorted(LIB.glob("*.py"))
             if (lines := asserts_in(p.read_text()))}
    assert not found, f"assert statements in library code (python -O strips them; raise instead): {found}"


def test_the_assert_finder_finds_one():
    assert asserts_in("def f(x):\n    assert x, 'no'\n") == [2]


def test_the_node_id_list_matches_the_checkout():
    res = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "node-ids"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the list matches" in res.stdout
