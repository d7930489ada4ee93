"""SUITE-3 and MARK-4 against a blind red team's sixth pass (issue 38): each
test is an attack and asserts what a correct gate must do. A module named by
_PYTHON_SYSCONFIGDATA_NAME (its own, or antigravity running $BROWSER), a
pytest.toml beside an inventory outside the checkout, -X pycache_prefix
under the suite's rewritten modules, and a configuration file pytest finds
for itself whose testpaths reach the suite: refused before pytest starts,
the earlier marker gone, never READY or exit 0."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from gateproject import (PYTEST, QUIET, earlier_marker, said, start,
                         suite_args)

PYTHON = str(Path(sys.executable).parent / "python")


@pytest.fixture
def root_dir():
    """A root-owned, 0755 directory under /run (root's alone): an operator's working directory."""
    d = Path(tempfile.mkdtemp(prefix="pty-acc-red-", dir="/run"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def lines_of(done):
    return [l for l in done.stdout.splitlines() if l.strip()]


def assert_not_ready(done, target):
    lines = lines_of(done)
    last = lines[-1] if lines else ""
    assert not os.path.lexists(target.marker), f"a marker stands: exit {done.returncode}, last line {last!r}"
    assert not last.startswith("READY"), f"exit {done.returncode}, last line {last!r}"
    assert last.startswith("NOT READY") or "NOT READY" in done.stderr, said(done)
    assert done.returncode != 0, said(done)


# ---------------------------------------------------------------- 1. _PYTHON_SYSCONFIGDATA_NAME
# sysconfig imports the module this (unrefused: not PYTHON*) variable names, by name from
# sys.path, the first time its configuration variables are read: loaded_code.stdlib_dirs
# (sysconfig.get_paths) at the marker decision, after the process's code was captured.
# What the patch does once in the process: the decision without OWN-1, pytest's JUnit
# cases (finalised, not yet written) without their failure, sys.path's extra entry unsaid.
PATCH = """
def _install():
    import dataclasses, gc
    from pty_acceptance.decision import rules, loaded_code
    from _pytest.junitxml import LogXML
    made, judged = rules.decide, loaded_code.process_problems
    def decide(*a, **k):
        d = made(*a, **k)
        return dataclasses.replace(d, blockers=tuple(b for b in d.blockers if "OWN-1" not in b.ids))
    def process_problems(judge, path):
        return [p for p in judged(judge, path) if "sys.path holds" not in p]
    rules.decide, loaded_code.process_problems = decide, process_problems
    for o in gc.get_objects():
        if isinstance(o, LogXML):
            for rep in o.node_reporters_ordered:
                el = rep.to_xml()
                for c in [c for c in el if c.tag in ("failure", "error")]:
                    el.remove(c)
                    o.stats["failure"] -= 1
                    o.stats["passed"] += 1
_install()
"""
REAL_SYSCONFIGDATA = ('__import__("_sysconfigdata_%s_%s_%s" % (sys.abiflags, sys.platform, '
                      'getattr(sys.implementation, "_multiarch", "")))')

SYSCONFIG_MODULE = (f"import sys\n_real = {REAL_SYSCONFIGDATA}\nbuild_time_vars = _real.build_time_vars\n"
                    f"exec(compile({PATCH!r}, '<string>', 'exec'), {{}})\n"
                    "sys.modules[__name__] = _real  # sysconfig reads sys.modules[name] back\n")


def test_sysconfigdata_name_imports_operator_module_in_process(failing, target, root_dir):
    """`python -m pytest CHECKOUT/acceptance/` started in the operator's own
    (root-owned, 0755) directory, with _PYTHON_SYSCONFIGDATA_NAME naming a
    module there: sysconfig imports it inside loaded_code.problems."""
    (root_dir / "zzcfg.py").write_text(SYSCONFIG_MODULE)
    done = start(failing, [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", str(failing.path / "acceptance"),
                           f"--inventory={target.inventory}"], cwd=root_dir, _PYTHON_SYSCONFIGDATA_NAME="zzcfg")
    assert_not_ready(done, target)


# ---------------------------------------------------------------- 2. ... =antigravity + BROWSER
# No module of the operator's needed, the console script run from the checkout:
# _PYTHON_SYSCONFIGDATA_NAME=antigravity has sysconfig import the standard library's
# antigravity, which calls webbrowser.open, which runs $BROWSER (unrefused) as root and
# waits for it, inside the gate's decision. Here that program (gdb, on this machine) runs
# the same patch in the gate's process.
def test_sysconfigdata_antigravity_browser_runs_root_command(failing, target, root_dir):
    ran = root_dir / "browser-ran"
    inject = root_dir / "inject.py"
    inject.write_text(f"import sys\nsys.modules['antigravity'].build_time_vars = {REAL_SYSCONFIGDATA}"
                      f".build_time_vars\nexec(compile({PATCH!r}, '<string>', 'exec'), {{}})\n")
    cmds = root_dir / "gdb.cmds"
    cmds.write_text("call (int)PyGILState_Ensure()\n"
                    f"call (int)PyRun_SimpleString(\"exec(open('{inject}').read())\")\n"
                    "call (void)PyGILState_Release($1)\n")
    browser = root_dir / "browser.sh"
    browser.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "uid $(id -u) parent $PPID url $1" > {ran}
        command -v gdb >/dev/null || exit 0
        exec gdb -nx -p "$PPID" -batch -x {cmds} >>{ran} 2>&1
        """))
    browser.chmod(0o755)
    done = start(failing, [PYTEST, *suite_args(target)], _PYTHON_SYSCONFIGDATA_NAME="antigravity",
                 BROWSER=str(browser))
    blockers = [l for l in lines_of(done) if l.startswith("BLOCKER")]
    assert not ran.exists(), f"$BROWSER ran as root inside the gate: {ran.read_text()[:60]!r}; " \
                             f"exit {done.returncode}, last line {lines_of(done)[-1]!r}; {blockers}; " \
                             f"{ran.read_text()[-600:]}"
    assert_not_ready(done, target)


# ---------------------------------------------------------------- 3. pytest.toml beside a path outside
# pytest 9 reads pytest.toml and .pytest.toml (first in its order); checkout.READ_BESIDE, what
# the early guard looks for beside a path outside the checkout, names neither. The inventory
# given apart (`--inventory inv.yml` first: pytest's first parse takes it for a path) in the
# operator's own directory (root's, 0755) holding pytest.toml: pytest takes that file for
# its configuration and imports its addopts' -p plugin before the run guard loads.
@pytest.mark.parametrize("name", ["pytest.toml", ".pytest.toml"])
def test_pytest_toml_beside_an_inventory_outside(failing, target, root_dir, name):
    shutil.copy(target.inventory, root_dir / "inv.yml")
    (root_dir / name).write_text('[pytest]\naddopts = ["-p", "zzdisarm"]\n')
    (root_dir / "zzdisarm.py").write_text("import os\nos._exit(0)\n")
    done = start(failing, [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "--inventory", "inv.yml",
                           str(failing.path / "acceptance")], cwd=root_dir)
    assert done.returncode != 0, f"exit 0 without READY: {said(done)}"
    assert_not_ready(done, target)


def test_control_pytest_ini_beside_an_inventory_outside_is_refused(failing, target, root_dir):
    """The same with pytest.ini (READ_BESIDE names it): the early guard refuses it."""
    shutil.copy(target.inventory, root_dir / "inv.yml")
    (root_dir / "pytest.ini").write_text("[pytest]\naddopts = -p zzdisarm\n")
    (root_dir / "zzdisarm.py").write_text("import os\nos._exit(0)\n")
    done = start(failing, [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "--inventory", "inv.yml",
                           str(failing.path / "acceptance")], cwd=root_dir)
    assert done.returncode != 0, f"exit 0 without READY: {said(done)}"
    assert_not_ready(done, target)


# ---------------------------------------------------------------- 4. python -X pycache_prefix=DIR
# PYTHONPYCACHEPREFIX is refused at start; the interpreter's own -X pycache_prefix is not
# (launch.interpreter_problems names -i and -W only). The one check of sys.pycache_prefix is
# loaded_code.process_problems, at the decision, in the module the cache replaces.


def test_x_pycache_prefix_forged_judge(failing, target, root_dir):
    """The suite's package is loaded through pytest's assertion rewriting, whose
    cache pytest takes from sys.pycache_prefix; rewriting.forged_caches looks only
    beside the source. A pytest-format cache of loaded_code.py (header: the
    source's hash) holding loaded_code plus a patch of pytest's report and a
    problems() that finds nothing."""
    import importlib.util
    import marshal
    import _pytest.assertion.rewrite as rw
    from pty_acceptance.decision import loaded_code

    source = Path(loaded_code.__file__).resolve()
    forged = source.read_text() + QUIET + "\n\ndef problems(checkout, process):\n    return []\n"
    cached = root_dir / "cache" / str(source.parent).lstrip("/") / ("loaded_code" + rw.PYC_TAIL)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00" + importlib.util.source_hash(
        source.read_bytes())[:8] + marshal.dumps(compile(forged, str(source), "exec", dont_inherit=True)))
    done = start(failing, [PYTHON, "-X", f"pycache_prefix={root_dir / 'cache'}", "-m", "pytest",
                           *suite_args(target)])
    assert_not_ready(done, target)


# ---------------------------------------------------------------- 5. a discovered pytest.toml's testpaths
# `python -m pytest` with no path, in the operator's directory whose pytest.toml's testpaths
# names the checkout's acceptance/: the early guard reads only the command line (and a -c
# file) for what the run collects, takes it for a run on no checkout, removes nothing; the
# file's -p plugin ends the process before the run guard loads. An earlier READY marker
# stands, exit 0.
def test_discovered_config_testpaths_reach_the_suite(failing, target, root_dir):
    marker = earlier_marker(target.marker)
    (root_dir / "pytest.ini").write_text(
        f"[pytest]\ntestpaths = {failing.path / 'acceptance'}\n"
        f"addopts = -p no:cacheprovider -p zzdisarm --inventory={target.inventory}\n")
    (root_dir / "zzdisarm.py").write_text("import os\nos._exit(0)\n")
    done = start(failing, [PYTHON, "-m", "pytest"], cwd=root_dir)
    assert not marker.exists() or done.returncode != 0, f"exit 0 and the earlier marker stands: {said(done)}"
    assert not marker.exists(), f"the earlier READY marker stands: {said(done)}"


def test_control_discovered_config_testpaths_reach_the_suite(failing, target, root_dir):
    """The same run without the -p plugin reaches the suite: the run guard arms and
    removes the marker (refusing the foreign configuration)."""
    marker = earlier_marker(target.marker)
    (root_dir / "pytest.ini").write_text(
        f"[pytest]\ntestpaths = {failing.path / 'acceptance'}\n"
        f"addopts = -p no:cacheprovider --inventory={target.inventory}\n")
    done = start(failing, [PYTHON, "-m", "pytest"], cwd=root_dir)
    assert not marker.exists(), f"the earlier READY marker stands: {said(done)}"
    assert done.returncode != 0 and "NOT READY" in done.stdout + done.stderr, said(done)
