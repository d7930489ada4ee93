"""SUITE-3 and MARK-4 against a blind red team's seventh pass (issue 38),
each attack in a pytest process of its own on the gate's fixture project
with one failing test, asserting what a correct gate must do: pytest's
--log-file written at the marker path, a directory outside the checkout
holding a link to acceptance/ (and a conftest.py that disarms the run
guard), `python -m pytest` from a directory others may write (a shadowed
pytest, a shadowed pdb), and SYSTEMD_OFFLINE: refused, the earlier marker
gone, never READY or exit 0."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pty_acceptance.decision import readiness_marker as marker

from gateproject import ONE_FAILING, PYTEST, QUIET, earlier_ready, expectation, run, said



def _marker_stands_verified(target) -> bool:
    try:
        marker.verify(target.marker, expectation(target))
        return True
    except marker.MarkerRefused:
        return False


# ------------------------------------------------------------- A1: --log-file at the marker path
def _marker_text(target) -> str:
    exp = expectation(target)
    return marker.render(exp.revision, exp.source_sha256, list(zip(exp.claimed, exp.binaries, strict=True))).decode()


def test_log_file_at_the_marker_path_leaves_no_valid_marker(failing, target):
    """pytest's --log-file/--log-file-format (allowed: reporting.py) write a
    root-owned 0644 file at a path and in a shape the command line chooses.
    Aimed at the marker path, with the marker's four lines as the format (a
    `%(message).0s` field makes the format valid and renders nothing), one log
    record (the real suite's host commands each log one: Testinfra's
    `RUN ...` at DEBUG) leaves a marker verify-marker accepts after a run that
    ended NOT READY."""
    (failing.path / "acceptance/test_all.py").write_text(ONE_FAILING.replace(
        "def test_other():\n",
        "def test_other():\n    import logging; logging.getLogger('testinfra').debug('RUN x')\n"))
    fmt = _marker_text(target)[:-1].replace("%", "%%") + "%(message).0s"
    res = run(failing, target, f"--log-file={target.marker}", "--log-file-level=DEBUG",
              f"--log-file-format={fmt}", subprocess=True)
    text = "\n".join(res.outlines[-8:] + res.errlines[-8:])
    assert res.ret != 0, text
    assert not _marker_stands_verified(target), \
        f"a run that did not pass left a marker verify-marker accepts\n{text}"


# ------------------------------------------------------------- A2: the suite reached through a link inside a directory
def _env():
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


DISARM_CONFTEST = """
from pty_acceptance.gate import runguard
runguard.arm = lambda *a, **k: None
"""


@pytest.mark.parametrize("link", ["linked", "tests_linked"])
@pytest.mark.parametrize("with_conftest", [False, True], ids=["bare", "conftest-disarms"])
def test_a_directory_holding_a_link_to_acceptance_keeps_no_marker(project, target, with_conftest, link):
    """`pytest DIR` where DIR (outside the checkout) holds a link to the
    checkout's acceptance/: pytest collects the suite through the link, but the
    early guard (checkout.early_run: DIR itself reaches no checkout) and the
    entry point leave the run alone; the run guard arms only when
    acceptance/conftest.py is met during collection, after DIR's conftest.py."""
    import tempfile
    m = earlier_ready(project, target)
    d = Path(tempfile.mkdtemp(prefix="rt-linkdir-", dir="/tmp"))
    (d / link).symlink_to(project.path / "acceptance")
    if with_conftest:
        (d / "conftest.py").write_text(DISARM_CONFTEST)
    done = subprocess.run([PYTEST, "-p", "no:cacheprovider", str(d), "--inventory", str(target.inventory)],
                          cwd=d, env=_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode != 0, said(done)
    assert not os.path.lexists(m), f"the earlier READY run's marker still stands\n{said(done)}"


# ----------------------------------------------- A3: `python -m pytest` from a directory another user owns
SHADOW_PYTEST = "import os\nos._exit(0)\n"


@pytest.mark.parametrize("module", ["pytest.py", "pytest/__main__.py"])
def test_python_m_pytest_started_in_a_hostile_directory_is_not_exit_0(project, target, module):
    """`python -m pytest CHECKOUT/acceptance --inventory INV` started in a
    directory the service user can write: the interpreter puts that directory
    first on sys.path after the early guard ran (site), and runpy finds the
    `pytest` there, not the virtualenv's. The early guard judged the command
    line (a run on the suite: markers removed, its exit handler registered);
    the module it let run ends the process with status 0 (os._exit skips the
    exit handler): no READY line, no NOT READY line, exit 0."""
    import tempfile
    m = earlier_ready(project, target)
    d = Path(tempfile.mkdtemp(prefix="rt-cwd-", dir="/tmp"))
    os.chmod(d, 0o777)  # e.g. /tmp, or a directory the service user owns
    f = d / module
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(SHADOW_PYTEST)
    if module.startswith("pytest/"):
        (d / "pytest/__init__.py").write_text("")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(project.path / "acceptance"),
                           "--inventory", str(target.inventory)], cwd=d, env=_env(), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert not os.path.lexists(m), f"the earlier marker stands\n{said(done)}"
    assert done.returncode != 0, f"exit 0 without READY\n{said(done)}"


def test_probe_importtime(failing, target):
    """Probe (not an attack): the modules a `python -m pytest` run imports, in order."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pytest", "-p", "no:cacheprovider", "acceptance/",
                           "--inventory", str(target.inventory)], cwd=failing.path, env=_env(), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    Path("/tmp/rt").mkdir(exist_ok=True)
    Path("/tmp/rt/importtime.txt").write_text(done.stderr)
    assert "NOT READY: 1 blockers: OWN-1" in done.stdout, said(done)


# ----------------------------------------------- A4: a standard-library module shadowed from the working directory

SHADOW_PDB = f"""
import os, sys
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != _here]
del sys.modules["pdb"]
import importlib
importlib.import_module("pdb")  # the standard library's, now sys.modules['pdb']
exec(compile({QUIET!r}, "<string>", "exec"), {{}})
"""


def test_python_m_pytest_in_a_hostile_directory_runs_no_code_of_it(failing, target):
    """`python -m pytest` puts its working directory first on sys.path once
    site (and the early guard) ran: a module pytest imports later from the
    standard library (`pdb`, by its debugging plugin at configure; also `cmd`,
    `code`, `codeop`, `readline`, `_sysconfigdata_*`) is taken from there. The
    shadow loads the real module under its name, takes its directory off
    sys.path, and leaves only a patch compiled from a string: the failing run
    ends READY, a marker written."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="rt-pdb-", dir="/tmp"))
    os.chmod(d, 0o777)  # /tmp itself, or the service user's home
    (d / "pdb.py").write_text(SHADOW_PDB)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           str(failing.path / "acceptance"), "--inventory", str(target.inventory)],
                          cwd=d, env=_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    assert not (lines and lines[-1].startswith("READY")), said(done)
    assert done.returncode != 0, said(done)
    assert not os.path.lexists(target.marker), f"a marker was written\n{said(done)}"
    assert "first on sys.path" in done.stderr, said(done)


# ------------------------------------------------------------- A5: environment variables systemctl acts on
@pytest.mark.parametrize("name", ["SYSTEMD_OFFLINE"])
def test_an_environment_that_makes_systemctl_answer_yes_is_refused(name):
    """The `host` fixture (acceptance/conftest.py) resets PATH/LC_ALL and
    unsets the shell's start-up variables, and passes every other variable of
    the operator's environment to Testinfra's `/bin/sh -c systemctl ...`.
    With SYSTEMD_OFFLINE=1 systemd 252's `systemctl is-active ANY` says
    "Running in chroot, ignoring command 'is-active'" and exits 0, which
    Testinfra's SystemdService.is_running reads as running (CUT-4's
    _running_and_enabled). launch.py does not refuse it. (No verdict flip was
    found: CUT-4 also reads ActiveState from `systemctl show` with ROOT_ENV.)"""
    from pty_acceptance.decision import launch
    assert launch.environment_problems([{name: "1"}]), f"{name}=1 is not refused at start"
