"""This checkout's suite copied into a directory of its own, for the suite's
own tests that run real acceptance modules on this machine (a pytest
subprocess started in the copy).

A run refuses at start-up every option that would move its run lock or load
code the checkout does not name (`-o pty_acceptance_run_dir=...`, `-p ...`:
gate/invocation.py), so such a test cannot point the real checkout's run at
a lock of its own or at a fake host. The copy is a checkout of its own
instead: the root conftest.py, ROOT-ACCEPTANCE.md, the inventories and
acceptance/ (its test modules, conftest.py and node-id list) as they are
here, and a pyproject.toml whose pytest section names the copy's own run
directory. With `fake_host`, its acceptance/conftest.py first makes the
preflight's host checks find nothing wrong (this machine is not a systemd
host; preflight.py's own tests check the host checks). The package itself
is this checkout's (the virtualenv's editable install)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import REPO

FAKE_HOST = ("from pty_acceptance.decision import preflight\n"
             "preflight.host_findings = lambda inv: []  # the suite's own tests: this machine is no target\n")


def suite_copy(dest: Path, run_dir: str, fake_host: bool = False, conftest_suffix: str = "") -> Path:
    """The copy at `dest` (made; its parent must exist), its run lock under `run_dir`;
    `conftest_suffix` is appended to its acceptance/conftest.py (a fixture defined
    there replaces the suite's own of that name)."""
    dest.mkdir()
    for name in ("conftest.py", "ROOT-ACCEPTANCE.md"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "inventories", dest / "inventories")
    section = "[tool.pytest.ini_options]\n"
    text = (REPO / "pyproject.toml").read_text()
    assert section in text, "pyproject.toml has no pytest section"
    (dest / "pyproject.toml").write_text(text.replace(section, f'{section}pty_acceptance_run_dir = "{run_dir}"\n', 1))
    (dest / "acceptance").mkdir()
    for f in (REPO / "acceptance").glob("test_*.py"):
        shutil.copy2(f, dest / "acceptance" / f.name)
    shutil.copy2(REPO / "acceptance/node-ids.txt", dest / "acceptance/node-ids.txt")
    conftest = (REPO / "acceptance/conftest.py").read_text()
    (dest / "acceptance/conftest.py").write_text((FAKE_HOST if fake_host else "") + conftest + conftest_suffix)
    return dest
