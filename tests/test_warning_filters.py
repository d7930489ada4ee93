"""A warning filter names its category by module name, and pytest imports that
module before any of the suite's code loads (SUITE-3; issue 38, a blind red
team's fourth pass: `-W ignore::tkinter.__main__.X` made pytest import
tkinter's demo, whose Tk window ran the operator's $HOME/.Tk.py inside the
gate and turned a failing run into READY). So `-W`/`--pythonwarnings`, and
`-o` (its filterwarnings), on the command line, in PYTEST_ADDOPTS or in an
`@FILE`, are refused by the early guard before pytest starts: the module is
never imported, the earlier marker is gone, the run says NOT READY. The
module tried here is the standard library's `antigravity`, which runs
$BROWSER when imported (no display needed)."""

from __future__ import annotations

import os

import pytest

from gateproject import PYTEST, earlier_marker, for_separate_processes, said, start, suite_args

FILTER = "ignore::antigravity.X"


@pytest.fixture
def browser(tmp_path):
    """A BROWSER program that leaves a file when it runs: the module was imported."""
    ran = tmp_path / "browser-ran"
    prog = tmp_path / "browser"
    prog.write_text(f"#!/bin/sh\nid -u > {ran}\n")
    prog.chmod(0o755)
    return prog, ran


WAYS = {
    "-W": lambda target, tmp: (suite_args(target, "-W", FILTER), {}),
    "-W clustered": lambda target, tmp: (suite_args(target, f"-qW{FILTER}"), {}),
    "--pythonwarnings=": lambda target, tmp: (suite_args(target, f"--pythonwarnings={FILTER}"), {}),
    "-o filterwarnings": lambda target, tmp: (suite_args(target, "-o", f"filterwarnings={FILTER}"), {}),
    "PYTEST_ADDOPTS": lambda target, tmp: (suite_args(target), {"PYTEST_ADDOPTS": f"-W {FILTER}"}),
    "@FILE": lambda target, tmp: (suite_args(target, f"@{_args_file(tmp)}"), {}),
}


def _args_file(tmp) -> str:
    f = tmp / "args"
    f.write_text(f"-W\n{FILTER}\n")
    return str(f)


@pytest.mark.parametrize("way", sorted(WAYS))
def test_a_warning_filter_is_refused_before_its_module_is_imported(project, target, tmp_path, browser, way):
    for_separate_processes(project)
    prog, ran = browser
    marker = earlier_marker(target.marker)
    args, env = WAYS[way](target, tmp_path)
    done = start(project, [PYTEST, *args], BROWSER=f"{prog} %s", **env)
    assert not ran.exists(), f"the filter's module was imported: BROWSER ran\n{said(done)}"
    assert done.returncode != 0 and not os.path.lexists(marker), said(done)
    assert "NOT READY: SUITE-3:" in done.stderr and "refused before pytest started" in done.stderr, said(done)


def test_the_interpreters_own_warning_option_is_refused(project, target, tmp_path):
    """`python -W` imports its categories before the site module (a documented
    limit, as `python -S` is); what ran cannot be undone, but the run is refused."""
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    python = os.path.join(os.path.dirname(PYTEST), "python")
    done = start(project, [python, "-W", "ignore::DeprecationWarning", "-m", "pytest", *suite_args(target)])
    assert done.returncode != 0 and not os.path.lexists(marker), said(done)
    assert "the interpreter runs with warning options" in done.stderr, said(done)
