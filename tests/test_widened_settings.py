"""systemd 257 widened PrivateTmp, ProtectControlGroups and PrivateUsers and
shows the whole setting as <Name>Ex beside the boolean, which still says
"yes" (issue 31): a pinned boolean is read with its Ex form, on 252 (no Ex)
as before. What `systemctl show` printed on the two reference hosts."""

import pytest

from pty_acceptance.decision import invcheck
from pty_acceptance.host import systemd

# systemd 252 (bookworm): PrivateTmp=yes; no Ex properties
ON_252 = {"PrivateTmp": "yes", "ProtectControlGroups": "yes", "PrivateUsers": "no"}
# systemd 257 (trixie): the same unit
ON_257 = {**ON_252, "PrivateTmpEx": "connected", "ProtectControlGroupsEx": "yes", "PrivateUsersEx": "no"}


@pytest.mark.parametrize("props", [ON_252, ON_257])
def test_the_pinned_setting_reads_as_pinned_on_both(props):
    assert {k: systemd.setting(props, k) for k in ON_252} == ON_252


@pytest.mark.parametrize("key, ex, seen", [
    ("PrivateTmp", "disconnected", "yes (PrivateTmpEx=disconnected)"),
    ("ProtectControlGroups", "strict", "yes (ProtectControlGroupsEx=strict)"),
    ("ProtectControlGroups", "private", "yes (ProtectControlGroupsEx=private)"),
])
def test_a_setting_257_widened_is_not_the_pinned_yes(key, ex, seen):
    props = {**ON_257, key + "Ex": ex}
    assert systemd.setting(props, key) == seen != "yes"
    assert systemd.widened_settings(props)[key + "Ex"] == ex
    assert systemd.widened_settings(ON_252) == {}


def test_inventory_check_says_the_widened_setting(monkeypatch):
    shown = {"opencode-pty-supervisor.service": {**ON_257, "LoadState": "loaded",
                                                 "PrivateTmpEx": "disconnected"}}
    vars_ = {"units": {"supervisor": "opencode-pty-supervisor.service", "slice": "opencode-pty.slice"},
             "unit_properties": {"supervisor": {"PrivateTmp": "yes", "ProtectControlGroups": "yes"}}}
    lines = {line.key: line for line in invcheck._properties(vars_, shown)}
    tmp = lines["unit_properties.supervisor.PrivateTmp"]
    assert tmp.status == invcheck.DIFFERS and "PrivateTmpEx=disconnected" in tmp.detail, tmp
    assert lines["unit_properties.supervisor.ProtectControlGroups"].status == invcheck.MATCH
