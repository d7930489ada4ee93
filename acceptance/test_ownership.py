"""Ownership: only root can change what the supervisor runs.

OWN-1   the three binaries are root:root regular files, not writable by group
        or other, in /usr/local/libexec, every directory above root-owned and
        not group/other-writable (judged with lstat: a link is a finding).
OWN-2   the unit files, drop-ins and every Exec*= program of the supervisor
        and the slice are root-owned and not group/other-writable.
SCOPE-2 the installed binaries hash to the claimed SHA-256 values.
"""

import pytest

from pty_acceptance import hostfs
from pty_acceptance.inventory import ARTIFACTS
from pty_acceptance.systemd import show_or_fail

LIBEXEC = "/usr/local/libexec"


def _binary(inv, role):
    return {b.role: b for b in inv.binaries_list}[role]


@pytest.mark.requirement("OWN-1")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_is_a_root_owned_regular_file(inv, role, evidence):
    b = _binary(inv, role)
    node = hostfs.Node.at(b.path)
    evidence("lstat", node.describe())
    problems = node.root_controlled_problems("regular file", root_group=True)
    assert not problems, f"OWN-1: {role} binary is not root-controlled: " + "; ".join(problems)


@pytest.mark.requirement("OWN-1")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_lives_in_a_root_controlled_libexec(inv, role, evidence):
    b = _binary(inv, role)
    evidence("chain", [hostfs.Node.at(d).describe() for d in hostfs.ancestors(b.path)])
    assert b.path.rsplit("/", 1)[0] == LIBEXEC, \
        f"OWN-1: {role} binary is at {b.path}, outside {LIBEXEC}"
    problems = hostfs.chain_problems(b.path)
    assert not problems, f"OWN-1: directory chain above {b.path}: " + "; ".join(problems)


@pytest.mark.requirement("SCOPE-2")
@pytest.mark.parametrize("role", ARTIFACTS)
def test_binary_hash_is_the_claimed_hash(inv, role, evidence):
    b = _binary(inv, role)
    try:
        actual = hostfs.sha256_nofollow(b.path)
    except OSError as e:
        pytest.fail(f"SCOPE-2: cannot hash {b.path}: {e}", pytrace=False)
    evidence("sha256", f"{actual}  {b.path}")
    assert actual == b.sha256, f"SCOPE-2: {b.path} hashes to {actual}, the claim is {b.sha256}"


def _unit(name):
    unit = show_or_fail(name, "OWN-2")
    assert unit.get("LoadState") == "loaded", \
        f"OWN-2: {name} is not loaded (LoadState={unit.get('LoadState')!r})"
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
    unit = _unit(inv.units[role])
    files = unit.files()
    evidence("files", [hostfs.Node.at(f).describe() for f in files])
    assert files, f"OWN-2: systemd names no unit file for {unit.name}"
    problems = _root_controlled(files)
    assert not problems, f"OWN-2: {unit.name}: " + "; ".join(problems)


@pytest.mark.requirement("OWN-2")
def test_every_exec_program_of_the_supervisor_is_root_controlled(inv, evidence):
    unit = _unit(inv.units["supervisor"])
    programs = unit.exec_paths()
    evidence("exec", programs)
    assert programs.get("ExecStart"), f"OWN-2: {unit.name} has no ExecStart program"
    flat = [p for ps in programs.values() for p in ps]
    problems = _root_controlled(flat)
    assert not problems, f"OWN-2: programs of {unit.name}: " + "; ".join(problems)
