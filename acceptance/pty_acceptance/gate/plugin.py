"""The pytest plugin: requirement markers, JUnit evidence and the fail-closed
marker gate (MARK-1..4, SUITE-2, SUITE-3).

It is active only when the session's arguments reach into ``acceptance/``;
running the suite's own tests (``pytest tests/``) leaves the host alone. The
options and the marker's first removal are the root conftest's
(startup.py), so that disabling this plugin cannot keep a stale marker.
Registering the gate either succeeds or ends the run NOT READY.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.decision import nodeids, preflight, rules
from pty_acceptance.gate import failures, gate, owntree, report_escaping, runguard, startup
from pty_acceptance.decision.run_records import Setup, frozen
from pty_acceptance.report import report_name, reports, signing
from pty_acceptance.spec import checklist, inventory, requirements
from pty_acceptance.gate.failures import fail, not_run, requirement_ids
from pty_acceptance.spec.requirements import BY_ID

STATE = pytest.StashKey[Setup]()  # what the run was set up as


class RegistrationFailed(AcceptanceError):
    pass


def _setup(config: pytest.Config) -> Setup:
    root = startup.project_root(config)
    acceptance = startup.acceptance_dir(config)
    inventory_file = startup.inventory_file(config)
    found = preflight.check(inventory_file)  # read-only, first; an inventory that fails is its cause
    inv = found.inventory
    named = [inv.marker] if inv is not None else []
    path = config.getoption("--marker") or (inv.marker if inv is not None else startup.marker_fallback(config))
    guard = runguard.of(config)
    if guard is None:
        raise RegistrationFailed("the run guard is not armed")
    removal = guard.removal  # the start looked at every path the run names (MARK-4)
    removal.add([path, *named])  # only what the validated inventory names and the start did not read
    if removal.kept:
        raise RegistrationFailed("MARK-4: " + "; ".join(removal.kept))
    report_path, private, report_claim = _junit_paths(config, root,
                                                      inv.host if inv is not None else socket.gethostname())
    try:
        sections = checklist.load(root / "ROOT-ACCEPTANCE.md")
        checklist_error = None
    except checklist.ChecklistError as e:
        sections, checklist_error = [], str(e)
    try:
        expected, nodeids_error = nodeids.load(root), None
    except nodeids.NodeIdsError as e:
        expected, nodeids_error = {}, str(e)
    return Setup(
        root=root, acceptance=acceptance, inventory=inv, marker=path, preflight=found,
        inventory_file=inventory_file,
        write_marker=not config.getoption("--no-marker"),
        sections=tuple(sections), checklist_error=checklist_error,
        record_sections=tuple(s.module for s in requirements.SECTIONS),
        expected=frozen(expected), nodeids_error=nodeids_error,
        hostname=socket.gethostname(), args=tuple(startup.acceptance_args(config, acceptance)),
        removal=removal.text(), report_path=report_path, report_private_dir=private, report_claim=report_claim,
        waivers_file=_waivers_file(config), signer=_signer(config))


def _waivers_file(config: pytest.Config) -> str | None:
    given = config.getoption("--waivers")
    return os.path.normpath(os.path.join(config.invocation_params.dir, given)) if given else None


def _signer(config: pytest.Config) -> signing.Signer | None:
    """--sign-key PATH [--sign-tool TOOL] (openssl when only a key is given)."""
    key, tool = config.getoption("--sign-key"), config.getoption("--sign-tool")
    if tool and tool not in signing.TOOLS:
        raise RegistrationFailed(f"--sign-tool {tool!r}: expected one of {', '.join(signing.TOOLS)}")
    if not key:
        if tool:
            raise RegistrationFailed(f"--sign-tool {tool} given without --sign-key")
        return None
    path = os.path.normpath(os.path.join(config.invocation_params.dir, key))
    return signing.Signer(path, tool or signing.DEFAULT_TOOL)


def _junit_paths(config: pytest.Config, root: Path, host: str) -> tuple[str, str | None, str]:
    """(the report's path in the report directory, the private directory
    pytest's JUnit writer is pointed at instead, what was done to have that
    name: report_name.py); reports.py publishes it."""
    if not hasattr(config.option, "xmlpath"):  # -p no:junitxml: the gate blocks (SUITE-2)
        return "", None, ""
    report_dir = os.path.normpath(os.path.join(config.invocation_params.dir,
                                               config.getoption("--report-dir") or root / "reports"))
    asked = os.path.normpath(os.path.join(config.invocation_params.dir, config.option.xmlpath)) \
        if config.option.xmlpath else None
    for d in dict.fromkeys([report_dir] + ([os.path.dirname(asked)] if asked else [])):
        try:
            reports.check_dir(d)
        except OSError as e:
            raise RegistrationFailed(f"report directory {d}: {e.strerror or e}") from None
    try:  # no older verdict stands under the name the run publishes (report_name.py)
        if asked is not None:
            final, claim = asked, report_name.claim(asked)
        else:
            final, claim = report_name.unique(report_dir, host, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    except (OSError, reports.ReportError) as e:
        raise RegistrationFailed(f"SUITE-2: the report's name: {getattr(e, 'strerror', None) or e}") from None
    private = reports.private_dir()
    config.option.xmlpath = os.path.join(private, os.path.basename(final))
    return final, private, claim


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requirement(*ids): the requirement IDs (REQUIREMENTS catalogue) a test checks")
    if not startup.is_acceptance_run(config):
        return
    if startup.REMOVAL not in config.stash:
        raise pytest.UsageError("NOT READY: the suite's start-up hooks did not run (the marker was "
                                "not removed first): run pytest from the project, whose root "
                                "conftest.py loads this plugin")
    state = None
    try:
        state = _setup(config)
        config.stash[STATE] = state
        config.stash[owntree.AT_START] = owntree.problems(*owntree.of_run(config, state.report_path))
        if config.pluginmanager.register(report_escaping.HostText(_secrets(state)),
                                         "pty-acceptance-host-text") is None:
            raise RegistrationFailed("the suite's host-text escaping is blocked (-p no:pty-acceptance-host-text)")
        config.pluginmanager.register(gate.Gate(config, state), startup.GATE)
    except Exception as e:  # noqa: BLE001 - any failure to register is NOT READY, never a quiet run
        if state is not None:
            reports.discard(state.report_private_dir)
        reason = str(e) if isinstance(e, RegistrationFailed) else f"{type(e).__name__}: {e}"
        raise pytest.UsageError(startup.not_ready(
            config, f"the marker gate could not be registered: {reason}")) from None


def _secrets(state: Setup) -> Callable[[], tuple[str, ...]]:
    """server.env's passwords, the ones the candidate and production were started with,
    and the Basic credentials made of them, read again whenever asked (a password changed
    during the run is kept out too): what no report shows (report_escaping.py)."""
    def read() -> tuple[str, ...]:
        if state.inventory is None:
            return ()
        import base64

        from pty_acceptance.candidate import serverenv

        units = (state.inventory.units.candidate, state.inventory.units.production)
        out = []
        for pw in serverenv.secrets(state.inventory.cutover.server_env) + serverenv.running_secrets(units):
            out += [pw, base64.b64encode(f"opencode:{pw}".encode()).decode()]
        return tuple(out)
    return read


@pytest.fixture(scope="session")
def inv(pytestconfig: pytest.Config) -> "inventory.Inventory":
    """The validated inventory of the host under test."""
    state = pytestconfig.stash.get(STATE, None)
    if state is None:
        fail("SUITE-3: the acceptance plugin is not active for this session "
             "(run pytest on acceptance/)")
    if state.inventory is None:
        not_run(rules.preflight_cause(state) or "preflight: the inventory did not load")
    return state.inventory


@pytest.fixture
def evidence(request: pytest.FixtureRequest):
    """evidence(what, value): record a fact read from the host in the JUnit case."""

    def record(what: str, value) -> None:
        text = value if isinstance(value, str) else repr(value)
        request.node.user_properties.append(("evidence", f"{what}: {text}"))

    return record


@pytest.fixture
def concern(request: pytest.FixtureRequest):
    """concern(id, text): record in the JUnit case a part of requirement `id`
    that this test does not check (and why) as a `concern` property: reported,
    never counted as passed. `id` must be one the test names."""

    def record(req_id: str, text: str) -> None:
        named = requirement_ids(request.node)
        if req_id not in named:
            raise ValueError(f"concern for {req_id}, which {request.node.name} does not name ({named})")
        request.node.user_properties.append(("concern", f"{req_id}: {text}"))

    return record


@pytest.fixture
def deliberate_stop(pytestconfig: pytest.Config):
    """deliberate_stop(pid): a context in which the test stops process `pid` of
    its own on purpose (ISO-3 stops the disposable peer's MainPID); SUITE-5's
    stop guard (host/stopguard.py) does not count that stop while it lasts."""
    watch = getattr(pytestconfig.pluginmanager.get_plugin(startup.GATE), "watch", None)
    if watch is None:
        return lambda pid: contextlib.nullcontext()
    return watch.guard.deliberate


def _as_failure(item: pytest.Item):
    """Run one phase of a test (a hook wrapper's yield): an AcceptanceError
    raised into a test that names requirements (every acceptance test does)
    becomes the one failure failures.failure makes of it. The suite's own tests
    name none and keep their tracebacks."""
    try:
        return (yield)
    except AcceptanceError as e:
        if not requirement_ids(item):
            raise
        raise failures.failure(e, item) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _as_failure(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _as_failure(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    return (yield from _as_failure(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failure that names the requirement it enforces (an exception with a
    `requirements` attribute, e.g. unit_vouch.NotOurs: SUITE-4) is reported
    under that ID too: the JUnit case gains the requirement property."""
    report = yield
    if call.excinfo is not None:
        for i in getattr(call.excinfo.value, "requirements", ()):
            if i in BY_ID and ("requirement", i) not in item.user_properties:
                item.user_properties.append(("requirement", i))
    return report


def is_root() -> bool:
    return os.geteuid() == 0
