"""SUITE-3 and MARK-4 against a blind red team's fifth pass (issue 38): each
test is an attack and asserts what a correct gate must do. What pytest reads
before any of the suite's code (a conftest.py or configuration file beside
a path it is given, a -c file's addopts), what the early guard could not
judge (a NUL byte in an @FILE), a run that reaches the suite through a -c
file only, and `python -i`: refused, the earlier marker gone, never exit 0;
and what the gate must shrug off (allowed settings and interpreter flags)."""

import os
import sys
from pathlib import Path

import pytest

from gateproject import (PYTEST, QUIET, said, start, suite_args,
                         earlier_marker)



def assert_not_ready(done, marker):
    text = said(done)
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    assert not any(l.startswith("READY") for l in lines[-3:]), text
    assert done.returncode != 0, text
    assert not os.path.lexists(marker), "a marker stands\n" + text


SENTINEL_PLUGIN = """
open({sentinel!r}, "w").write("imported before the run guard\\n")
"""


def test_c_ini_addopts_p_plugin_imported_before_guard(failing, target, tmp_path):
    """-c FILE whose addopts holds `-p NAME` and whose pythonpath names a
    directory: pytest imports NAME before the entry point (run guard) loads;
    the early guard reads only the checkout's addopts."""
    evil = tmp_path / "evil"
    evil.mkdir()
    sentinel = tmp_path / "sentinel"
    (evil / "rtplug.py").write_text(SENTINEL_PLUGIN.format(sentinel=str(sentinel)))
    (evil / "evil.ini").write_text(f"[pytest]\npythonpath = {evil}\naddopts = -p rtplug\n")
    earlier_marker(target.marker)
    done = start(failing, [PYTEST, "-c", str(evil / "evil.ini"), *suite_args(target)])
    assert_not_ready(done, Path(target.marker))
    assert not sentinel.exists(), "code named by -c FILE's addopts ran in the gate's process\n" + said(done)


# A plugin whose every patch is compiled from a string (file name `<string>`,
# as dataclasses' own code is): a failure reported as a pass, and the suite's
# refusals and judges answering nothing. It runs before any of the suite's code
# but the early guard, so nothing of the suite has looked yet.
TAKEOVER_SRC = "import sys\n" + QUIET + r'''

from pty_acceptance.gate import invocation
from pty_acceptance.decision import launch, loaded_code
invocation.start_problems = lambda *a, **k: []
invocation.problems = lambda *a, **k: []
invocation.loaded_plugin_problems = lambda *a, **k: []
launch.refused = lambda *a, **k: []
launch.option_problems = lambda *a, **k: []
loaded_code.problems = lambda *a, **k: []
'''
TAKEOVER_PLUGIN = "exec(compile(" + repr(TAKEOVER_SRC) + ", '<string>', 'exec'), {'__name__': 'x'})\n"


def _evil_ini(project, evil: Path, addopts: str) -> Path:
    ini = evil / "evil.ini"
    ini.write_text("[pytest]\njunit_family = xunit1\n"
                   f"pythonpath = {evil}\naddopts = {addopts}\n"
                   + "".join(l + "\n" for l in (project.path / "tox.ini").read_text().splitlines()
                             if l.startswith("pty_acceptance_run_dir")))
    return ini


def test_c_ini_addopts_p_plugin_turns_a_failing_run_ready(failing, target, tmp_path):
    """The same, the plugin making the failing run READY."""
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "rtplug.py").write_text(TAKEOVER_PLUGIN)
    ini = _evil_ini(failing, evil, "-p no:cacheprovider -p rtplug")
    earlier_marker(target.marker)
    done = start(failing, [PYTEST, "-c", str(ini), "--rootdir", str(failing.path), *suite_args(target)])
    assert_not_ready(done, Path(target.marker))


def test_a_config_file_found_beside_another_path_imports_a_plugin_before_guard(failing, target, tmp_path):
    """No -c: a directory named before acceptance/ on the command line holds a
    pytest.ini (pytest takes the first path's config when their common
    ancestor has none); its addopts `-p` and pythonpath run code before the
    run guard. The early guard reads only the checkout's configuration."""
    evil = tmp_path / "evil"
    evil.mkdir()
    sentinel = tmp_path / "sentinel"
    (evil / "rtplug.py").write_text(SENTINEL_PLUGIN.format(sentinel=str(sentinel)))
    (evil / "pytest.ini").write_text(f"[pytest]\npythonpath = {evil}\naddopts = -p rtplug\n")
    earlier_marker(target.marker)
    done = start(failing, [PYTEST, "-p", "no:cacheprovider", str(evil), "acceptance/",
                           "--inventory", str(target.inventory)], cwd=failing.path)
    assert_not_ready(done, Path(target.marker))
    assert not sentinel.exists(), "code named by another path's pytest.ini ran in the gate's process\n" + said(done)


def test_a_config_file_beside_the_inventory_imports_a_plugin_before_guard(failing, target, tmp_path):
    """`pytest --inventory DIR/inv.yml acceptance/`: pytest's first parse
    takes DIR/inv.yml for a path (the suite's options are not known yet), so
    DIR's pytest.ini is the configuration; its addopts `-p` runs code before
    the run guard (whoever can write DIR: the inventory's directory)."""
    evil = tmp_path / "evil"
    evil.mkdir()
    sentinel = tmp_path / "sentinel"
    (evil / "rtplug.py").write_text(SENTINEL_PLUGIN.format(sentinel=str(sentinel)))
    (evil / "pytest.ini").write_text(f"[pytest]\npythonpath = {evil}\naddopts = -p rtplug\n")
    inv = evil / "inv.yml"
    inv.write_text(target.inventory.read_text())
    earlier_marker(target.marker)
    done = start(failing, [PYTEST, "-p", "no:cacheprovider", "--inventory", str(inv), "acceptance/"],
                 cwd=failing.path)
    assert_not_ready(done, Path(target.marker))
    assert not sentinel.exists(), "code named by the inventory directory's pytest.ini ran\n" + said(done)


# The plugin, when pytest took its directory's pytest.ini for the run's, also
# gives the run the checkout's rootdir and configuration back (the Config that
# is importing it is on the stack), so nothing later sees where it came from.
RESTORE_SRC = r'''
import sys, os
from pathlib import Path
from _pytest.config import Config
from _pytest.config.findpaths import locate_config
f = sys._getframe()
while f is not None and not isinstance(f.f_locals.get("self"), Config):
    f = f.f_back
config = f.f_locals["self"]
root = Path(os.getcwd())
base, inipath, cfg, _ = locate_config(root, [root])
config._rootpath, config._inipath, config._inicfg = root, inipath, cfg
config._inicache.clear()
'''
RESTORE_PLUGIN = "exec(compile(" + repr(TAKEOVER_SRC + RESTORE_SRC) + ", '<string>', 'exec'), {'__name__': 'x'})\n"


def test_a_config_file_beside_the_inventory_turns_a_failing_run_ready(failing, target, tmp_path):
    """The same, whoever writes the inventory's directory: `pytest --inventory
    DIR/inv.yml acceptance/` of a failing project ends READY, marker written."""
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "rtplug.py").write_text(RESTORE_PLUGIN)
    (evil / "pytest.ini").write_text(f"[pytest]\npythonpath = {evil}\naddopts = -p rtplug\n")
    inv = evil / "inv.yml"
    inv.write_text(target.inventory.read_text())
    earlier_marker(target.marker)
    done = start(failing, [PYTEST, "-p", "no:cacheprovider", "--inventory", str(inv), "acceptance/"],
                 cwd=failing.path)
    assert_not_ready(done, Path(target.marker))


@pytest.mark.parametrize("how", ["-V", "--assert=bogus"])
def test_a_nul_byte_in_an_args_file_silences_the_early_guard(project, target, how):
    """An @FILE line `--inventory=/x<NUL>y` (a NUL byte cannot be typed in an
    argument, but an @FILE line holds one): marker_paths.named raises
    ValueError (embedded null byte) inside the early guard, whose `except
    Exception: pass` leaves the process as if it were not there: nothing
    removed, no exit handler. pytest then stops before the run guard arms (a
    single -V, a usage error of its first parse): the earlier marker stands."""
    marker = earlier_marker(target.marker)
    (project.path / "args.txt").write_text("--inventory=/nonexistent/x\0y\n")
    done = start(project, [PYTEST, "-p", "no:cacheprovider", "@args.txt", how, "acceptance/",
                           "--inventory", str(target.inventory)])
    assert not os.path.lexists(marker), f"the earlier READY run's marker stands\n{said(done)}"
    assert done.returncode != 0, said(done)


def test_a_run_on_the_suite_named_only_in_a_c_files_addopts_keeps_the_marker(project, target, tmp_path):
    """`pytest -c FILE` started elsewhere, FILE's addopts naming the checkout's
    acceptance/ and the inventory: the early guard reads only the command line,
    PYTEST_ADDOPTS and the checkout's own configuration, finds no checkout, and
    does nothing; pytest stops at FILE's minversion before the run guard arms."""
    marker = earlier_marker(target.marker)
    ini = tmp_path / "e.ini"
    ini.write_text(f"[pytest]\nminversion = 999\naddopts = -p no:cacheprovider {project.path}/acceptance "
                   f"--inventory {target.inventory}\n")
    done = start(project, [PYTEST, "-c", str(ini)], cwd=tmp_path)
    assert done.returncode != 0, said(done)
    assert not os.path.lexists(marker), f"the earlier READY run's marker stands\n{said(done)}"


@pytest.mark.parametrize("how", ["-m pytest", "console script"])
def test_python_i_makes_a_failing_run_exit_0(failing, target, how):
    """`python -i` (what PYTHONINSPECT, refused, does): pytest's SystemExit
    turns the interpreter interactive; with stdin at its end the process
    exits 0 after `NOT READY` (on a terminal, a root prompt waits)."""
    python = str(Path(sys.executable).parent / "python")
    argv = [python, "-i", "-m", "pytest"] if how == "-m pytest" else [python, "-i", PYTEST]
    done = start(failing, [*argv, *suite_args(target)])
    assert "NOT READY" in done.stdout + done.stderr, said(done)
    assert done.returncode != 0, "exit 0 without READY\n" + said(done)


def test_a_conftest_beside_the_inventory_turns_a_failing_run_ready(failing, target, tmp_path):
    """The documented command, `pytest acceptance/ --inventory DIR/inv.yml`:
    pytest's first parse takes DIR/inv.yml for a path to collect, and loads
    DIR/conftest.py as an initial conftest (confcutdir stops only the walk
    above the checkout, not a sibling directory). Whoever writes DIR runs code
    in the gate's process; its patches, compiled from a string, make a failing
    run READY."""
    evil = tmp_path / "evil"
    evil.mkdir()
    sentinel = tmp_path / "sentinel"
    (evil / "conftest.py").write_text(SENTINEL_PLUGIN.format(sentinel=str(sentinel)) + TAKEOVER_PLUGIN)
    inv = evil / "inv.yml"
    inv.write_text(target.inventory.read_text())
    earlier_marker(target.marker)
    done = start(failing, [PYTEST, "-p", "no:cacheprovider", "acceptance/", "--inventory", str(inv)])
    assert not sentinel.exists(), "DIR/conftest.py ran in the gate's process\n" + said(done)
    assert_not_ready(done, Path(target.marker))


@pytest.mark.parametrize("option", ["--waivers", "--report-dir", "--sign-key", "--marker"])
def test_a_conftest_beside_any_suite_option_value_runs(failing, target, tmp_path, option):
    """The same for every value option of the suite's (checkout.VALUE_OPTIONS):
    pytest's first parse takes each value for a path, and loads the
    conftest.py of its directory (of the value itself for a directory)."""
    evil = tmp_path / "evil"
    evil.mkdir()
    sentinel = tmp_path / "sentinel"
    (evil / "conftest.py").write_text(SENTINEL_PLUGIN.format(sentinel=str(sentinel)))
    value = {"--waivers": evil / "waivers.yml", "--report-dir": evil, "--sign-key": evil / "key.pem",
             "--marker": evil / "pty-supervisor-verified"}[option]
    if option in ("--waivers", "--sign-key"):
        value.write_text("")
    done = start(failing, [PYTEST, *suite_args(target), option, str(value)])
    assert not sentinel.exists(), f"the conftest.py beside {option}'s value ran in the gate's process\n" + said(done)


@pytest.mark.parametrize("env,argv_extra", [
    ({"PYTHONIOENCODING": "undefined"}, []), ({"PYTHONIOENCODING": "utf-16"}, []), ({"PYTHONDEVMODE": "1"}, []),
    ({"PYTHONMALLOC": "debug"}, []), ({"PYTEST_THEME": "nonexistent"}, ["--color=yes", "--code-highlight=yes"]),
    ({}, ["--runxfail"]), ({}, ["--doctest-modules"]), ({}, ["-p", "no:skipping"]), ({}, ["--tb=no", "-rN"]),
    ({"COLUMNS": "1"}, []), ({"LANG": "tr_TR.UTF-8", "LC_ALL": "tr_TR.UTF-8"}, []),
])
def test_allowed_settings_keep_a_failing_run_not_ready(failing, target, env, argv_extra):
    done = start(failing, [PYTEST, *suite_args(target), *argv_extra], **env)
    assert done.returncode != 0, said(done)
    assert not os.path.lexists(target.marker), said(done)
    assert "READY: marker written" not in done.stdout, said(done)


@pytest.mark.parametrize("flags", [["-X", "frozen_modules=off"], ["-X", "importtime"], ["-b"], ["-E"], ["-I"],
                                   ["-u"], ["-x"]])
def test_interpreter_flags_keep_a_failing_run_not_ready(failing, target, flags):
    python = str(Path(sys.executable).parent / "python")
    done = start(failing, [python, *flags, PYTEST, *suite_args(target)])
    assert done.returncode != 0, said(done)
    assert not os.path.lexists(target.marker), said(done)
    assert "READY: marker written" not in done.stdout, said(done)
