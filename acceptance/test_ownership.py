"""Ownership: only root can change what the supervisor runs.

OWN-1   the three binaries are root:root regular files, not writable by group
        or other, in /usr/local/libexec, every directory above root-owned and
        not group/other-writable (judged with lstat: a link is a finding).
OWN-2   the unit files, drop-ins and every Exec*= program of the supervisor
        and the slice are root-owned and not group/other-writable; so are
        the supervisor's EnvironmentFile=, WorkingDirectory=, RootDirectory=
        (RootImage=) and every file its processes hold or map, its cwd and
        root directory, each with its whole directory chain (supervisor_inputs.py).
SCOPE-2 the installed binaries hash to the claimed SHA-256 values, and the
        running supervisor executes exactly the installed file: its MainPID's
        /proc/<pid>/exe is the same device and inode as the lstat of
        binaries.supervisor.path (running_binary.py; the gate checks it again at
        marker time).
"""

import pytest

from pty_acceptance.host import cgroups, hostfs
from pty_acceptance.provenance import running_binary, supervisor_inputs
from pty_acceptance.host.bus import SERVICE_IFACE, BusError
from pty_acceptance.spec.inventory import ARTIFACTS
from pty_acceptance.host.systemd import show_or_fail
from pty_acceptance.gate.checks import expect, expect_none, reading

LIBEXEC = "/usr/local/libexec"


def _binary(inv, role):
    return {b.role: b for b in inv.binaries_list}[role]


@pytest.mark.requirement("OWN-1")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_is_a_root_owned_regular_file(inv, role, evidence):
    b = _binary(inv, role)
    node = hostfs.Node.at(b.path)  # lstat, not host.file: Testinfra follows links, and a link is itself the finding
    evidence("lstat", node.describe())
    expect_none(node.root_controlled_problems("regular file", root_group=True), "OWN-1",
                f"{role} binary is not root-controlled")


@pytest.mark.requirement("OWN-1")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_lives_in_a_root_controlled_libexec(inv, role, evidence):
    b = _binary(inv, role)
    evidence("chain", [hostfs.Node.at(d).describe() for d in hostfs.ancestors(b.path)])
    expect(b.path.rsplit("/", 1)[0] == LIBEXEC, "OWN-1", f"{role} binary is at {b.path}, outside {LIBEXEC}")
    expect_none(hostfs.chain_problems(b.path), "OWN-1", f"directory chain above {b.path}")


@pytest.mark.requirement("SCOPE-2")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_hash_is_the_claimed_hash(inv, role, evidence):
    b = _binary(inv, role)
    with reading("SCOPE-2", f"cannot hash {b.path}", OSError):  # not host.file's sha256sum: Testinfra follows links
        actual = hostfs.sha256_nofollow(b.path, inv.limit("artifact_bytes"))
    evidence("sha256", f"{actual}  {b.path}")
    expect(actual == b.sha256, "SCOPE-2", f"{b.path} hashes to {actual}, the claim is {b.sha256}")


@pytest.mark.requirement("SCOPE-2")
def test_running_supervisor_executes_the_installed_binary(inv, bus, evidence):
    unit, binary = inv.units.supervisor, inv.binaries.supervisor.path
    # /proc/<MainPID>/exe's device and inode under a pidfd: nothing Testinfra reads (a RunningError fails SCOPE-2)
    found = running_binary.identify(bus, unit, binary)
    evidence("running supervisor", found.describe())
    expect(found.problem is None, "SCOPE-2", f"{found.problem}")


def _unit(name):
    unit = show_or_fail(name, "OWN-2")  # not Testinfra's systemd_properties: it drops empty values
    expect(unit.get("LoadState") == "loaded", "OWN-2", f"{name} is not loaded (LoadState={unit.get('LoadState')!r})")
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
    expect(files, "OWN-2", f"systemd names no unit file for {unit.name}")
    expect_none(_root_controlled(files), "OWN-2", unit.name)


@pytest.mark.requirement("OWN-2")
def test_every_exec_program_of_the_supervisor_is_root_controlled(inv, evidence):
    unit = _unit(inv.units.supervisor)
    programs = unit.exec_paths()
    evidence("exec", programs)
    expect(programs.get("ExecStart"), "OWN-2", f"{unit.name} has no ExecStart program")
    flat = [p for ps in programs.values() for p in ps]
    expect_none(_root_controlled(flat), "OWN-2", f"programs of {unit.name}")


def _service(bus, name):
    # over D-Bus: EnvironmentFiles= with its may-be-missing flag, not `systemctl show`'s text
    with reading("OWN-2", f"cannot read {name} over D-Bus", BusError):
        props = bus.properties(name, SERVICE_IFACE)
    expect(props is not None, "OWN-2", f"{name} is not loaded")
    return props


@pytest.mark.requirement("OWN-2")
def test_paths_the_supervisor_unit_names_are_root_controlled(inv, bus, evidence):
    name = inv.units.supervisor
    props = _service(bus, name)
    named = supervisor_inputs.named_paths(props)
    evidence("properties", {k: props.get(k) for k in
                            ("EnvironmentFiles", "WorkingDirectory", "RootDirectory", "RootImage")})
    evidence("named", [f"{n.what} " + hostfs.Node.at(n.path).describe()
                       + (" (may be missing)" if n.optional else "") for n in named])
    expect_none([p for n in named for p in supervisor_inputs.named_problems(n)], "OWN-2", name)


@pytest.mark.requirement("OWN-2")
def test_files_the_supervisor_holds_are_root_controlled(inv, bus, evidence):
    name = inv.units.supervisor
    with reading("OWN-2", f"cannot read {name} over D-Bus", BusError):
        pids = cgroups.unit_pids(bus, name)
    expect(pids, "OWN-2", f"{name} has no processes: what it reads cannot be judged")
    held, gone = [], []
    for pid in sorted(pids):
        try:
            held += supervisor_inputs.held_paths(pid)
        except OSError as e:
            gone.append(f"pid {pid}: {e.strerror or e}")
    evidence("held", [f"pid {h.pid} {h.what} {h.path!r}" for h in held])
    expect_none(gone, "OWN-2", f"processes of {name} could not be read")
    expect_none([p for h in held for p in supervisor_inputs.held_problems(h)], "OWN-2", f"what {name} holds")
