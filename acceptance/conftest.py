"""The acceptance modules' fixtures: Testinfra's `host`, the system bus, the
run's tag, the disposable peer (the suite as opencode-v2.service) for one test
or one module, other disposable units, the session units created meanwhile,
sessions through the peer, and the guard of tests that stop the supervisor.

Every unit the suite creates carries the run's tag and is stopped on every
path; leftovers of a crashed run are stopped when the next run starts.

Its pytest_addoption arms the run guard (gate/runguard.py) where the root
conftest.py is not loaded (`--confcutdir acceptance`, acceptance/ reached
through a link): the markers are removed and the run is refused.
"""

import pytest
import testinfra

from pty_acceptance.gate import runguard

from pty_acceptance.host import programs
from pty_acceptance.provenance import builds, source_copy
from pty_acceptance.supervisor import admission
from pty_acceptance.supervisor.supervisor_up import start_supervisor, supervisor_ready
from pty_acceptance.supervisor.tracked_sessions import Sessions
from pty_acceptance.supervisor import protocol
from pty_acceptance.supervisor import peer as peer_mod
from pty_acceptance.host.bus import BusError, Systemd
from pty_acceptance.gate.failures import fail, not_run
from pty_acceptance.supervisor.session_clients import HelperSession, RawSession
from pty_acceptance.supervisor.unit_vouch import Owner


def pytest_addoption(parser, pluginmanager):
    runguard.arm_from_conftest(pluginmanager, __file__, "acceptance/conftest.py")


@pytest.fixture(scope="session")
def host():
    """Testinfra's host (local backend): users, groups, services (running,
    enabled), TCP listeners, sysctls, packages. Its local backend runs every
    command through `/bin/sh -c` and finds `id`, `getent`, `ss`... in this
    process's PATH, so the environment is the root one (programs.ROOT_ENV,
    SUITE-4) while it is used. Not for what the service user can shape:
    processes (`ps` lines are split on spaces, and comm, which any process sets,
    comes first) and UNIX sockets (`ss` prints their paths, newlines and all)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in programs.SHELL_STARTUP:
            mp.delenv(name, raising=False)
        for name, value in programs.ROOT_ENV.items():
            mp.setenv(name, value)
        yield testinfra.get_host("local://")


# The Debian/Ubuntu package of each host program a test runs, by the path it
# runs it at. Recorded as evidence (host.package); the preflight judges the
# program itself, and one installed by other means is not a failure.
PACKAGES = {"/usr/bin/systemd-analyze": "systemd", "/usr/bin/strace": "strace",
            "/usr/bin/script": "bsdutils", "/usr/bin/go": "golang-go"}


@pytest.fixture
def packaged(host, evidence):
    """packaged(path): record which package, at which version, installed the
    host program at `path` that this test runs (Testinfra's host.package)."""

    def record(path: str) -> None:
        name = PACKAGES.get(path)
        if name is None:
            fact = "not a program of a package the suite knows"
        else:
            try:
                pkg = host.package(name)
                fact = f"{name} {pkg.version}" if pkg.is_installed else f"{name}: not installed"
            except (AssertionError, NotImplementedError, RuntimeError) as e:  # Testinfra: no dpkg, or it failed
                fact = f"{name}: not read ({type(e).__name__}: {str(e)[:200]})"
        evidence(f"package of {path}", fact)

    return record


@pytest.fixture(scope="session")
def bus(request):
    try:
        conn = Systemd.connect()
    except (OSError, BusError) as e:
        fail(f"SUITE-3: the system bus is not reachable, no session can be driven: {e}")
    peer_mod.cleanup_leftovers(conn)
    yield conn
    remaining = peer_mod.cleanup_leftovers(conn)
    conn.close()
    if request.session.exitstatus == pytest.ExitCode.INTERRUPTED:
        # SUITE-5: an interrupt may land half way through a unit's start or
        # stop; stopping what it left is this teardown's job, and the run is
        # NOT READY as interrupted already
        if remaining:
            tr = request.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write_line(f"SUITE-5: interrupted: disposable units stopped at the end: {remaining}")
        return
    if remaining:  # failures.fail, not assert: nothing may be compiled away (SUITE-3)
        fail(f"SUITE-1: disposable units were still running at the end: {remaining}")


@pytest.fixture(scope="session")
def reproduced(inv):
    """BUILD-1's two builds, made once per run and shared (test_builds judges
    them; PLUGIN-1 runs the harness against the fresh helper):
    (Reproduction, None), or (None, why they could not be made)."""
    try:
        return builds.reproduce(inv), None
    except (builds.BuildError, OSError) as e:
        return None, str(e)


@pytest.fixture(scope="session")
def source(inv):
    """The source manifest's files read once and copied into a root-owned
    mirror, hashed as copied (provenance/source_copy.py): SCOPE-1 judges its
    digest; PLUGIN-1's runs see these copies where the trees are, so bun
    imports the very bytes SCOPE-1 hashed. (SourceCopy, None), or (None, why
    they could not be read)."""
    try:
        made = source_copy.make(inv.pilot_root, inv.code_root, inv.tree_bounds())
    except source_copy.manifest.ManifestError as e:
        yield None, str(e)
        return
    try:
        yield made, None
    finally:
        source_copy.remove(made)


@pytest.fixture(scope="module")
def unit_seen():
    """Each unit's state as this module's checks first read it (host/unitowner.py:
    a listener is its unit's own only while the unit's InvocationID stays the one
    first read: CUT-1, CUT-2, RUNTIME-1, ISO-1)."""
    return {}


@pytest.fixture(scope="session")
def run_tag():
    return peer_mod.run_tag()


@pytest.fixture(scope="session")
def wire_format(inv, bus, run_tag):
    """TARGET-CONTRACT section 4, tried first: a disposable peer's HELLO and the
    supervisor's answer in the contract's framing (protocol.handshake_problem).
    None when it is (or when the peer cannot be started at all: the peer's own
    tests say why); otherwise the one cause every session-driven test reports
    instead of failing in its own words (failures.not_run)."""
    try:
        unit = peer_mod.start_peer(bus, inv, run_tag)
    except peer_mod.PeerError:
        return None
    try:
        frame, _ = admission.timed_hello(unit, inv.socket)
    except (peer_mod.PeerError, OSError):
        return None
    finally:
        unit.stop()
    reply = bytes.fromhex(frame.get("raw", ""))
    problem = protocol.handshake_problem(reply, frame.get("closed"))
    if problem is None:
        return None
    return (f"wire format: the supervisor at {inv.socket} does not speak the suite's wire format "
            f"(TARGET-CONTRACT section 4): sent {protocol.shown(protocol.encode(protocol.T.HELLO))}, "
            f"got {protocol.shown(reply)}: {problem}")


def _started_peer(inv, bus, run_tag, node, wire=None):
    if wire:
        not_run(wire)
    try:
        return peer_mod.start_peer(bus, inv, run_tag)
    except peer_mod.ForeignUnit as e:
        fail(f"SUITE-1: {e}")
    except peer_mod.PeerError as e:
        fail(str(e), node)


@pytest.fixture
def peer(request, inv, bus, run_tag, wire_format):
    """The disposable peer service, started fresh for one test."""
    unit = _started_peer(inv, bus, run_tag, request.node, wire_format)
    yield unit
    unit.stop()


@pytest.fixture(scope="module")
def module_peer(request, inv, bus, run_tag, wire_format):
    """The disposable peer for a whole module (one opencode-v2.service at a
    time: a module that uses it uses no per-test `peer`)."""
    unit = _started_peer(inv, bus, run_tag, request.node, wire_format)
    yield unit
    unit.stop()


@pytest.fixture
def units(bus, run_tag, wire_format):
    """units(name=..., user=..., group=..., **kw) -> a started DisposableUnit, stopped after the test."""
    if wire_format:
        not_run(wire_format)
    made = []

    def make(name, user, group, **kw):
        u = peer_mod.DisposableUnit(bus, name=name, user=user, group=group, tag=run_tag, **kw)
        made.append(u)
        try:
            return u.start()
        except peer_mod.ForeignUnit as e:
            fail(f"SUITE-1: {e}")
        except (peer_mod.PeerError, BusError, TimeoutError) as e:
            fail(f"SUITE-3: the disposable unit {name} ({user}:{group}) did not start: {e}")

    yield make
    for u in reversed(made):
        u.stop()


@pytest.fixture
def created():
    """created() -> the session units systemd created since the test began."""
    seen = []
    with admission.watch_sessions() as watch:
        def new_units():
            seen.extend(watch.new_units())
            return list(seen)
        yield new_units


def _closed_after(open_one):
    """The factory a session fixture yields: each call returns open_one(...)'s
    opened session; every one is closed after the test, in the order made."""
    made = []

    def make(*args, **kw):
        s = open_one(*args, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def raw_session(inv, peer):
    """raw_session() -> an authenticated RawSession (closed after the test)."""
    yield from _closed_after(lambda: RawSession(peer, inv.socket).open())


@pytest.fixture
def helper_session(inv, peer):
    """helper_session(argv, **kw) -> a HelperSession through the fixed helper."""
    yield from _closed_after(
        lambda argv, **kw: HelperSession(peer, inv.socket, inv.binaries.client.path, argv, **kw).open())


@pytest.fixture
def sessions(inv, bus, peer, evidence):
    """Sessions(...) of one test through the disposable peer; every one is ended and
    waited for afterwards, and units the supervisor left running are stopped."""
    made = Sessions(bus, peer, inv.socket, Owner.of(inv))
    yield made
    forced = made.close()
    if forced:
        evidence("removed by the suite after the test", forced)


@pytest.fixture
def supervisor_guard(inv, bus):
    """For tests that stop or restart the supervisor: fails at once if it is not
    ready to begin with; brings it back (active, socket present) on every path."""
    name, path = inv.units.supervisor, inv.socket
    if not supervisor_ready(bus, name, path):
        fail(f"SUITE-1: {name} is not active with its socket {path} before the test; "
             "the suite does not start it on its own")
    yield name
    if not supervisor_ready(bus, name, path):
        try:
            start_supervisor(bus, name, path)
        except (BusError, TimeoutError) as e:
            fail(f"SUITE-1: {name} could not be restored: {e}")
