"""What the interpreter and pytest's command line may not change in a run that
earns the marker (SUITE-3).

`-k`, `-m`, `--deselect` and the other selecting options are rules.py's
NARROWING_OPTIONS; the checked-in node-id list (nodeids.py) catches any
narrowing that reaches collection by another road. This module names the
causes that do not show as a missing test, or that it is clearer to name
directly:

- checks compiled away: `python -O`/`-OO`/PYTHONOPTIMIZE strips every
  `assert` that pytest did not rewrite, and `--assert=plain` stops the
  rewriting of the test modules' own asserts;
- another configuration: `-o/--override-ini` (python_files,
  python_functions, junit_logging, ...), `-c FILE`, `--rootdir`,
  `--confcutdir`, or a pytest rootpath that is not the checkout whose root
  conftest carries the start-up hooks;
- code the checkout does not hold: a plugin named with `-p` or
  PYTEST_PLUGINS, a plugin of another distribution than pytest's own and
  Testinfra loaded through an entry point, a conftest.py outside the checkout.

Each problem is one sentence that names the cause; the gate turns each into a
SUITE-3 blocker.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pty_acceptance.gate import startup

# Distributions whose pytest11 entry-point plugins a run may load: the suite's
# declared dependencies (pyproject.toml). Anything else changes how tests run.
ALLOWED_DISTRIBUTIONS = {"pytest-testinfra"}


def interpreter_problems(config: pytest.Config) -> list[str]:
    out = []
    if sys.flags.optimize:
        out.append(f"python runs with optimisation level {sys.flags.optimize} (-O, -OO or "
                   "PYTHONOPTIMIZE): assert statements outside pytest's rewriting are compiled away")
    mode = getattr(config.option, "assertmode", "rewrite")
    if mode != "rewrite":
        out.append(f"--assert={mode}: pytest's assertion rewriting is off, the test modules' own "
                   "checks are plain asserts")
    return out


def configuration_problems(config: pytest.Config) -> list[str]:
    out = []
    root = startup.project_root(config)
    overrides = list(getattr(config.option, "override_ini", None) or [])
    if overrides:
        out.append("-o/--override-ini changes the project's configuration: " + " ".join(overrides))
    if getattr(config.option, "inifilename", None):
        out.append(f"-c {config.option.inifilename}: another configuration file than the checkout's")
    if getattr(config.option, "rootdir", None):
        out.append(f"--rootdir {config.option.rootdir} given")
    if Path(config.rootpath).resolve() != root:
        out.append(f"pytest's rootdir is {config.rootpath}, not the checkout {root}")
    inipath = config.inipath
    if inipath is None or Path(inipath).resolve().parent != root:
        out.append(f"the configuration file is {inipath}, not one of the checkout {root}")
    confcutdir = config.known_args_namespace.confcutdir
    default = str(Path(inipath).parent) if inipath else str(config.rootpath)
    if confcutdir is not None and os.path.abspath(confcutdir) != os.path.abspath(default):
        out.append(f"--confcutdir {confcutdir} given (the checkout's default is {default})")
    return out


def plugin_problems(config: pytest.Config) -> list[str]:
    out = []
    named = [p for p in (getattr(config.option, "plugins", None) or []) if not p.startswith("no:")]
    if named:
        out.append("-p loads plugins the checkout does not name: " + " ".join(named))
    if os.environ.get("PYTEST_PLUGINS"):
        out.append(f"PYTEST_PLUGINS={os.environ['PYTEST_PLUGINS']!r} loads plugins the checkout "
                   "does not name")
    for _, dist in config.pluginmanager.list_plugin_distinfo():
        name = str(getattr(dist, "project_name", None) or dist.metadata["name"])
        if name.lower().replace("_", "-") not in ALLOWED_DISTRIBUTIONS:
            out.append(f"the plugin distribution {name} {dist.version} is loaded (entry point): "
                       f"only {', '.join(sorted(ALLOWED_DISTRIBUTIONS))} may be")
    root = startup.project_root(config)
    for name, _ in config.pluginmanager.list_name_plugin():
        if str(name).endswith("conftest.py") and os.path.isabs(str(name)):
            where = Path(name).resolve()
            if root not in where.parents:
                out.append(f"{where} (a conftest.py outside the checkout {root}) is loaded")
    return out


def problems(config: pytest.Config) -> list[str]:
    return interpreter_problems(config) + configuration_problems(config) + plugin_problems(config)
