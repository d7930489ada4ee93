"""Cutover preflight: production is healthy, the candidate is healthy, its UI
and plugins are up, and server.env is private.

CUT-1 production answers its health path (cutover.production_health) on
      ports.production with a non-empty 200 (legacy production does not speak
      the candidate's API: its health is read as answering, not as
      healthy=true); the candidate answers cutover.candidate_health with
      healthy=true and every cutover.candidate_ui path with a non-empty 200 on
      ports.candidate.
CUT-2 POST /api/plugin/await-activation answers 204 (or 200), then
      GET /api/plugin lists every cutover.plugins entry exactly once with
      status "active", in upstream v2's shapes: {location, data} envelopes,
      entries {id, state: {status}} (or the older flat {id, status}); any
      other shape fails with the shape named.
      The candidate judged is the one whose environment is what server.env
      allows: /proc/<pid>/environ of the identified listener (read as root,
      bounded, of that very process) holds nothing the floor refuses
      (NODE_OPTIONS, LD_PRELOAD, ...: spec/floor.py), or its plugin list is its
      preload's to say (an Environment= drop-in, a restart with an edited
      server.env); and server.env and every directory from / down to it that
      anyone but root could put another at are unchanged (ctime) since at
      least 1 s before that process started, so its
      environment is the file CUT-3 judges and not one put back after a
      restart (a preload can blank its own environ block).
CUT-3 server.env (cutover.server_env) is a regular file (not a symlink), mode
      exactly 0600, owned by the service user, holds OPENCODE_PASSWORD= with
      a non-empty value, and sets no variable but cutover.environment's and
      none the floor refuses (names only in a finding, never a value).

A port is judged only when its listener is its unit's own
(host/unitowner.py): every process listening on ports.production is
units.production's MainPID or in its cgroup, the one on ports.candidate
units.candidate's, each unit active with the InvocationID the module's checks
first read, before the requests and again after them; anything else fails
naming the listener's pid, its cgroup and the unit's state (a server of the
service user answering on a port whose unit was stopped or gave up is not
the unit's).

Loopback only; production gets unauthenticated GETs and nothing else; every
candidate request carries Basic auth with the server.env password, which never
appears in evidence or a message, and every /api/* request carries
location[directory]=cutover.directory. The password goes only to a listener
the suite identified first (SUITE-4): the one process on ports.candidate runs
runtime.binary (same device and inode) with all uids the service user's, and
is units.candidate's own; anything else fails the candidate's tests and is
never sent a credential. Nothing is written on the host. The API as we read
it lives in pty_acceptance/candidate/opencode_api.py only.
"""

from typing import cast

import pytest

from pty_acceptance.candidate import opencode_api, serverenv
from pty_acceptance.host import proc, unitowner
from pty_acceptance.host.bus import BusError
from pty_acceptance.provenance import node_runtime
from pty_acceptance.gate.checks import collect, expect, expect_none, reading


@pytest.fixture(scope="module")
def env(inv):
    return serverenv.read(inv.cutover.server_env)  # not host.file: Testinfra follows links


@pytest.fixture(scope="module")
def service_uid(inv, host):
    """The service user's uid (None: no such user, so no listener is its process)."""
    user = host.user(inv.service_user)
    return user.uid if user.exists else None


def _unit_owns(bus, unit, pid, create_time, seen, evidence, what) -> str | None:
    """Why process `pid` is not `unit`'s own (None: it is), recorded as evidence."""
    try:
        owner = unitowner.judge(bus, unit, pid, create_time, seen)
    except BusError as e:
        return f"cannot read {unit} from systemd: {e}"
    evidence(what, owner.describe())
    return owner.problem


def _identified(inv, bus, seen, uid, req, evidence) -> node_runtime.Listener:
    """The candidate port's listener is the runtime binary run as the service user
    by units.candidate itself, or the test fails before any credential is sent
    (SUITE-4)."""
    port, binary = inv.ports.candidate, inv.runtime.binary
    found = node_runtime.listener(port)  # psutil, not host.socket: Testinfra names no owning process
    evidence("candidate listener", found.describe())
    why = found.problem
    if why is None:
        same, detail = node_runtime.same_file(binary, found.exe_dev_ino)
        if not same:
            why = f"pid {found.pid} does not run {binary}: {detail}"
        elif uid is None or set(found.uids or ()) != {uid}:
            why = f"pid {found.pid} runs with uids {found.uids}, not only {inv.service_user}'s"
        else:
            why = _unit_owns(bus, inv.units.candidate, found.pid, found.create_time, seen, evidence,
                             "candidate listener's unit")
    expect(not why, req, f"the listener on port {port} is not identified as the candidate "
                         f"runtime ({why}): the server.env password is not sent to it")
    return found


def _environment_allowed(found: node_runtime.Listener, server_env: str, req, evidence) -> None:
    """The identified listener's own environment (/proc/<pid>/environ, read
    from that very process) holds nothing the floor refuses, and server.env
    (and every directory above it) is unchanged since before that process
    started, so what systemd gave it is what CUT-3 judges: else what it
    answers is what the user's preload chose (issue 37 items 2 and 8)."""
    pid = cast(int, found.pid)  # identified: one owner, read in full
    with reading(req, f"the candidate's environment (pid {pid})", serverenv.EnvironUnreadable):
        names = serverenv.live_environment(pid, found.create_time)
    refused = serverenv.refused_in(names)
    evidence("candidate environment", f"pid {pid}: {len(names)} variables, refused: {refused or 'none'}")
    expect_none(refused, req, f"the candidate (pid {pid}) runs with what changes what the runtime or the dynamic "
                              "loader loads in its environment (never allowed, spec/floor.py): what it answers is "
                              "not the runtime's alone")
    with reading(req, f"the candidate's start (pid {pid})", OSError, ValueError):
        started = proc.start_realtime_ns(pid)
    changed = serverenv.changed_since(server_env, started)
    evidence("server.env since the candidate started", changed or
             f"{server_env} and every directory above it unchanged since at least {serverenv.STEADY_S} s "
             f"before pid {pid} started")
    expect_none(changed, req, f"the candidate (pid {pid}) was started from a {server_env} that has changed since "
                              "(or a directory on its path has): the environment systemd gave it is not the one "
                              "CUT-3 judges, and its preload could have hidden itself from its environ; restart "
                              "the candidate unit and run again")


def _still_the_unit_s(inv, bus, seen, found, req, evidence) -> None:
    """After the requests: the listener answered is still units.candidate's own, the
    unit in the run first read (a unit replaced meanwhile answered nothing of the checks)."""
    why = _unit_owns(bus, inv.units.candidate, found.pid, found.create_time, seen, evidence,
                     "candidate listener's unit, after the requests")
    expect(not why, req, f"after the requests, the listener on port {inv.ports.candidate} is no longer "
                         f"the candidate unit's own: {why}")


def _candidate(inv, bus, seen, env, uid, req, evidence, judge_environment=False):
    """The authenticated candidate client and the identified listener, or a failure
    naming server.env or the listener (or, with `judge_environment`, what the floor
    refuses in the listener's environment)."""
    expect(env.password is not None, req, f"cannot authenticate to the candidate: {env.describe()}")
    found = _identified(inv, bus, seen, uid, req, evidence)
    if judge_environment:
        _environment_allowed(found, inv.cutover.server_env, req, evidence)
    return opencode_api.Client(inv.ports.candidate, password=env.password.reveal(),
                               directory=inv.cutover.directory), found


def _production_listeners(inv, bus, seen, evidence, when) -> str | None:
    """Why the processes listening on ports.production are not all units.production's
    own (None: they are). Several may hold production's socket; each must be the unit's."""
    port, unit = inv.ports.production, inv.units.production
    found = node_runtime.listener(port)
    evidence(f"production listener{when}", found.describe())
    if not found.pids:
        return found.problem
    problems = []
    for pid in found.pids:
        if pid is None:
            problems.append(f"a socket on port {port} has no visible owner")
            continue
        why = _unit_owns(bus, unit, pid, None, seen, evidence, f"production listener {pid}'s unit{when}")
        if why:
            problems.append(why)
    return "; ".join(problems) or None


# Where a listener the suite reaches at 127.0.0.1 is bound (:: counts for both)
LOOPBACK_REACHED = ("127.0.0.1", "0.0.0.0")


@pytest.mark.requirement("CUT-1")
def test_production_is_healthy(inv, host, bus, unit_seen, evidence):
    port = inv.ports.production
    # TCP sockets only: Testinfra's listing of every family also parses UNIX socket paths,
    # which the service user names (a newline in one forges a line or breaks the parse)
    listening = [spec for spec in (f"tcp://{a}:{port}" for a in LOOPBACK_REACHED)
                 if host.socket(spec).is_listening]
    evidence("listening on the production port", listening)
    expect(listening, "CUT-1", f"nothing listens on the production port {port}")
    why = _production_listeners(inv, bus, unit_seen, evidence, "")
    expect(not why, "CUT-1", f"the production port {port} is not judged: {why}")
    client = opencode_api.Client(port)  # no auth, GET only
    path = inv.cutover.production_health
    with reading("CUT-1", "production", opencode_api.ApiError):
        reply = client.ui(path)
    evidence("production", reply.describe())
    evidence("production health body", client.excerpt(reply.body))
    why = _production_listeners(inv, bus, unit_seen, evidence, ", after the request")
    expect(not why, "CUT-1", f"after the request, the production port {port}: {why}")


@pytest.mark.requirement("CUT-1")
def test_candidate_is_healthy(inv, bus, unit_seen, env, service_uid, evidence):
    client, found = _candidate(inv, bus, unit_seen, env, service_uid, "CUT-1", evidence)
    with reading("CUT-1", "candidate", opencode_api.ApiError):
        reply = client.health(inv.cutover.candidate_health)
    evidence("candidate health", reply.describe())
    evidence("candidate health body", client.excerpt(reply.body))
    _still_the_unit_s(inv, bus, unit_seen, found, "CUT-1", evidence)


@pytest.mark.requirement("CUT-1")
def test_candidate_ui_answers(inv, bus, unit_seen, env, service_uid, evidence):
    client, found = _candidate(inv, bus, unit_seen, env, service_uid, "CUT-1", evidence)
    with collect("CUT-1") as problems:
        for path in inv.cutover.candidate_ui:
            try:
                reply = client.ui(path)
            except opencode_api.ApiError as e:
                problems.add(f"candidate {e}")
                continue
            evidence("candidate UI", reply.describe())
    _still_the_unit_s(inv, bus, unit_seen, found, "CUT-1", evidence)


@pytest.mark.requirement("CUT-2")
def test_plugins_are_active_after_activation(inv, bus, unit_seen, env, service_uid, evidence):
    client, found = _candidate(inv, bus, unit_seen, env, service_uid, "CUT-2", evidence,
                               judge_environment=True)
    with reading("CUT-2", "candidate", opencode_api.ApiError):
        reply = client.await_activation()
        evidence("await-activation", reply.describe())
        reply, plugins = client.plugins()
    evidence("plugins", [f"{opencode_api.excerpt(p.name.encode(), limit=64)}: "
                         f"{opencode_api.excerpt(p.status.encode(), limit=40)}" for p in plugins])
    _still_the_unit_s(inv, bus, unit_seen, found, "CUT-2", evidence)
    wanted = list(inv.cutover.plugins)
    bad = opencode_api.missing_or_inactive(wanted, plugins)
    expect_none(bad, "CUT-2", f"candidate {reply.url}: after await-activation, expected {wanted} active, got")


@pytest.mark.requirement("CUT-3")
def test_server_env_is_private_and_holds_the_password(inv, env, service_uid, evidence):
    evidence("server.env", env.describe())
    path, uid = inv.cutover.server_env, service_uid
    expect(uid is not None, "CUT-3", f"the service user {inv.service_user!r} does not exist")
    expect_none(serverenv.problems(env, uid, who=f" ({inv.service_user})", allowed=inv.cutover.environment),
                "CUT-3", path)
