"""Ownership: only root can change what the supervisor runs.

OWN-1   the three binaries are root:root regular files, not writable by group
        or other, in /usr/local/libexec, every directory above root-owned and
        not group/other-writable (judged with lstat: a link is a finding).
OWN-2   the unit files, drop-ins and every Exec*= program of the supervisor
        and the slice are root-owned and not group/other-writable; so are
        the supervisor's EnvironmentFile=, WorkingDirectory=, RootDirectory=
        (RootImage=) and every file its processes hold or map, its cwd and
        root directory, each with its whole directory chain (feeds.py).
SCOPE-2 the installed binaries hash to the claimed SHA-256 values, and the
        running supervisor executes exactly the installed file: its MainPID's
        /proc/<pid>/exe is the same device and inode as the lstat of
        binaries.supervisor.path (running.py; the gate checks it again at
        marker time).
"""

import pytest

from pty_acceptance.host import cgroups, hostfs
from pty_acceptance.provenance import supervisor_inputs as feeds, running_binary as running
from pty_acceptance.host.bus import SERVICE_IFACE, BusError
from pty_acceptance.spec.inventory import ARTIFACTS
from pty_acceptance.host.systemd import show_or_fail
from pty_acceptance.gate.marks import fail

LIBEXEC = "/usr/local/libexec"


def _binary(inv, role):
    return {b.role: b for b in inv.binaries_list}[role]


@pytest.mark.requirement("OWN-1")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_is_a_root_owned_regular_file(inv, role, evidence):
    b = _binary(inv, role)
    node = hostfs.Node.at(b.path)  # lstat, not host.file: Testinfra follows links, and a link is itself the finding
    evidence("lstat", node.describe())
    problems = node.root_controlled_problems("regular file", root_group=True)
    if problems:
        fail(f"OWN-1: {role} binary is not root-controlled: " + "; ".join(problems))


@pytest.mark.requirement("OWN-1")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_lives_in_a_root_controlled_libexec(inv, role, evidence):
    b = _binary(inv, role)
    evidence("chain", [hostfs.Node.at(d).describe() for d in hostfs.ancestors(b.path)])
    if b.path.rsplit("/", 1)[0] != LIBEXEC:
        fail(f"OWN-1: {role} binary is at {b.path}, outside {LIBEXEC}")
    problems = hostfs.chain_problems(b.path)
    if problems:
        fail(f"OWN-1: directory chain above {b.path}: " + "; ".join(problems))


@pytest.mark.requirement("SCOPE-2")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_hash_is_the_claimed_hash(inv, role, evidence):
    b = _binary(inv, role)
    try:  # not host.file's sha256sum: Testinfra follows links
        actual = hostfs.sha256_nofollow(b.path, inv.limit("artifact_bytes"))
    except OSError as e:
        fail(f"SCOPE-2: cannot hash {b.path}: {e}")
    evidence("sha256", f"{actual}  {b.path}")
    if actual != b.sha256:
        fail(f"SCOPE-2: {b.path} hashes to {actual}, the claim is {b.sha256}")


@pytest.mark.requirement("SCOPE-2")
def test_running_supervisor_executes_the_installed_binary(inv, bus, evidence):
    unit, binary = inv.units.supervisor, inv.binaries.supervisor.path
    try:  # /proc/<MainPID>/exe's device and inode under a pidfd: nothing Testinfra reads
        found = running.identify(bus, unit, binary)
    except running.RunningError as e:
        fail(f"SCOPE-2: {e}")
    evidence("running supervisor", found.describe())
    if found.problem is not None:
        fail(f"SCOPE-2: {found.problem}")


def _unit(name):
    unit = show_or_fail(name, "OWN-2")  # not Testinfra's systemd_properties: it drops empty values
    if unit.get("LoadState") != "loaded":
        fail(f"OWN-2: {name} is not loaded (LoadState={unit.get('LoadState')!r})")
    return unit


def _root_controlled(paths):
    problems = []
    for p in paths:
        problems += hostfs.Node.at(p).root_controlled_problems("regular file")
        problems += hostfs.chain_problems(p)
    return problems


@pytest.mark.requirement("OWN-2")
@pytest.mark.parametrize("role", ["supervisor", "slice"])
def test_unit_file_and_drop_ins_are_root_controlled(inv, role, evidence):
    unit = _unit(getattr(inv.units, role))
    files = unit.files()
    evidence("files", [hostfs.Node.at(f).describe() for f in files])
    if not files:
        fail(f"OWN-2: systemd names no unit file for {unit.name}")
    problems = _root_controlled(files)
    if problems:
        fail(f"OWN-2: {unit.name}: " + "; ".join(problems))


@pytest.mark.requirement("OWN-2")
def test_every_exec_program_of_the_supervisor_is_root_controlled(inv, evidence):
    unit = _unit(inv.units.supervisor)
    programs = unit.exec_paths()
    evidence("exec", programs)
    if not programs.get("ExecStart"):
        fail(f"OWN-2: {unit.name} has no ExecStart program")
    flat = [p for ps in programs.values() for p in ps]
    problems = _root_controlled(flat)
    if problems:
        fail(f"OWN-2: programs of {unit.name}: " + "; ".join(problems))


def _service(bus, name):
    try:  # over D-Bus: EnvironmentFiles= with its may-be-missing flag, not `systemctl show`'s text
        props = bus.properties(name, SERVICE_IFACE)
    except BusError as e:
        fail(f"OWN-2: cannot read {name} over D-Bus: {e}")
    if props is None:
        fail(f"OWN-2: {name} is not loaded")
    return props


@pytest.mark.requirement("OWN-2")
def test_paths_the_supervisor_unit_names_are_root_controlled(inv, bus, evidence):
    name = inv.units.supervisor
    props = _service(bus, name)
    named = feeds.named_paths(props)
    evidence("properties", {k: props.get(k) for k in
                            ("EnvironmentFiles", "WorkingDirectory", "RootDirectory", "RootImage")})
    evidence("named", [f"{n.what} " + hostfs.Node.at(n.path).describe()
                       + (" (may be missing)" if n.optional else "") for n in named])
    problems = [p for n in named for p in feeds.named_problems(n)]
    if problems:
        fail(f"OWN-2: {name}: " + "; ".join(problems))


@pytest.mark.requirement("OWN-2")
def test_files_the_supervisor_holds_are_root_controlled(inv, bus, evidence):
    name = inv.units.supervisor
    try:
        pids = cgroups.unit_pids(bus, name)
    except BusError as e:
        fail(f"OWN-2: cannot read {name} over D-Bus: {e}")
    if not pids:
        fail(f"OWN-2: {name} has no processes: what it reads cannot be judged")
    held, gone = [], []
    for pid in sorted(pids):
        try:
            held += feeds.held_paths(pid)
        except OSError as e:
            gone.append(f"pid {pid}: {e.strerror or e}")
    evidence("held", [f"pid {h.pid} {h.what} {h.path!r}" for h in held])
    if gone:
        fail(f"OWN-2: processes of {name} could not be read: " + "; ".join(gone))
    problems = [p for h in held for p in feeds.held_problems(h)]
    if problems:
        fail(f"OWN-2: what {name} holds: " + "; ".join(problems))
