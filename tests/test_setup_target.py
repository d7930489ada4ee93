"""tools/setup-target.sh before it installs anything (issue 32 item 2): an
interpreter older than 3.11 is refused first, in one line, and nothing is
made; a .venv another interpreter made (a first try with Ubuntu 22.04's
3.10) is made anew, so the script is safe to run again as it says. The
whole install, online and from a wheelhouse, is tests/test_target_install.py's
and the evidence's."""

import shutil
import subprocess
from pathlib import Path

from conftest import REPO

# an interpreter that says it is an older Python, whatever it is asked
OLD = "#!/bin/sh\necho '/opt/old/bin/python3.10 3.10.12'\n"


def clone(tmp_path: Path) -> Path:
    """What the script reads of a checkout."""
    root = tmp_path / "checkout"
    for rel in ("tools/setup-target.sh", "requirements/target.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, root / rel)
    return root


def fake(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def setup_target(root: Path, *args: str, python: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "PIP_NO_INDEX": "1"}
    if python:
        env["PYTHON"] = str(python)
    return subprocess.run(["/bin/sh", str(root / "tools/setup-target.sh"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_an_older_python_is_refused_first_in_one_line_and_nothing_is_made(tmp_path):
    root = clone(tmp_path)
    old = fake(tmp_path / "python3.10", OLD)
    done = setup_target(root, python=old)
    assert done.returncode == 3 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr == (f"setup-target: {old} is Python 3.10.12: the suite needs 3.11 or newer "
                           f"(install one, then PYTHON=/path/to/python3.11 sh {root}/tools/setup-target.sh)\n")
    assert not (root / ".venv").exists()


def test_an_interpreter_that_does_not_run_is_refused_in_one_line(tmp_path):
    root = clone(tmp_path)
    done = setup_target(root, python=tmp_path / "no-such-python")
    assert done.returncode == 3 and done.stderr.count("\n") == 1 and "does not run" in done.stderr
    assert not (root / ".venv").exists()


def test_a_venv_another_interpreter_made_is_made_anew(tmp_path):
    """The stale .venv of a first try with 3.10: its python says so; the rerun
    with the host's python3 replaces it before installing (here from an empty
    wheelhouse, so the install itself then fails: the venv is what is judged)."""
    root = clone(tmp_path)
    stale = fake(root / ".venv/bin/python", OLD)
    (root / "wheels").mkdir()
    done = setup_target(root, "--wheelhouse", str(root / "wheels"))
    assert ".venv was made by /opt/old/bin/python3.10 (Python 3.10.12), not /usr/bin/python3 (Python 3." \
        in done.stdout, done.stdout + done.stderr
    assert stale.is_symlink()  # the new venv's own python, not the stale script
    cfg = (root / ".venv/pyvenv.cfg").read_text()
    assert "version" in cfg
    again = subprocess.run([str(root / ".venv/bin/python"), "-c", "import sys; print(sys.version_info >= (3, 11))"],
                           capture_output=True, text=True, check=False)
    assert again.stdout.strip() == "True"
    assert done.returncode != 0 and "No matching distribution" in done.stderr  # the empty wheelhouse


def test_a_venv_without_pip_is_made_anew(tmp_path):
    root = clone(tmp_path)
    fake(root / ".venv/bin/python", "#!/bin/sh\nexit 1\n")
    (root / "wheels").mkdir()
    done = setup_target(root, "--wheelhouse", str(root / "wheels"))
    assert "setup-target: .venv does not run or has no pip: making it anew" in done.stdout, done.stdout + done.stderr
    assert (root / ".venv/pyvenv.cfg").is_file()


def test_the_online_install_makes_a_venv_that_runs_the_command_line(tmp_path):
    """docs/operator.md, "Installing the suite": `sh tools/setup-target.sh` with access to a
    package index (here the one pip is configured with): the pinned packages,
    then the checkout itself (its setup.py under the pinned setuptools, no
    build isolation), and the command line runs from the .venv."""
    root = tmp_path / "checkout"
    for rel in ("tools", "requirements", "acceptance/pty_acceptance", "inventories", "pyproject.toml", "setup.py",
                "MANIFEST.in", "LICENSE", "README.md", "ROOT-ACCEPTANCE.md", "acceptance/conftest.py"):
        if (REPO / rel).is_dir():
            shutil.copytree(REPO / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / rel, root / rel)
    done = subprocess.run(["/bin/sh", str(root / "tools/setup-target.sh")], cwd=root, capture_output=True,
                          text=True, timeout=900, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("setup-target: .venv ready (Python 3.")
    version = subprocess.run([str(root / ".venv/bin/pty-acceptance"), "--version"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert version.returncode == 0 and version.stdout == f"pty-acceptance 0.1.0 (checkout {root})\n", version
