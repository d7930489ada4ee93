"""What a booted reference host may not leave behind on this machine once
its run is over (test_reference_host.py, test_fleet.py, test_target_install.py)."""

from pathlib import Path

import pytest


def assert_nothing_left(name: str) -> None:
    """No nspawn process, cgroup or mount of that machine after its run."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and argv[0].endswith(b"systemd-nspawn") and f"--machine={name}".encode() in argv:
            pytest.fail(f"systemd-nspawn of {name} still running: pid {proc.name}")
    cgroups = [str(d) for root in Path("/sys/fs/cgroup").iterdir() if root.is_dir()
               for d in [root / name] if d.exists()]
    assert not cgroups, f"cgroups of {name} left: {cgroups}"
    mounts = [l for l in Path("/proc/self/mountinfo").read_text().splitlines() if name in l]
    assert not mounts, f"mounts of {name} left: {mounts}"
