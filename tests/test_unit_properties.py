"""How a live session unit's properties are judged against the inventory's
unit_properties.session (UNIT-1..7, CGROUP-1, CONC-3): the comparison modes,
systemd's system call groups, and the inventory section that names each
property's requirement."""
import dataclasses
import pathlib

import pytest

from pty_acceptance.host import analyze, seccomp
from pty_acceptance.host.systemd import EXACT, SYSCALLS, WORDS, value_problem
from pty_acceptance.spec import inventory
from pty_acceptance.spec.requirements import CATALOGUE

REPO = pathlib.Path(__file__).resolve().parents[1]

FILTER = """\
@default
    # System calls that are always permitted
    brk
    exit
@basic-io
    # Basic IO
    read
    write
@system-service
    # General system service operations
    @basic-io
    @default
    ioctl
    riscv_hwprobe
"""


def test_exact_and_words():
    assert value_problem("PrivateTmp", "yes", "yes", EXACT) is None
    assert value_problem("PrivateTmp", "yes", "no", EXACT) == "PrivateTmp='no', expected 'yes'"
    assert value_problem("BindPaths", "", "", WORDS) is None
    assert value_problem("BindPaths", "", "-/run/dbus/system_bus_socket:/var/tmp/bus.sock:rbind", WORDS)
    assert value_problem("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6", "AF_INET AF_INET6 AF_UNIX",
                         WORDS) is None
    assert value_problem("Environment", "A=1 B=2", "A=1 B=2 B=2", WORDS)  # a repeated word counts
    assert value_problem("KillMode", "control-group", None, EXACT) == "KillMode is not shown"


def test_syscalls_are_an_allow_list_of_exactly_the_expansion():
    allowed = {"read", "write"}
    assert value_problem("SystemCallFilter", "@basic-io", "write read", SYSCALLS, allowed) is None
    beyond = value_problem("SystemCallFilter", "@basic-io", "read write ptrace", SYSCALLS, allowed)
    assert beyond and "1 beyond it ['ptrace']" in beyond
    assert "1 lacking ['write']" in value_problem("SystemCallFilter", "@basic-io", "read", SYSCALLS, allowed)
    assert "a deny list" in value_problem("SystemCallFilter", "@basic-io", "~read write", SYSCALLS, allowed)
    with pytest.raises(ValueError):
        value_problem("SystemCallFilter", "@basic-io", "read", SYSCALLS)


def test_systemd_analyze_groups_are_read_and_expanded(monkeypatch):
    monkeypatch.setattr(analyze, "_run", lambda user, argv, timeout=60: analyze.Result(argv, 0, FILTER))
    res, groups = analyze.syscall_groups("nobody")
    assert groups["@system-service"] == ["@basic-io", "@default", "ioctl", "riscv_hwprobe"]
    assert analyze.expand_syscalls(["@system-service"], groups) == \
        {"brk", "exit", "read", "write", "ioctl", "riscv_hwprobe"}
    with pytest.raises(KeyError):
        analyze.expand_syscalls(["@nosuch"], groups)
    monkeypatch.setattr(analyze, "_run", lambda user, argv, timeout=60: analyze.Result(argv, 1, FILTER))
    assert analyze.syscall_groups("nobody")[1] == {}


def test_names_libseccomp_does_not_know_are_the_ones_systemd_drops():
    assert seccomp.unknown({"read", "arm_fadvise64_64", "no_such_call"}) == {"no_such_call"}


def test_every_session_property_names_a_requirement_of_the_catalogue():
    known = {r.id for r in CATALOGUE}
    judged = inventory._judged()
    assert [f.name for f, _ in judged] == [f.name for f in dataclasses.fields(inventory.SessionUnitProperties)]
    assert {j.requirement for _, j in judged} <= known
    assert {j.how for _, j in judged} <= {EXACT, WORDS, SYSCALLS}
    assert inventory.SESSION_PROPERTY_REQUIREMENTS == (
        "UNIT-1", "UNIT-2", "UNIT-3", "UNIT-4", "UNIT-5", "UNIT-6", "UNIT-7", "CGROUP-1", "CONC-3")


def test_the_reference_inventory_states_every_session_property():
    session = inventory.load(REPO / "inventories/reference.yml").unit_properties.session
    assert session is not None
    assert session.judged("UNIT-7") == {
        "ProtectSystem": ("full", EXACT), "PrivateTmp": ("yes", EXACT),
        "InaccessiblePaths": ("/run/opencode-pty -/run/docker.sock -/run/dbus -/run/user", WORDS),
        "BindPaths": ("", WORDS), "BindReadOnlyPaths": ("", WORDS)}
    assert sum(len(session.judged(r)) for r in inventory.SESSION_PROPERTY_REQUIREMENTS) == \
        len(dataclasses.fields(session))
