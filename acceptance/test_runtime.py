"""Node 26.4 runtime gate: the candidate runs the exact Node 26.4 SEA binary.

RUNTIME-1 the process listening on ports.candidate executes exactly the
          inventory's runtime.binary (same st_dev/st_ino; the path is judged
          by lstat, never followed) as the service user, and is
          units.candidate's own (its MainPID or in its cgroup, the unit
          active in the invocation first read: host/unitowner.py; the
          service user's own run of the same binary on that port is not the
          candidate); that binary is a
          fused Node single-executable application (SEA fuse ``:1``); its
          embedded Node version is runtime.node_version exactly (Node 24 never
          passes); runtime.sha256 (required) matches; the
          candidate unit file's ExecStart= runs that same path.

The binary is identified statically (one O_NOFOLLOW streaming read), never
executed. RUNTIME-2 (only the fixed helper ever holds the authenticated socket
and cwd) runs this binary and is its own module (test_runtime_handoff.py).
"""

import time
from typing import cast

import pytest

from pty_acceptance.host import hostfs, unitowner
from pty_acceptance.host.bus import BusError
from pty_acceptance.provenance import node_runtime
from pty_acceptance.gate.checks import collect, expect, finding
from pty_acceptance.gate.failures import fail


@pytest.fixture(scope="module")
def identity(inv):
    """The runtime binary's identity, or the reason it could not be read."""
    try:
        return node_runtime.identify(inv.runtime.binary, limit=inv.limit("runtime_bytes"))
    except node_runtime.RuntimeUnreadable as e:
        return str(e)


def _identity_or_fail(identity, evidence):
    if isinstance(identity, str):
        raise finding("RUNTIME-1", f"cannot identify the runtime binary: {identity}")
    evidence("runtime binary", identity.describe())
    return identity


def _service_ids(host, inv):
    user, group = host.user(inv.service_user), host.group(inv.service_group)
    expect(user.exists, "RUNTIME-1", f"the service user {inv.service_user!r} does not exist")
    expect(group.exists, "RUNTIME-1", f"the service group {inv.service_group!r} does not exist")
    uid, gid = user.uid, group.gid
    return uid, gid


@pytest.mark.requirement("RUNTIME-1")
def test_candidate_listener_runs_the_runtime_binary(inv, host, bus, unit_seen, evidence):
    port, path = inv.ports.candidate, inv.runtime.binary
    found = node_runtime.listener(port)  # psutil, not host.socket: Testinfra names no owning process
    evidence("listener", found.describe())
    if found.create_time is not None:
        evidence("process start time",
                 time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(found.create_time))
                 + f" (pid {found.pid})")
    expect(found.problem is None, "RUNTIME-1", f"candidate port {port}: {found.problem}")
    same, why = node_runtime.same_file(path, found.exe_dev_ino)
    evidence("same file", why)
    expect(same, "RUNTIME-1", f"pid {found.pid} on port {port} runs {found.exe_link!r}, not the runtime binary: {why}")
    uid, gid = _service_ids(host, inv)
    with collect("RUNTIME-1", f"pid {found.pid} on port {port}") as wrong:
        wrong.when(set(found.uids) != {uid},
                   f"uids (real, effective, saved) {found.uids}, expected {uid} ({inv.service_user})")
        wrong.when(set(found.gids) != {gid},
                   f"gids (real, effective, saved) {found.gids}, expected {gid} ({inv.service_group})")
    unit = inv.units.candidate
    try:
        owner = unitowner.judge(bus, unit, cast(int, found.pid), found.create_time, unit_seen)
    except BusError as e:
        raise finding("RUNTIME-1", f"cannot read {unit} from systemd: {e}") from None
    evidence("listener's unit", owner.describe())
    expect(owner.problem is None, "RUNTIME-1", f"candidate port {port}, whatever it runs: {owner.problem}")


@pytest.mark.requirement("RUNTIME-1")
def test_runtime_binary_is_a_fused_node_sea(inv, identity, evidence):
    ident = _identity_or_fail(identity, evidence)
    fuse = ident.fuse
    expect(fuse == node_runtime.FUSED, "RUNTIME-1", {
        node_runtime.PLAIN: f"{ident.path} is a plain node binary (SEA fuse :0), not a single-executable application",
        node_runtime.NOT_NODE: f"{ident.path} carries no SEA fuse sentinel: not a Node binary",
    }.get(fuse, f"{ident.path}: SEA fuse {fuse}"))


@pytest.mark.requirement("RUNTIME-1")
def test_runtime_embedded_node_version_is_exact(inv, identity, evidence):
    ident = _identity_or_fail(identity, evidence)
    want = inv.runtime.node_version
    problem = ident.version_problem()
    expect(problem is None, "RUNTIME-1", f"{ident.path}: {problem}; expected {want}")
    got = ident.version
    expect(node_runtime.major(got) != 24, "RUNTIME-1",
           f"{ident.path} embeds Node {got}: Node 24 never passes the runtime gate; expected {want}")
    expect(got == want, "RUNTIME-1", f"{ident.path} embeds Node {got}, expected exactly {want}")


@pytest.mark.requirement("RUNTIME-1")
def test_runtime_binary_hash_is_pinned(inv, identity, evidence):
    ident = _identity_or_fail(identity, evidence)
    evidence("sha256", f"{ident.sha256}  {ident.path}")
    want = inv.runtime.sha256
    expect(want, "RUNTIME-1", "the inventory pins no runtime.sha256: the exact SEA binary "
                              "cannot be told from another build of the same Node version")
    expect(ident.sha256 == want, "RUNTIME-1", f"{ident.path} hashes to {ident.sha256}, the pin is {want}")


@pytest.mark.requirement("RUNTIME-1")
def test_candidate_unit_execstart_runs_the_runtime_binary(inv, evidence):
    path, want = inv.units.candidate_file, inv.runtime.binary
    try:  # walked from / (a link in any component refused), bounded, never a FIFO or a hard link
        # (not host.file: Testinfra follows links, and a link is itself the finding)
        evidence("candidate unit file", hostfs.Node.walked(path).describe())
        text = node_runtime.unit_file_text(path)
    except hostfs.PathRefused as e:
        fail(f"RUNTIME-1: candidate unit file: {e} (not followed)")
    except node_runtime.UnitFileError as e:
        fail(f"RUNTIME-1: candidate unit file: {e}")
    except OSError as e:
        fail(f"RUNTIME-1: candidate unit file {path} cannot be judged: {e.strerror or e}")
    program, detail = node_runtime.exec_start_program(text)
    evidence("ExecStart", detail)
    if program is None:
        raise finding("RUNTIME-1", f"{path}: {detail}")
    hint = " (systemd specifiers are not expanded: name the literal path)" if "%" in program else ""
    expect(program == want, "RUNTIME-1", f"{path}: ExecStart= runs {program[:300]!r}, "
                                         f"expected the runtime binary {want}{hint}")
