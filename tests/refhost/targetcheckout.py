"""The suite's checkout as an operator brings it to a target host, and its
.venv as the target's own setup makes it (tools/setup-target.sh from a
wheelhouse tools/wheelhouse.sh built on this connected machine):
test_target_install.py and test_fleet.py."""
from __future__ import annotations

import pathlib
import subprocess

WHEELS = "/opt/wheelhouse"  # where a test binds the wheelhouse in the guest (read-only)
CHECKOUT = "/root/opencode-pty-acceptance"  # the checkout's place on a target (docs/fleet.md)
# the checkout as an operator brings it: the files, without this machine's venv, reports and git
COPY = (f"mkdir -m 0700 {CHECKOUT} && tar -C {{src}} --exclude=./.venv --exclude=./reports "
        f"--exclude=./.git --exclude='*/__pycache__' -cf - . | tar -C {CHECKOUT} --no-same-owner -xf - "
        f"&& mkdir -m 0755 {CHECKOUT}/reports && chmod -R go-w {CHECKOUT}")


def copy_script(src: str) -> str:
    """/bin/sh -ec text that copies the checkout at `src` (in the guest) to CHECKOUT."""
    return COPY.format(src=src)


def build_wheelhouse(repo: pathlib.Path, dest: pathlib.Path, python_version: str = "3.11") -> None:
    """tools/wheelhouse.sh DEST: every wheel requirements/target.txt pins, checked against its hash."""
    built = subprocess.run(["sh", str(repo / "tools/wheelhouse.sh"), str(dest), python_version],
                           capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if built.returncode != 0:
        raise AssertionError(f"tools/wheelhouse.sh failed: {built.stdout}{built.stderr}")
