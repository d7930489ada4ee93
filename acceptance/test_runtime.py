"""Node 26.4 runtime gate: the candidate runs the exact Node 26.4 SEA binary.

RUNTIME-1 the process listening on ports.candidate executes exactly the
          inventory's runtime.binary (same st_dev/st_ino; the path is judged
          by lstat, never followed) as the service user; that binary is a
          fused Node single-executable application (SEA fuse ``:1``); its
          embedded Node version is runtime.node_version exactly (Node 24 never
          passes); runtime.sha256 (required) matches; the
          candidate unit file's ExecStart= runs that same path.

The binary is identified statically (one O_NOFOLLOW streaming read), never
executed. RUNTIME-2 (only the fixed helper ever holds the authenticated socket
and cwd) runs this binary and is its own module (test_runtime_handoff.py).
"""

import time

import pytest

from pty_acceptance.host import hostfs
from pty_acceptance.provenance import node_runtime as runtime
from pty_acceptance.gate.marks import fail


@pytest.fixture(scope="module")
def identity(inv):
    """The runtime binary's identity, or the reason it could not be read."""
    try:
        return runtime.identify(inv.runtime.binary, limit=inv.limit("runtime_bytes"))
    except runtime.RuntimeUnreadable as e:
        return str(e)


def _identity_or_fail(identity, evidence):
    if isinstance(identity, str):
        fail(f"RUNTIME-1: cannot identify the runtime binary: {identity}")
    evidence("runtime binary", identity.describe())
    return identity


def _service_ids(host, inv):
    user, group = host.user(inv.service_user), host.group(inv.service_group)
    if not user.exists:
        fail(f"RUNTIME-1: the service user {inv.service_user!r} does not exist")
    if not group.exists:
        fail(f"RUNTIME-1: the service group {inv.service_group!r} does not exist")
    uid, gid = user.uid, group.gid
    return uid, gid


@pytest.mark.requirement("RUNTIME-1")
def test_candidate_listener_runs_the_runtime_binary(inv, host, evidence):
    port, path = inv.ports.candidate, inv.runtime.binary
    found = runtime.listener(port)  # psutil, not host.socket: Testinfra names no owning process
    evidence("listener", found.describe())
    if found.create_time is not None:
        evidence("process start time",
                 time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(found.create_time))
                 + f" (pid {found.pid})")
    if found.problem is not None:
        fail(f"RUNTIME-1: candidate port {port}: {found.problem}")
    same, why = runtime.same_file(path, found.exe_dev_ino)
    evidence("same file", why)
    if not same:
        fail(f"RUNTIME-1: pid {found.pid} on port {port} runs {found.exe_link!r}, "
             f"not the runtime binary: {why}")
    uid, gid = _service_ids(host, inv)
    wrong = []
    if set(found.uids) != {uid}:
        wrong.append(f"uids (real, effective, saved) {found.uids}, expected {uid} ({inv.service_user})")
    if set(found.gids) != {gid}:
        wrong.append(f"gids (real, effective, saved) {found.gids}, expected {gid} ({inv.service_group})")
    if wrong:
        fail(f"RUNTIME-1: pid {found.pid} on port {port}: " + "; ".join(wrong))


@pytest.mark.requirement("RUNTIME-1")
def test_runtime_binary_is_a_fused_node_sea(inv, identity, evidence):
    ident = _identity_or_fail(identity, evidence)
    fuse = ident.fuse
    if fuse != runtime.FUSED:
        fail({
            runtime.PLAIN: f"RUNTIME-1: {ident.path} is a plain node binary (SEA fuse :0), "
                           "not a single-executable application",
            runtime.NOT_NODE: f"RUNTIME-1: {ident.path} carries no SEA fuse sentinel: not a Node binary",
        }.get(fuse, f"RUNTIME-1: {ident.path}: SEA fuse {fuse}"))


@pytest.mark.requirement("RUNTIME-1")
def test_runtime_embedded_node_version_is_exact(inv, identity, evidence):
    ident = _identity_or_fail(identity, evidence)
    want = inv.runtime.node_version
    problem = ident.version_problem()
    if problem is not None:
        fail(f"RUNTIME-1: {ident.path}: {problem}; expected {want}")
    got = ident.version
    if runtime.major(got) == 24:
        fail(f"RUNTIME-1: {ident.path} embeds Node {got}: Node 24 never passes the "
             f"runtime gate; expected {want}")
    if got != want:
        fail(f"RUNTIME-1: {ident.path} embeds Node {got}, expected exactly {want}")


@pytest.mark.requirement("RUNTIME-1")
def test_runtime_binary_hash_is_pinned(inv, identity, evidence):
    ident = _identity_or_fail(identity, evidence)
    evidence("sha256", f"{ident.sha256}  {ident.path}")
    want = inv.runtime.sha256
    if not want:
        fail("RUNTIME-1: the inventory pins no runtime.sha256: the exact SEA binary "
             "cannot be told from another build of the same Node version")
    if ident.sha256 != want:
        fail(f"RUNTIME-1: {ident.path} hashes to {ident.sha256}, the pin is {want}")


@pytest.mark.requirement("RUNTIME-1")
def test_candidate_unit_execstart_runs_the_runtime_binary(inv, evidence):
    path, want = inv.units.candidate_file, inv.runtime.binary
    try:  # walked from / (a link in any component refused), bounded, never a FIFO or a hard link
        # (not host.file: Testinfra follows links, and a link is itself the finding)
        evidence("candidate unit file", hostfs.Node.walked(path).describe())
        text = runtime.unit_file_text(path)
    except hostfs.PathRefused as e:
        fail(f"RUNTIME-1: candidate unit file: {e} (not followed)")
    except runtime.UnitFileError as e:
        fail(f"RUNTIME-1: candidate unit file: {e}")
    except OSError as e:
        fail(f"RUNTIME-1: candidate unit file {path} cannot be judged: {e.strerror or e}")
    program, detail = runtime.exec_start_program(text)
    evidence("ExecStart", detail)
    if program is None:
        fail(f"RUNTIME-1: {path}: {detail}")
    hint = " (systemd specifiers are not expanded: name the literal path)" if "%" in program else ""
    if program != want:
        fail(f"RUNTIME-1: {path}: ExecStart= runs {program[:300]!r}, "
             f"expected the runtime binary {want}{hint}")
