"""The suite's execute-only copies of the host's Python (userunit.copy_interpreter)
take their standard library from the host's Python, whatever lies above their stage.

A blind red team's round ten: a copy staged under /tmp/pty-acceptance-run-*/
walked up from its directory for lib/python3.X/os.py and found the one the
service user had planted in /tmp, with a sitecustomize of its own that ran at
every start (-I or not) and handed the suite a socketpair in place of the
supervisor connection. The stage's own pyvenv.cfg names the host interpreter's
directory as home."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pty_acceptance.host import hostfs, userunit

VERSION = "%d.%d" % sys.version_info[:2]
REAL = os.path.realpath(userunit.INTERPRETER)


@pytest.fixture
def planted(tmp_path):
    """tmp_path/lib/python3.X: the host's library linked name by name, and a
    sitecustomize.py of the planter's that writes PLANTED into tmp_path."""
    lib = tmp_path / "lib" / f"python{VERSION}"
    lib.mkdir(parents=True)
    real = f"/usr/lib/python{VERSION}"
    for name in os.listdir(real):
        if name != "sitecustomize.py":
            (lib / name).symlink_to(os.path.join(real, name))
    (lib / "sitecustomize.py").write_text(f"open({str(tmp_path / 'PLANTED')!r}, 'w').close()\n")
    return tmp_path


def _stage(parent, copy) -> str:
    stage = parent / "pty-acceptance-run-x" / "stage"
    stage.mkdir(parents=True)
    dfd = hostfs.open_dir(str(stage))
    try:
        copy(dfd)
    finally:
        os.close(dfd)
    return str(stage / "python3")


def _run(python: str) -> str:
    return subprocess.run([python, "-I", "-c", "import os, sys; print(sys.base_prefix, os.__file__)"],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def test_a_bare_copy_takes_a_library_planted_above_it(planted):
    """The attack as it was (control: this host's Python does walk up)."""
    python = _stage(planted, lambda dfd: hostfs.create_at(dfd, "python3", open(REAL, "rb").read(), 0o711))
    out = _run(python)
    assert (planted / "PLANTED").exists() and out.startswith(str(planted)), out


def test_a_staged_copy_takes_the_hosts_library(planted):
    python = _stage(planted, lambda dfd: userunit.copy_interpreter(dfd, "python3"))
    out = _run(python)
    assert not (planted / "PLANTED").exists(), out
    base, os_file = out.split()
    assert base == os.path.dirname(os.path.dirname(REAL)) and os_file.startswith(f"{base}/lib/python{VERSION}/"), out
    cfg = os.lstat(os.path.join(os.path.dirname(python), userunit.PYVENV_CFG))
    assert (cfg.st_uid, cfg.st_mode & 0o7777) == (os.getuid(), 0o644)
