"""`pty-acceptance inventory check` (invcheck.py, issue 22) on a fake target:
one line per fact, the host's value named; a pin is compared, never taken
from the host, and a FILL-IN says where its value comes from."""

import hashlib
import subprocess
import sys
from pathlib import Path

import yaml

from pty_acceptance.decision import invcheck


def lines_of(path) -> dict[str, invcheck.Line]:
    return {line.key: line for line in invcheck.check(str(path))}


def test_what_the_host_has_is_named_match_or_differs(target):
    Path(target.binaries[2]).write_bytes(b"another build\n")
    found = lines_of(target.inventory)
    assert found["binaries.supervisor.sha256"].status == invcheck.MATCH
    client = found["binaries.client.sha256"]
    assert client.status == invcheck.DIFFERS
    assert hashlib.sha256(b"another build\n").hexdigest() in client.detail  # the host's value, named
    assert found["revision"].status == invcheck.MATCH and found["source_manifest_sha256"].status == invcheck.MATCH
    assert found["plugin.bun"].status == invcheck.MISSING
    assert found["session_environment"].status == invcheck.NOT_READ


def test_a_fill_in_pin_says_where_its_value_comes_from_and_is_not_filled(target):
    data = yaml.safe_load(target.inventory.read_text())
    data["all"]["hosts"]["fake"]["runtime"]["sha256"] = "FILL-IN-the-sha256-of-the-approved-SEA"
    target.inventory.write_text(yaml.safe_dump(data))
    before = target.inventory.read_bytes()
    line = lines_of(target.inventory)["runtime.sha256"]
    assert line.status == invcheck.FILL_IN
    assert "the review's record" in line.detail and invcheck.NOT_A_SOURCE in line.detail
    assert target.inventory.read_bytes() == before  # nothing written
    assert "(schema)" not in lines_of(target.inventory)  # a placeholder is not a schema problem


def test_the_command_exits_non_zero_unless_every_fact_matches(target):
    done = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "inventory", "check", "--inventory",
                           str(target.inventory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1].startswith("inventory check: ") and "do not match" in done.stdout
    # missing where systemd answers; not read where it cannot (this lab has no systemd as PID 1)
    assert any(l.startswith(("missing   units.supervisor: ", "not read  units.supervisor: "))
               for l in done.stdout.splitlines())


def test_a_host_whose_systemd_cannot_answer_is_not_read_never_match(target, monkeypatch):
    """Issue 32 item 6: `match units.peer` said no unit file where systemd had
    said nothing; every unit fact is `not read`, and counts as not matching."""
    from pty_acceptance.host import systemd

    def cannot(name):
        raise systemd.SystemdError("systemctl show exited 1: Failed to connect to bus: Host is down")

    monkeypatch.setattr(systemd.Unit, "show", staticmethod(cannot))
    found = lines_of(target.inventory)
    for key in ("units.supervisor", "units.slice", "units.peer", "supervisor_exec.path"):
        assert found[key].status == invcheck.NOT_READ, found[key]
        assert "systemd did not answer" in found[key].detail
    assert set(invcheck.failed(list(found.values()))) >= {found["units.peer"], found["units.supervisor"]}
    assert found["session_environment"] not in invcheck.failed(list(found.values()))  # only a run tells


def test_every_fill_in_is_its_own_fill_in_line(target):
    """Issue 32 item 6: the success patterns too, not only the hashed pins."""
    data = yaml.safe_load(target.inventory.read_text())
    plugin = data["all"]["hosts"]["fake"]["plugin"]
    plugin["bun_sha256"] = "FILL-IN-the-bun"
    plugin["success"]["last_line"] = "FILL-IN-the-line"
    plugin["success"]["result_file"] = "FILL-IN-the-file"
    target.inventory.write_text(yaml.safe_dump(data))
    found = lines_of(target.inventory)
    for key in ("plugin.bun_sha256", "plugin.success.last_line", "plugin.success.result_file"):
        assert found[key].status == invcheck.FILL_IN, found.get(key)
        assert "the review's record" in found[key].detail
    assert "PLUGIN-1" in found["plugin.success.last_line"].detail
