"""PROTO-1/3's readings of the host, judged from fake readings: descriptors by
identity (observe.new_descriptors, supervisor_descriptors) and what the unit
watch saw (unitwatch.watch_problems)."""
import os

import pytest

from pty_acceptance.host import cgroups, observe, unitwatch

BASE = {(10, 0): "/dev/null mnt_id=20 ino=5", (10, 3): "socket:[100]",
        (11, 0): "/dev/null mnt_id=20 ino=5", (11, 7): "/dev/null mnt_id=20 ino=5",
        (11, 8): "/dev/null mnt_id=20 ino=5"}


def test_a_descriptor_kept_while_another_is_closed_is_new():
    # fault swaps-received-fds: the count stays, a /dev/null spare became the received /tmp
    now = dict(BASE)
    del now[(11, 8)]
    now[(11, 7)] = "/tmp mnt_id=21 ino=4242"
    assert len(now) < len(BASE) + 1  # what the old count comparison accepted
    assert observe.new_descriptors(BASE, now) == {(11, 7): "/tmp mnt_id=21 ino=4242"}


def test_descriptors_closed_since_the_baseline_are_not_new():
    now = {k: v for k, v in BASE.items() if k != (10, 3)}
    assert observe.new_descriptors(BASE, now) == {}


def test_a_new_number_is_new():
    now = dict(BASE, **{}) | {(10, 9): "socket:[101]"}
    assert observe.new_descriptors(BASE, now) == {(10, 9): "socket:[101]"}


def test_no_supervisor_process_is_an_error(monkeypatch):
    # the old reading returned {} for a unit without MainPID, and {} compared equal
    monkeypatch.setattr(cgroups, "unit_pids", lambda bus, unit: set())
    with pytest.raises(observe.DescriptorError, match="no MainPID"):
        observe.supervisor_descriptors(None, "sup.service")


def test_an_unreadable_supervisor_process_is_an_error(monkeypatch):
    monkeypatch.setattr(cgroups, "unit_pids", lambda bus, unit: {2 ** 22 + 12345})
    with pytest.raises(observe.DescriptorError, match="cannot list"):
        observe.supervisor_descriptors(None, "sup.service")


def test_own_descriptors_read_by_identity(monkeypatch, tmp_path):
    monkeypatch.setattr(cgroups, "unit_pids", lambda bus, unit: {os.getpid()})
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        table = observe.supervisor_descriptors(None, "sup.service")
        ident = table[(os.getpid(), fd)]
    finally:
        os.close(fd)
    st = os.stat(tmp_path)
    assert ident.startswith(str(tmp_path) + " ") and f"ino={st.st_ino}" in ident


def test_the_watch_must_have_seen_the_accepted_unit():
    unit = "opencode-pty-" + "a" * 32 + ".service"
    # a blind watch: nothing created, one accepted: the old check (created - accepted) passed
    assert unitwatch.watch_problems(set(), {unit})[0].startswith("the unit watch never saw UnitNew")
    assert unitwatch.watch_problems({unit}, {unit}) == []
    other = "opencode-pty-" + "b" * 32 + ".service"
    assert "beyond the accepted" in unitwatch.watch_problems({unit, other}, {unit})[0]
