"""What the interpreter and pytest's command line may not change in a run that
earns the marker (SUITE-3).

`-k`, `-m`, `--deselect` and the other selecting options are rules.py's
NARROWING_OPTIONS: a narrowed run goes on, NOT READY, with its report; the
checked-in node-id list (nodeids.py) catches any narrowing that reaches
collection by another road. This module names how the run was started: the
interpreter, the configuration pytest reads and the code it loads.

Refused at start-up (`start_problems`: runguard.py from pytest's first parse
of the arguments, before any conftest.py is loaded where the guard's entry
point is, and startup.py again from the full parse), after the run lock was
taken at the checkout's own place and the markers were removed, before any
test, any removal of what an earlier run left and any unit is touched:

- checks compiled away: `python -O`/`-OO`/PYTHONOPTIMIZE strips every
  `assert` that pytest did not rewrite, and `--assert=plain` stops the
  rewriting of the test modules' own asserts;
- another configuration: `-o/--override-ini` (python_files,
  python_functions, junit_logging, pty_acceptance_run_dir, ...), `-c FILE`,
  `--rootdir`, `--confcutdir`, or a pytest rootdir or configuration file
  that is not the checkout's;
- the checkout's own start-up skipped or found by another road:
  `--noconftest`, an `--import-mode` other than prepend (the editable
  install's path holds acceptance/, so under `append` the root conftest's
  module name finds acceptance/conftest.py), `--pyargs` (test modules found
  by import name on sys.path, not by the checkout's paths);
- code the checkout does not hold: a plugin named with `-p` or
  PYTEST_PLUGINS.

At the end of the run (`problems`, a SUITE-3 blocker each) the same, and what
only collection shows: a plugin of another distribution than pytest's own,
Testinfra and the suite's loaded through an entry point, a conftest.py
outside the checkout. Each problem is one sentence that names the cause.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pty_acceptance.decision import marker_paths
from pty_acceptance.gate import checkout

# Distributions whose pytest11 entry-point plugins a run may load: the suite's
# declared dependencies (pyproject.toml), and the suite itself (its run guard).
ALLOWED_DISTRIBUTIONS = {"pytest-testinfra", "opencode-pty-acceptance"}

ROOTDIR_HINT = ("pytest takes its rootdir from the first paths it is given, and knows the suite's own "
                "options only once the checkout's conftest.py has loaded: `--inventory FILE` with no path "
                "to collect makes FILE that path. Run `pytest acceptance/ --inventory FILE` from the checkout")


def _taken_for_a_path(config: pytest.Config) -> bool:
    """pytest's rootdir is where the value of one of the suite's options lies."""
    args = checkout.raw_args(config)
    here = Path(config.invocation_params.dir)
    values = [v for name in checkout.VALUE_OPTIONS for v in marker_paths.option_values(args, name, joined=False)]
    return any(Path(config.rootpath) in (p := here / v, *p.parents) for v in values)


def interpreter_problems(option) -> list[str]:
    out = []
    if sys.flags.optimize:
        out.append(f"python runs with optimisation level {sys.flags.optimize} (-O, -OO or "
                   "PYTHONOPTIMIZE): assert statements outside pytest's rewriting are compiled away")
    mode = getattr(option, "assertmode", "rewrite")
    if mode != "rewrite":
        out.append(f"--assert={mode}: pytest's assertion rewriting is off, the test modules' own "
                   "checks are plain asserts")
    return out


def configuration_problems(config: pytest.Config, option, root: Path) -> list[str]:
    out = []
    overrides = list(getattr(option, "override_ini", None) or [])
    if overrides:
        out.append("-o/--override-ini changes the project's configuration: " + " ".join(overrides))
    if getattr(option, "inifilename", None):
        out.append(f"-c {option.inifilename}: another configuration file than the checkout's")
    if getattr(option, "rootdir", None):
        out.append(f"--rootdir {option.rootdir} given")
    if Path(config.rootpath).resolve() != root:
        hint = f" ({ROOTDIR_HINT})" if _taken_for_a_path(config) else ""
        out.append(f"pytest's rootdir is {config.rootpath}, not the checkout {root}{hint}")
    inipath = config.inipath
    if inipath is None or Path(inipath).resolve().parent != root:
        out.append(f"the configuration file is {inipath}, not one of the checkout {root}")
    confcutdir = getattr(config.known_args_namespace, "confcutdir", None)
    default = str(Path(inipath).parent) if inipath else str(config.rootpath)
    if confcutdir is not None and os.path.abspath(confcutdir) != os.path.abspath(default):
        out.append(f"--confcutdir {confcutdir} given (the checkout's default is {default})")
    return out


def start_up_problems(option) -> list[str]:
    """How the checkout's own start-up could be skipped, or its tests found by another road."""
    out = []
    if getattr(option, "noconftest", False):
        out.append("--noconftest: the checkout's conftest.py files, the suite's start-up and fixtures, "
                   "are not loaded")
    mode = str(getattr(option, "importmode", "prepend"))
    if mode != "prepend":
        out.append(f"--import-mode={mode}: the checkout's conftest.py files are imported by another "
                   "road than the suite's (under append, the editable install's path makes the root "
                   "conftest's module name find acceptance/conftest.py)")
    if getattr(option, "pyargs", False):
        out.append("--pyargs: test modules found by import name on sys.path, not by the checkout's paths")
    if getattr(option, "disable_plugin_autoload", False):
        out.append("--disable-plugin-autoload: pytest loads no entry-point plugin, not the suite's run guard "
                   "(the first of its code to run however pytest is started)")
    return out


def command_line_plugin_problems(option) -> list[str]:
    out = []
    named = [p for p in (getattr(option, "plugins", None) or []) if not p.startswith("no:")]
    if named:
        out.append("-p loads plugins the checkout does not name: " + " ".join(named))
    if os.environ.get("PYTEST_PLUGINS"):
        out.append(f"PYTEST_PLUGINS={os.environ['PYTEST_PLUGINS']!r} loads plugins the checkout "
                   "does not name")
    return out


def start_problems(config: pytest.Config, option, root: Path) -> list[str]:
    """What is refused at start-up (the module docstring), from `option`:
    pytest's first parse (config.known_args_namespace) or its full one."""
    return (interpreter_problems(option) + configuration_problems(config, option, root)
            + start_up_problems(option) + command_line_plugin_problems(option))


def loaded_plugin_problems(config: pytest.Config, root: Path) -> list[str]:
    out = []
    for _, dist in config.pluginmanager.list_plugin_distinfo():
        name = str(getattr(dist, "project_name", None) or dist.metadata["name"])
        if name.lower().replace("_", "-") not in ALLOWED_DISTRIBUTIONS:
            out.append(f"the plugin distribution {name} {dist.version} is loaded (entry point): "
                       f"only {', '.join(sorted(ALLOWED_DISTRIBUTIONS))} may be")
    for name, _ in config.pluginmanager.list_name_plugin():
        if str(name).endswith("conftest.py") and os.path.isabs(str(name)):
            where = Path(name).resolve()
            if root not in where.parents:
                out.append(f"{where} (a conftest.py outside the checkout {root}) is loaded")
    return out


def problems(config: pytest.Config, root: Path) -> list[str]:
    """At the end of the run: every SUITE-3 cause of this module."""
    return start_problems(config, config.option, root) + loaded_plugin_problems(config, root)
