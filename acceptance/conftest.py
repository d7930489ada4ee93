"""Fixtures of the session-driven modules: the system bus, the run's tag, the
disposable peer (the suite as opencode-v2.service), other disposable units,
the session units created meanwhile, and sessions through the peer.

Every unit the suite creates carries the run's tag and is stopped on every
path; leftovers of a crashed run are stopped when the next run starts.
"""

import pytest
import testinfra

from pty_acceptance import admission, builds, programs
from pty_acceptance import peer as peer_mod
from pty_acceptance.bus import BusError, Systemd
from pty_acceptance.plugin import requirement_ids
from pty_acceptance.session import HelperSession, RawSession


def _fail(request, text):
    ids = " ".join(requirement_ids(request.node)) or "SUITE-3"
    pytest.fail(f"{ids}: {text}", pytrace=False)


@pytest.fixture(scope="session")
def host():
    """Testinfra's host (local backend): users, groups, services, listening
    sockets, sysctls, packages. Its local backend runs every command through
    `/bin/sh -c` and finds `id`, `getent`, `ss`... in this process's PATH, so
    the environment is the root one (programs.ROOT_ENV, SUITE-4) while it is used."""
    with pytest.MonkeyPatch.context() as mp:
        for name in programs.SHELL_STARTUP:
            mp.delenv(name, raising=False)
        for name, value in programs.ROOT_ENV.items():
            mp.setenv(name, value)
        yield testinfra.get_host("local://")


@pytest.fixture(scope="session")
def bus():
    try:
        conn = Systemd.connect()
    except (OSError, BusError) as e:
        pytest.fail(f"the system bus is not reachable, no session can be driven: {e}", pytrace=False)
    left = peer_mod.cleanup_leftovers(conn)
    yield conn
    remaining = [n for n in peer_mod.cleanup_leftovers(conn)]
    conn.close()
    assert not remaining, f"SUITE-1: disposable units were still running at the end: {remaining}"
    del left


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
def run_tag():
    return peer_mod.run_tag()


@pytest.fixture
def peer(request, inv, bus, run_tag):
    """The disposable peer service, started fresh for one test."""
    name = inv.units["peer"]
    try:
        loaded = peer_mod.peer_unit_file_loaded(bus, name)
    except BusError as e:
        _fail(request, f"cannot read {name}: {e}")
    if loaded:
        _fail(request, f"{loaded}: the suite never touches a real peer service; "
                       "run acceptance before the cutover installs it")
    unit = peer_mod.DisposableUnit(bus, name=name, user=inv.service_user,
                                   group=inv.service_group, tag=run_tag)
    try:
        unit.start()
    except (peer_mod.PeerError, BusError, TimeoutError) as e:
        unit.stop()
        _fail(request, f"the disposable peer {name} did not start: {e}")
    yield unit
    unit.stop()


@pytest.fixture
def units(bus, run_tag):
    """units(name=..., user=..., group=..., **kw) -> a started DisposableUnit, stopped after the test."""
    made = []

    def make(name, user, group, **kw):
        foreign = peer_mod.peer_unit_file_loaded(bus, name)
        if foreign:  # never start, stop or replace a unit the suite did not create
            pytest.fail(f"SUITE-1: {foreign}; the suite does not touch it", pytrace=False)
        u = peer_mod.DisposableUnit(bus, name=name, user=user, group=group, tag=run_tag, **kw)
        made.append(u)
        try:
            return u.start()
        except (peer_mod.PeerError, TimeoutError) as e:
            pytest.fail(f"SUITE-3: the disposable unit {name} ({user}:{group}) did not start: {e}",
                        pytrace=False)

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


@pytest.fixture
def raw_session(inv, peer):
    """raw_session() -> an authenticated RawSession (closed after the test)."""
    made = []

    def make():
        s = RawSession(peer, inv.socket).open()
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def helper_session(inv, peer):
    """helper_session(argv, **kw) -> a HelperSession through the fixed helper."""
    made = []

    def make(argv, **kw):
        s = HelperSession(peer, inv.socket, inv.binaries["client"]["path"], argv, **kw).open()
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
