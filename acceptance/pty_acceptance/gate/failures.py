"""The requirement marker on acceptance tests, and the one way a test or
fixture fails: pytest.fail without a traceback, the message naming its
requirement IDs (SUITE-2, SUITE-3). A test calls fail(); an AcceptanceError
(errors.py) the library raises into a test or fixture is turned into the same
failure here (Failed, by the plugin's hooks). The plugin and the gate both
read marks from here."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.spec.requirements import BY_ID


def requirement_ids(node: pytest.Item | pytest.Collector) -> list[str]:
    """The IDs the node's requirement markers name, in order, once each."""
    ids: list[str] = []
    for mark in node.iter_markers("requirement"):
        ids += [str(a) for a in mark.args]
    return list(dict.fromkeys(ids))


def check_requirement_marks(items: list[pytest.Item], acceptance: Path) -> None:
    """Every test under acceptance/ names known requirement IDs (SUITE-2)."""
    problems = []
    for item in items:
        if acceptance not in Path(item.path).resolve().parents:
            continue
        ids = requirement_ids(item)
        if not ids:
            problems.append(f"{item.nodeid}: no @pytest.mark.requirement(...) marker")
        bad = [i for i in ids if i not in BY_ID]
        if bad:
            problems.append(f"{item.nodeid}: unknown requirement IDs {bad}")
        for i in ids:
            item.user_properties.append(("requirement", i))
    if problems:
        raise pytest.UsageError("SUITE-2: every acceptance test must name its requirements:\n  "
                                + "\n  ".join(problems))


def fail(text: str, node: pytest.Item | pytest.Collector | None = None) -> NoReturn:
    """Fail the test (or fixture) without a traceback. With `node`, the message
    begins with the IDs its markers name (SUITE-3 for a node that names none,
    e.g. a module-scoped fixture); without, `text` names its IDs itself."""
    if node is not None:
        text = f"{' '.join(requirement_ids(node)) or 'SUITE-3'}: {text}"
    pytest.fail(text, pytrace=False)


class Failed(pytest.fail.Exception):  # type: ignore[name-defined]  # an attribute of a function: mypy takes no such base
    """A test's failure that names the requirements it is also reported under
    (`requirements`: the plugin adds them to the JUnit case)."""

    def __init__(self, text: str, requirements: tuple[str, ...] = ()):
        super().__init__(text, pytrace=False)
        self.requirements = requirements


def failure(err: AcceptanceError, node: pytest.Item | pytest.Collector | None = None) -> Failed:
    """The failure an AcceptanceError becomes in a test or fixture: its
    headline (its own IDs, else the node's), reported under its own IDs."""
    return Failed(err.headline(requirement_ids(node) if node is not None else ()), err.requirements)


NOT_RUN = "not run: "


def not_run(cause: str) -> NoReturn:
    """Fail a test (or its fixture) that cannot run for a cause it shares with
    others (the supervisor speaks another wire format, ...): the gate reports
    the cause once, and one line per module (rules.not_run_blockers)."""
    pytest.fail(NOT_RUN + cause, pytrace=False)


def not_run_cause(text: str) -> str | None:
    """The shared cause a failure's text names (not_run), or None."""
    first = (text or "").strip().splitlines()[:1]
    if first and first[0].startswith(NOT_RUN):
        return first[0][len(NOT_RUN):][:500]
    return None
