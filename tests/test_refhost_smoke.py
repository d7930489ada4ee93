"""Smoke test of the reference-host harness: boot, run inside, leave nothing behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.refhost.machine import CGROUP_ROOTS, Machine, MachineError, cleanup_leftovers, wait_until
from tests.refhost.tree import ensure_tree

REPO_ROOT = Path(__file__).resolve().parents[1]

# Needs root and systemd-nspawn (tools/setup.sh installs it): without them
# these tests fail, they are never skipped.
pytestmark = [pytest.mark.refhost]


@pytest.fixture(scope="module")
def tree() -> Path:
    return ensure_tree()


def _nspawn_pids(name: str) -> list[int]:
    r = subprocess.run(["pgrep", "-f", f"systemd-nspawn .*--machine={name}( |$)"], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def _cgroup_tops() -> set[str]:
    return {f"{root}/{e.name}" for root in CGROUP_ROOTS for e in root.iterdir() if e.is_dir()}


def _ptyacc_mounts(name: str) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if name in line]


def _sleep_in_unit(name: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
            cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        if argv[1:] == [b"600"] and argv[0].endswith(b"sleep") and f"/{name}/" in cgroup and "/ptyacc-run-" in cgroup:
            return True
    return False


@pytest.fixture
def no_leftovers():
    """Yield a list to put machine names in; afterwards assert each left nothing."""
    before = _cgroup_tops()
    names: list[str] = []
    yield names
    for name in names:
        assert not _nspawn_pids(name), f"systemd-nspawn for {name} still running"
        assert not _ptyacc_mounts(name), f"mounts of {name} left: {_ptyacc_mounts(name)}"
        assert not Path("/var/tmp", name).exists()
        assert not Path("/run/systemd/nspawn/propagate", name).exists()
    assert _cgroup_tops() == before, f"cgroups left or changed: {_cgroup_tops() ^ before}"


def test_boot_run_and_teardown(tree, no_leftovers):
    with Machine(tree) as m:
        no_leftovers.append(m.name)
        assert m.run(["systemctl", "is-system-running"]).stdout == b"running\n"
        assert m.run(["sh", "-c", "exit 3"]).returncode == 3
        r = m.run(["sh", "-c", 'echo "$A $$"; pwd'], cwd="/tmp", env={"A": "x y"})
        assert r.returncode == 0 and r.stdout.split(b"\n")[0].startswith(b"x y ")
        assert r.stdout.split(b"\n")[1] == b"/tmp"
        assert m.run(["sh", "-c", "kill -TERM $$"]).returncode != 0  # not a "clean" exit
        cgroup = m.run(["cat", "/proc/self/cgroup"]).stdout.decode()
        assert "0::/system.slice/ptyacc-run-" in cgroup  # a real unit inside, not an nsenter'd process


def test_exception_inside_with_tears_down(tree, no_leftovers):
    with pytest.raises(ZeroDivisionError):
        with Machine(tree) as m:
            no_leftovers.append(m.name)
            m.run(["true"], check=True)
            raise ZeroDivisionError("an exception inside the machine's with block")


def test_copy_out_does_not_follow_symlinks(tree, tmp_path, no_leftovers):
    with Machine(tree) as m:
        no_leftovers.append(m.name)
        m.run(["sh", "-c", "mkdir -p /srv/x && echo hi > /srv/x/f && ln -s /etc/shadow /srv/x/l"
                           " && ln -s /srv/x /srv/dirlink"], check=True)
        notes = m.copy_out("/srv/x", tmp_path / "x")
        assert (tmp_path / "x/f").read_text() == "hi\n"
        assert not os.path.lexists(tmp_path / "x/l")
        assert notes == ["/srv/x/l is a symlink to '/etc/shadow': not followed, not copied"]
        with pytest.raises(MachineError, match="symlinks are not followed"):
            m.copy_out("/srv/dirlink/f", tmp_path / "g")


def test_sigterm_during_run_tears_down(tree, no_leftovers):
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(REPO_ROOT)!r})
        from tests.refhost.machine import Machine
        with Machine({str(tree)!r}) as m:
            print(m.name, flush=True)
            m.run(["sleep", "600"])
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        name = p.stdout.readline().strip()
        no_leftovers.append(name)
        wait_until(lambda: _sleep_in_unit(name), 10, f"sleep 600 running in a unit of {name}")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
            cleanup_leftovers()
