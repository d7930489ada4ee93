"""host/userunit.py on a real systemd (a reference host): what the suite runs as
the service user runs in a transient unit of its own, ends with its status
read, its leftovers named and killed with its cgroup, its output read from a
pipe only the suite holds (SUITE-4, PLUGIN-1). The scenarios run inside
(tests/refhost/userunitprobe.py); this module boots the host and judges."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.refhost.machine import Machine
from tests.refhost.run import GUEST_PYTHON, GUEST_SRC
from tests.refhost.tree import ensure_tree

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.refhost]


@pytest.fixture(scope="module")
def seen() -> dict:
    with Machine(ensure_tree(), binds=[(str(REPO), GUEST_SRC, True)]) as m:
        r = m.run([GUEST_PYTHON, "-B", f"{GUEST_SRC}/tests/refhost/userunitprobe.py"], cwd=GUEST_SRC,
                  env={"PYTHONDONTWRITEBYTECODE": "1"}, timeout=300)
        assert r.returncode == 0, r.stdout.decode(errors="replace")[-3000:]
        return json.loads(r.stdout.decode().strip().splitlines()[-1])


def test_a_run_is_the_account_with_exactly_the_environment_given_and_its_status(seen):
    s = seen["status"]
    assert (s["exit"], s["signal"], s["timed_out"]) == (3, None, False)
    lines = s["output"].splitlines()
    assert lines[0].startswith("uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)"), lines[0]
    env = dict(line.split("=", 1) for line in lines[1:] if "=" in line and not line.startswith("uid="))
    # the caller's three, and what systemd adds for User= (SHELL only for a login shell) and
    # every unit; nothing of root's
    assert set(env) - {"SHELL"} == {"PATH", "HOME", "LANG", "LOGNAME", "USER", "INVOCATION_ID", "PWD",
                                    "SYSTEMD_EXEC_PID"}, env
    assert env["PATH"] == "/usr/bin:/bin" and env["HOME"] == "/"
    assert lines[-2:] == ["/", "0027"]
    assert s["unit"].startswith("pty-acceptance-run-") and not s["not_gone"]


def test_a_signal_is_a_signal_and_arguments_are_not_expanded(seen):
    assert (seen["signal"]["exit"], seen["signal"]["signal"]) == (None, 9)
    assert seen["dollar"]["output"] == "$HOME /usr/bin:/bin\n"  # ExecStartEx no-env-expand


def test_at_the_deadline_what_runs_is_named_and_killed(seen):
    s = seen["deadline"]
    assert s["timed_out"] and s["output"] == "started\n"
    assert [p.split()[-1] for p in s["still"]] == ["sleep"], s["still"]
    assert 1.4 < s["duration"] < 10 and not s["not_gone"]


def test_what_a_run_leaves_running_is_named_and_killed_with_its_cgroup(seen):
    s = seen["left"]
    assert s["exit"] == 0 and [p.split()[-1] for p in s["left"]] == ["sleep"], s
    assert not s["not_gone"] and not s["held"]  # the sleep held the output: gone with the cgroup


def test_output_held_open_from_outside_the_unit_is_said_and_not_waited_for(seen):
    s = seen["held"]
    assert s["exit"] == 0 and s["held"] is True, s
    assert seen["held_took"] < 10


def test_a_private_tmp_holds_only_what_is_bound_there(seen):
    s = seen["binds"]
    assert s["output"].splitlines() == ["ro", "w", "read only", "made", "/tmp/w"], s["output"]
    assert seen["made_on_host"] == ["made"]


def test_plugin_1_s_view_hides_the_homes_and_shows_the_mirror_where_the_tree_is(seen):
    """ProtectHome=tmpfs, TemporaryFileSystem= (a(ss)) and BindReadOnlyPaths=
    (a(ssbt)) below the tmpfs, as this release's systemd takes them over D-Bus."""
    s = seen["view"]
    assert s["exit"] == 0, s
    assert s["output"].splitlines() == ["pty-probe", "tree", "pty.ts", "mirror", "0", "ro", "ro", "root 755"], \
        s["output"]


def test_a_scope_holds_what_its_gated_child_starts_and_is_gone_after_close(seen):
    s = seen["scope"]
    assert s["before_gate"] == "/bin/sh" and s["sleep_in_scope"], s
    assert s["left"] == "" and not s["sleep_alive"], s


def test_an_interrupt_removes_the_unit(seen):
    assert seen["interrupt"] == "interrupted"
    assert seen["units_left"] == []
