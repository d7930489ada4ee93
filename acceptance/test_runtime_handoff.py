"""Runtime hand-off: the candidate runtime gives the authenticated socket and
the cwd only to the fixed helper.

RUNTIME-2 the exact runtime binary of RUNTIME-1, run with the candidate
          unit's own command line (another port) and environment file as the
          disposable peer (`units.peer`), opens one PTY session through its
          HTTP API (POST /api/pty). The runtime run is the one RUNTIME-1
          hashed: opened without following a link and hashed by descriptor
          (runtime.sha256) before the start, MainPID's executable the very
          file of that descriptor (device and inode), hashed again through it
          after the session. Its environment comes only from
          cutover.server_env after CUT-3's checks (owned by the service user
          and group): an EnvironmentFile= naming anything else fails before
          anything is read. While the session lives every process on the
          host is read:
          - the session is the supervisor's (a new strict session unit) and
            its command runs in the directory the API was given;
          - the fixed helper, a child of the runtime, exec'd and sent START on
            fd 3, the authenticated connection, carrying fd 4, that directory,
            as its one SCM_RIGHTS descriptor (strace on the runtime: proof
            that the helper held both);
          - the client end of every supervisor connection is held by the
            runtime and the helper (as fd 3) only;
          - the directory is held by no process but the runtime, the helper,
            the supervisor's own processes and PID 1 (which keeps the unit's
            stdio descriptors);
          - both of those not only in the live sample (every process on the
            host, read once while the session lives: a process outside the
            runtime's tree holding either shows only there) but at any time
            from before POST until the session is gone: strace's record of
            every process of the runtime's tree, replayed into who held the
            connection or the directory (candidate/tracedholders.py), each
            holder judged as the sample judges (the runtime; the fixed helper
            with the connection as fd 3 and the directory as fd 4 at its
            exec), every SCM_RIGHTS send of either judged as a hand-off, and
            the sample checked against the trace. A child that got the
            connection and was killed before the sample fails here; a trace
            that cannot say (strace missing or gone, a process it did not
            follow, io_uring outside the runtime, its tables disagreeing with
            what strace decoded) fails with the reason;
          - neither the runtime nor any descendant of it holds a terminal (a
            PTY opened in process, upstream's way, is the failure);
          - DELETE ends the session completely.
          A runtime that does not start, does not authenticate, or opens the
          PTY in process instead of through the helper fails every test here.

The runtime unit carries the run's tag, is stopped on every path, and nothing
it started is left behind. The password of cutover.server_env is sent only
after the listener is proven to be that unit's MainPID running runtime.binary.
"""

import pytest

from pty_acceptance.candidate import handoff, serverenv, tracedholders
from pty_acceptance.gate.checks import collect, expect, expect_none, finding
from pty_acceptance.gate.failures import not_run
from pty_acceptance.host import programs



@pytest.fixture(scope="module")
def seen(inv, bus, run_tag, wire_format, source):
    """One observed session (handoff.Observation), run once for the module; the
    candidate unit read from SCOPE-1's copy where the manifest holds it."""
    if wire_format:
        not_run(wire_format)
    env = serverenv.read(inv.cutover.server_env)
    if env.password is None:
        return f"no password to authenticate to the runtime: {env.describe()}"
    copied, _ = source
    return handoff.observe_session(bus, inv, run_tag, env.password.reveal(), source=copied)


def _facts(seen, evidence, *, deleted=False) -> handoff.Observation:
    """The observation, its evidence recorded. Fails when a step failed before
    the host was read (or at all, with deleted=True)."""
    if isinstance(seen, str):
        raise finding("RUNTIME-2", seen)
    ob = seen
    if ob.command:
        evidence("candidate command", f"{ob.command.shown}, run as {' '.join(ob.command.argv)[:300]}")
    if ob.runtime:
        evidence("runtime run", ob.runtime.describe())
    if ob.unit:
        evidence("runtime unit", f"{ob.unit.name} MainPID {ob.unit.main_pid} {ob.unit.control_group}")
    if ob.listener:
        evidence("listener", ob.listener)
    if ob.pty:
        evidence("PTY", f"{ob.pty.id} status {ob.pty.status} pid {ob.pty.pid}")
    if ob.session_units:
        evidence("session units created", ob.session_units)
    if ob.runtime_children:
        evidence("descendants of the runtime", {str(k): v for k, v in ob.runtime_children.items()})
    evidence("stage reached", ob.stage)
    expect(not (ob.problem and (deleted or ob.stage != handoff.DELETE_STAGE)), "RUNTIME-2", f"{ob.problem}")
    return ob


def _helper(ob, inv) -> int:
    if len(ob.helpers) != 1:
        raise finding("RUNTIME-2", f"the runtime (pid {ob.unit.main_pid}) has {len(ob.helpers)} descendants "
                                   f"running the fixed helper {inv.binaries.client.path}, expected exactly one; its "
                                   f"descendants: {ob.runtime_children or 'none'}")
    return ob.helpers[0]


def _shown(holders) -> list[str]:
    return [f"pid {h.pid} fd {h.fd} ({h.exe}, uid {h.uid})" for h in holders]


@pytest.mark.requirement("RUNTIME-2")
def test_the_runtime_run_is_the_one_runtime1_hashed(inv, seen, evidence):
    ob = _facts(seen, evidence, deleted=True)
    pin = inv.runtime.sha256
    expect(ob.runtime.before == ob.runtime.after == pin, "RUNTIME-2",
           f"{ob.runtime.describe()}; the pin runtime.sha256 is {pin}")


@pytest.mark.requirement("RUNTIME-2")
def test_the_runtime_starts_a_session_as_the_peer(seen, evidence):
    ob = _facts(seen, evidence)
    evidence("session command cwd", ob.token_cwds or "no session process found")
    expect(len(ob.session_units) == 1, "RUNTIME-2",
           f"POST /api/pty created {ob.session_units}, expected exactly one session unit")
    if not ob.token_cwds:
        raise finding("RUNTIME-2", f"the session's command was not found running ({ob.footprint.describe()})")
    wrong = {pid: cwd for pid, cwd in ob.token_cwds.items() if cwd != "the workspace"}
    expect(not wrong, "RUNTIME-2", f"the session's command runs elsewhere than the directory the API "
                                   f"was given ({ob.workspace}): {wrong}")


@pytest.mark.requirement("RUNTIME-2")
def test_the_fixed_helper_received_the_connection_and_the_directory(inv, seen, evidence, packaged):
    ob = _facts(seen, evidence)
    helper = _helper(ob, inv)
    packaged(programs.path("strace"))
    execs, sends = ob.trace.of(ob.threads.get(helper, {helper}))
    evidence("helper", f"pid {helper} (threads {sorted(ob.threads.get(helper, ()))}), "
                       f"parent {ob.unit.main_pid}")
    evidence("traced execs", {str(t): e for t, e in ob.trace.execs.items()} or "none")
    evidence("helper sendmsg calls (fd, socket, peer, SCM_RIGHTS)", sends or "none")
    expect(execs == [inv.binaries.client.path], "RUNTIME-2",
           f"strace saw the helper pid {helper} exec {execs or 'nothing'}, expected exactly "
           f"{inv.binaries.client.path}: the hand-off was not observed")
    clients = {c for _, c in ob.pairs if c}
    starts = [s for s in sends if s[3] is not None]
    expect(len(starts) == 1, "RUNTIME-2", f"the helper pid {helper} sent {len(starts)} messages with "
                                          f"descriptors, expected exactly one START: {sends}")
    fd, local, _, rights = starts[0]
    with collect("RUNTIME-2", f"the fixed helper pid {helper}") as problems:
        problems.when(fd != 3, f"it sent START on fd {fd}, not fd 3")
        problems.when(local not in clients, f"its socket:[{local}] is not the client end of a live supervisor "
                                            f"connection ({sorted(clients)})")
        problems.when(rights != [(4, ob.workspace)], f"it passed {rights}, expected exactly fd 4 = {ob.workspace}")


def _traced(ob, evidence, kind: str) -> tracedholders.Judgement:
    """The trace of the whole session, judged (tracedholders.py), its evidence
    recorded; fails when there is none (the session did not get that far)."""
    tr = ob.holdings
    if tr is None:
        raise finding("RUNTIME-2", f"the trace of the runtime's tree was not judged ({ob.problem or ob.stage})")
    evidence("trace: processes of the runtime's tree (what each ran, how it ended)",
             {str(k): v for k, v in tr.processes.items()})
    evidence(f"trace: held the {kind} at any time (the runtime aside)", tr.holdings(kind) or "nobody")
    evidence("trace: what the runtime itself held", tr.runtime_held or "nothing")
    evidence("trace: the connection or the directory sent by SCM_RIGHTS", tr.sent or "nothing")
    evidence("trace: why it cannot say", tr.cannot_say or "nothing: it followed the whole tree")
    return tr


@pytest.mark.requirement("RUNTIME-2")
def test_only_the_runtime_and_the_helper_hold_the_connection(inv, seen, evidence):
    ob = _facts(seen, evidence)
    helper = _helper(ob, inv)
    allowed = {ob.unit.main_pid, helper}
    evidence("supervisor processes", sorted(ob.supervisor))
    tr = _traced(ob, evidence, tracedholders.CONNECTION)
    helper_fd3 = False
    with collect("RUNTIME-2", f"only the runtime (pid {ob.unit.main_pid}) and the fixed helper (pid {helper}) "
                              "may hold the authenticated connection") as problems:
        for server, client in ob.pairs:
            for h in ob.socket_holders.get(server, []):
                evidence(f"live sample: supervisor side socket:[{server}]", _shown([h]))
                problems.when(h.pid not in ob.supervisor,
                              f"pid {h.pid} ({h.exe}) holds the supervisor side socket:[{server}]")
            held = ob.socket_holders.get(client, []) if client else []
            evidence(f"live sample: client side socket:[{client}]", _shown(held) or "nobody")
            for h in held:
                helper_fd3 |= h.pid == helper and h.fd == 3
                problems.when(h.pid not in allowed, f"pid {h.pid} ({h.exe}, uid {h.uid}) holds the connection "
                                                    f"socket:[{client}] as fd {h.fd} (live sample)")
        problems.when(not helper_fd3, f"the fixed helper pid {helper} holds no supervisor connection as fd 3 "
                                      f"while its session lives (connections: {ob.pairs})")
        problems += tr.findings_of(tracedholders.CONNECTION)
        problems += [f"the trace cannot say who held it: {why}" for why in tr.cannot_say]


@pytest.mark.requirement("RUNTIME-2")
def test_only_the_runtime_and_the_helper_hold_the_directory(inv, seen, evidence):
    ob = _facts(seen, evidence)
    helper = _helper(ob, inv)
    evidence("directory", f"{ob.workspace} ({ob.directory[0]}:{ob.directory[1]})")
    evidence("live sample: holders of the directory", _shown(ob.dir_holders) or "nobody")
    tr = _traced(ob, evidence, tracedholders.DIRECTORY)
    others = [h for h in ob.dir_holders
              if h.pid not in {ob.unit.main_pid, helper, 1} | ob.supervisor]
    with collect("RUNTIME-2", f"only the runtime (pid {ob.unit.main_pid}) and the fixed helper (pid {helper}) "
                              f"may hold the session's directory {ob.workspace}") as problems:
        problems += [f"{line} (live sample)" for line in _shown(others)]
        problems += tr.findings_of(tracedholders.DIRECTORY)
        problems += [f"the trace cannot say who held it: {why}" for why in tr.cannot_say]


@pytest.mark.requirement("RUNTIME-2")
def test_the_runtime_holds_no_terminal(seen, evidence):
    ob = _facts(seen, evidence)
    evidence("terminals held by the runtime and its descendants", ob.terminals or "none")
    expect_none(ob.terminals, "RUNTIME-2", "the runtime opened the PTY in process instead of through the fixed helper")


@pytest.mark.requirement("RUNTIME-2")
def test_deleting_the_session_ends_it(seen, evidence):
    ob = _facts(seen, evidence, deleted=True)
    evidence("DELETE", ob.deleted)
    evidence("session gone after", "not gone" if ob.ended_in is None else f"{ob.ended_in:.2f} s")
    if ob.leftovers:
        raise finding("RUNTIME-2", f"after DELETE /api/pty/{ob.pty.id} the session is still "
                                   f"there after {ob.footprint.stop_bound_s():g} s: " + "; ".join(ob.leftovers))
