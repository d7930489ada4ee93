"""The pytest plugin: options, requirement markers, JUnit evidence and the
fail-closed marker gate (MARK-1..4, SUITE-2, SUITE-3).

It is active only when the session's arguments reach into ``acceptance/``;
running the suite's own tests (``pytest tests/``) leaves the host alone.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from . import checklist, gate, inventory, terminal
from .requirements import BY_ID

STATE = pytest.StashKey["gate.GateState"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("pty-acceptance", "opencode PTY supervisor root acceptance")
    g.addoption("--inventory", metavar="FILE", default=None,
                help="what the target host is expected to be (default inventories/target.yml)")
    g.addoption("--marker", metavar="PATH", default=None,
                help="readiness marker path (default: the inventory's marker)")
    g.addoption("--no-marker", action="store_true", default=False,
                help="never write the marker, even when every gate passes")
    g.addoption("--report-dir", metavar="DIR", default=None,
                help="where JUnit and evidence go (default reports/)")


def _acceptance_args(config: pytest.Config, acceptance: Path) -> list[Path]:
    """The session's path arguments that reach into acceptance/."""
    hits = []
    for arg in config.args:
        p = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if p == acceptance or acceptance in p.parents or p in acceptance.parents:
            hits.append(p)
    return hits


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requirement(*ids): the requirement IDs (REQUIREMENTS catalogue) a test checks")
    root = Path(config.rootpath)
    acceptance = (root / "acceptance").resolve()
    if not _acceptance_args(config, acceptance) or hasattr(config, "workerinput"):
        return
    inv_file = config.getoption("--inventory") or str(root / "inventories" / "target.yml")
    try:
        inv = inventory.load(inv_file)
    except inventory.InventoryError as e:
        raise pytest.UsageError(f"inventory: {e}") from None
    report_dir = Path(config.getoption("--report-dir") or root / "reports")
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise pytest.UsageError(f"--report-dir {report_dir}: {e.strerror}") from None
    if hasattr(config.option, "xmlpath") and not config.option.xmlpath:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        config.option.xmlpath = str(report_dir / f"acceptance-{inv.host}-{stamp}.xml")
    try:
        sections = checklist.load(root / "ROOT-ACCEPTANCE.md")
        checklist_error = None
    except checklist.ChecklistError as e:
        sections, checklist_error = [], str(e)
    state = gate.GateState(
        root=root, acceptance=acceptance, inventory=inv,
        marker=config.getoption("--marker") or inv.marker,
        write_marker=not config.getoption("--no-marker"),
        sections=sections, checklist_error=checklist_error,
        hostname=socket.gethostname(), args=_acceptance_args(config, acceptance))
    config.stash[STATE] = state
    config.pluginmanager.register(terminal.HostText(), "pty-acceptance-host-text")
    config.pluginmanager.register(gate.Gate(config, state), "pty-acceptance-gate")


@pytest.fixture(scope="session")
def inv(pytestconfig: pytest.Config) -> inventory.Inventory:
    """The validated inventory of the host under test."""
    state = pytestconfig.stash.get(STATE, None)
    if state is None:
        pytest.fail("SUITE-3: the acceptance plugin is not active for this session "
                    "(run pytest on acceptance/)", pytrace=False)
    return state.inventory


@pytest.fixture
def evidence(request: pytest.FixtureRequest):
    """evidence(what, value): record a fact read from the host in the JUnit case."""

    def record(what: str, value) -> None:
        text = value if isinstance(value, str) else repr(value)
        request.node.user_properties.append(("evidence", f"{what}: {text}"))

    return record


def requirement_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("requirement"):
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


def is_root() -> bool:
    return os.geteuid() == 0
