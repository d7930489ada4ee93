"""However pytest is started on the suite (issue 38, items 3, 4 and 7;
gate/runguard.py): a marker an earlier READY run wrote is gone after every
run that did not pass (MARK-4), the exit status is non-zero unless READY
(SUITE-3), and a start the suite cannot trust is refused before any test,
any removal of what an earlier run left and any lock at a place an option
chose, each with a NOT READY line that names why.

Every run under test is a separate pytest process started as an operator
starts one (the virtualenv's `pytest` script, whose sys.path holds the
editable install's acceptance/ before the project), on the gate's fixture
project, right after an in-process READY run of that project wrote its
marker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pty_acceptance.host import rundir

from conftest import REPO
from gateproject import (GUARD_HOOK, PYTEST, SEPARATE_DEADLINE_S as DEADLINE_S, earlier_ready, env_without_pytest_vars,
                         last_line, run, said, start, suite_args)

EARLY_EXIT = 4  # gate/early.py: the run stopped before the run guard armed
ENV_COPY = "pty-acceptance-0123abcd-runtime.env"  # what a SIGKILLed run leaves in the run directory


def pytest_process(project, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([PYTEST, "-p", "no:cacheprovider", *args], cwd=cwd or project.path,
                          env=dict(environ, **env), capture_output=True, text=True, timeout=DEADLINE_S,
                          stdin=subprocess.DEVNULL)


def not_ready(done: subprocess.CompletedProcess) -> str:
    """The last NOT READY line the run wrote (stdout or stderr)."""
    lines = [l for l in (done.stdout + "\n" + done.stderr).splitlines() if "NOT READY" in l]
    assert lines, said(done)
    return lines[-1]


def assert_not_ready(done: subprocess.CompletedProcess, marker: Path, *why: str) -> str:
    assert done.returncode != 0, said(done)
    assert not os.path.lexists(marker), f"the earlier run's marker still stands\n{said(done)}"
    line = not_ready(done)
    for w in why:
        assert w in line, f"{w!r} not in {line!r}\n{said(done)}"
    return line


def leftover(safe_dir: Path) -> Path:
    """A runtime environment copy a SIGKILLed run left in the project's run
    directory: a run that starts removes it, a refused one acts on nothing."""
    d = safe_dir / "run"
    d.mkdir(mode=0o700, exist_ok=True)
    p = d / ENV_COPY
    p.write_text("OPENCODE_PASSWORD=x\n")
    return p


# ------------------------------------------------- item 3: no start keeps the marker
def _linked(project, tmp_path) -> Path:
    (tmp_path / "linked").symlink_to(project.path / "acceptance")
    return tmp_path


STARTS = {
    # how pytest was started: (arguments before --inventory, environment, cwd, what NOT READY names)
    "--import-mode=append": (["acceptance/", "--import-mode=append"], {}, None, "--import-mode=append"),
    "--import-mode=append in PYTEST_ADDOPTS": (["acceptance/"], {"PYTEST_ADDOPTS": "--import-mode=append"},
                                               None, "--import-mode=append"),
    "--noconftest": (["acceptance/", "--noconftest"], {}, None, "--noconftest"),
    "--confcutdir acceptance": (["acceptance/", "--confcutdir", "acceptance"], {}, None, "--confcutdir"),
    "--confcutdir acceptance, entry points off": (
        ["acceptance/", "--confcutdir", "acceptance"], {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, None,
        "the environment sets PYTEST_DISABLE_PLUGIN_AUTOLOAD='1'"),  # the early guard's refusal, first
    "--pyargs": (["--pyargs", "acceptance.test_all"], {}, None, "--pyargs"),
    "acceptance/ through a link from outside": (["linked/"], {}, _linked, "not the checkout"),
    "--inventory FILE and no path": ([], {}, None, "`--inventory FILE` with no path to collect"),
    "a mistyped option": (["acceptance/", "--inventroy", "x.yml"], {}, None, "pytest stopped before the run began"),
}


@pytest.mark.parametrize("how", list(STARTS))
def test_no_start_keeps_an_earlier_marker(project, target, tmp_path, how):
    marker = earlier_ready(project, target)
    args, env, cwd, why = STARTS[how]
    done = pytest_process(project, *args, "--inventory", str(target.inventory),
                          cwd=cwd(project, tmp_path) if cwd else None, **env)
    assert_not_ready(done, marker, why)
    assert " passed" not in done.stdout, said(done)  # no test ran


def test_the_default_inventory_names_its_marker_even_when_not_given(project, target):
    """`--inventory` given without its value: pytest stops at a usage error;
    the checkout's default inventory names the marker, which goes."""
    marker = earlier_ready(project, target)
    (project.path / "inventories").mkdir()
    (project.path / "inventories/target.yml").write_text(target.inventory.read_text())
    done = pytest_process(project, "acceptance/", "--inventory")
    assert_not_ready(done, marker, "pytest stopped before the run began")
    assert "--inventory: expected one argument" in done.stderr, said(done)


# ------------------------------------------------- item 4: exit 0 only when READY
@pytest.mark.parametrize("option", [["--fixtures"], ["--fixtures-per-test"], ["--markers"], ["--help"],
                                    ["--version", "--version"], ["--collect-only"], ["--setup-plan"],
                                    ["--setup-only"]], ids=lambda o: o[0])
def test_a_session_that_does_not_judge_is_not_ready(project, target, option):
    marker = earlier_ready(project, target)
    done = pytest_process(project, "acceptance/", "--inventory", str(target.inventory), *option)
    line = assert_not_ready(done, marker)
    assert done.stdout.strip().splitlines()[-1] == line, said(done)  # the last line says it
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, said(done)


# ------------------------------------------------- before the run guard loads: the early guard
# pytest stops before it loads any plugin or conftest.py (its main() answers a
# single -V; PYTEST_ADDOPTS split, its configuration read, its first parse, the
# -p plugins imported, all before the entry points): the early guard
# (gate/early.py, run by the suite's start-up file as the interpreter starts)
# has removed the marker by then, and the run ends NOT READY, exit status 4
@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_a_single_version_flag_on_a_suite_command_line_leaves_no_marker(project, target, flag):
    marker = earlier_ready(project, target)
    done = pytest_process(project, "acceptance/", "--inventory", str(target.inventory), flag)
    assert_not_ready(done, marker, "MARK-4: the run guard never ran")
    assert done.returncode == EARLY_EXIT and done.stdout.splitlines()[-1].startswith("ERROR: NOT READY: "), said(done)


BEFORE_THE_GUARD = {
    # how pytest fails before the run guard's entry point loads: (arguments, environment, what NOT READY names)
    "-p a module that does not exist": (["-p", "no_such_plugin_xyz"], {}, "-p no_such_plugin_xyz"),
    # refused by the early guard (PYTEST_ADDOPTS is refused) before pytest fails to split it
    "PYTEST_ADDOPTS that does not split": ([], {"PYTEST_ADDOPTS": '"'}, "the environment sets PYTEST_ADDOPTS"),
}


@pytest.mark.parametrize("how", list(BEFORE_THE_GUARD))
def test_pytest_failing_before_the_guard_loads_leaves_no_marker(project, target, how):
    marker = earlier_ready(project, target)
    args, env, why = BEFORE_THE_GUARD[how]
    done = pytest_process(project, *args, "acceptance/", "--inventory", str(target.inventory), **env)
    assert_not_ready(done, marker, why)
    assert done.returncode == EARLY_EXIT, said(done)


DISARM = """
import os
os._exit(0)
"""


def test_a_p_plugin_is_refused_before_it_is_imported(project, target):
    """A `-p` plugin importable from the checkout (`python -m pytest` puts
    the working directory on sys.path) that would end the process before
    the run guard loads: refused by the early guard, never imported."""
    marker = earlier_ready(project, target)
    (project.path / "zz_disarm.py").write_text(DISARM)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "acceptance/", "--inventory",
                           str(target.inventory), "-p", "zz_disarm"], cwd=project.path, env=environ,
                          capture_output=True, text=True, timeout=DEADLINE_S, stdin=subprocess.DEVNULL)
    assert_not_ready(done, marker, "SUITE-3", "-p zz_disarm", "refused before pytest started")
    assert done.returncode == EARLY_EXIT, said(done)


EARLY_USAGE_ERRORS = {
    "-c FILE that does not exist": ["-c", "no-such.ini"],
    "--rootdir that does not exist": ["--rootdir", "/nonexistent/dir"],
    "--assert=bogus": ["--assert=bogus"],
    "--import-mode=bogus": ["--import-mode=bogus"],
    "-o without =": ["-o", "junit_family"],
    "-W malformed": ["-W", "ignore::::x"],
    "--confcutdir missing": ["--confcutdir", "/nonexistent/dir"],
    "-p no: only": ["-p", "no:"],
    "--basetemp": ["--basetemp", "/"],
    "-c /dev/null": ["-c", "/dev/null"],
    "--debug": ["--debug=/proc/no/such"],
}


@pytest.mark.parametrize("how", list(EARLY_USAGE_ERRORS))
def test_a_usage_error_of_pytests_first_parse_leaves_no_marker(project, target, how):
    marker = earlier_ready(project, target)
    done = pytest_process(project, "acceptance/", "--inventory", str(target.inventory), *EARLY_USAGE_ERRORS[how])
    assert_not_ready(done, marker)


def test_other_processes_of_the_virtualenv_never_see_the_early_guard(project, target):
    """pip, `python -c`, a pytest run on no checkout: nothing said, nothing
    removed, their exit status their own."""
    marker = earlier_ready(project, target)
    python = str(Path(sys.executable).parent / "python")
    for argv, cwd in (([python, "-c", "print('x')"], project.path), ([python, "-m", "pip", "--version"], project.path),
                      ([PYTEST, "--version"], project.path.parent)):
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=DEADLINE_S,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0 and "NOT READY" not in done.stdout + done.stderr, said(done)
        assert marker.exists(), f"{argv} removed the marker"


# ------------------------------------------------- item 7: refused first, acting on nothing
REFUSED = {
    "-o pty_acceptance_run_dir": (["-o", "pty_acceptance_run_dir=@ELSEWHERE"], {}, "-o/--override-ini"),
    "-o pty_acceptance_run_dir in PYTEST_ADDOPTS": ([], {"PYTEST_ADDOPTS": "-o pty_acceptance_run_dir=@ELSEWHERE"},
                                                    "the environment sets PYTEST_ADDOPTS"),  # the early guard
    "-c": (["-c", "other.ini"], {}, "-c other.ini"),
    "--rootdir": (["--rootdir", "@ROOT_PARENT"], {}, "--rootdir"),
    "-p": (["-p", "quietp"], {"PYTHONPATH": "@PLUGINS"}, "-p quietp: loads plugins by name"),
    "PYTEST_PLUGINS": ([], {"PYTEST_PLUGINS": "quietp", "PYTHONPATH": "@PLUGINS"}, "PYTEST_PLUGINS="),
    "--disable-plugin-autoload": (["--disable-plugin-autoload"], {}, "--disable-plugin-autoload"),
}


def _filled(project, safe_dir: Path, text: str) -> str:
    return (text.replace("@ELSEWHERE", str(safe_dir / "elsewhere")).replace("@ROOT_PARENT", str(project.path.parent))
            .replace("@PLUGINS", str(safe_dir / "plugins")))


@pytest.mark.parametrize("how", list(REFUSED))
def test_options_that_escape_the_lock_or_the_checkout_are_refused_first(project, target, safe_dir, how):
    """Refused before any test runs and before what an earlier run left is
    removed, after the lock was taken at the checkout's place and the marker
    removed; the place an option named is never made."""
    marker = earlier_ready(project, target)
    (project.path / "other.ini").write_text(f"[pytest]\npty_acceptance_run_dir = {safe_dir}/run\n")
    (safe_dir / "plugins").mkdir()
    (safe_dir / "plugins/quietp.py").write_text("")
    left = leftover(safe_dir)
    reports = sorted((project.path / "reports").iterdir())  # the READY run's
    args, env, why = REFUSED[how]
    done = pytest_process(project, "acceptance/", "--inventory", str(target.inventory),
                          *[_filled(project, safe_dir, a) for a in args],
                          **{k: _filled(project, safe_dir, v) for k, v in env.items()})
    line = assert_not_ready(done, marker, "SUITE-3", why)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR and line.startswith("ERROR: NOT READY: "), said(done)
    assert left.exists(), f"a refused run removed what an earlier run left\n{said(done)}"
    assert not (safe_dir / "elsewhere").exists(), "the run made the directory an option named"
    assert sorted((project.path / "reports").iterdir()) == reports, "a refused run wrote a report"
    assert " passed" not in done.stdout and "collected" not in done.stdout, said(done)


def test_the_lock_stays_at_the_checkouts_place_whatever_o_says(project, target, safe_dir):
    """-o pty_acceptance_run_dir=DIR beside a run holding the checkout's lock:
    it fails at once naming that run, touches nothing (SUITE-5)."""
    marker = earlier_ready(project, target)
    first = rundir.acquire(f"{safe_dir}/run")  # this process stands for a run in progress
    try:
        done = pytest_process(project, "acceptance/", "--inventory", str(target.inventory),
                              "-o", f"pty_acceptance_run_dir={safe_dir}/elsewhere")
    finally:
        first.release()
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, said(done)
    # the early guard refuses -o before pytest starts (it can name filterwarnings), and
    # says the lock is held; without the early guard the run guard names the holder
    assert (f"SUITE-5: another acceptance run holds {safe_dir}/run/lock: pid {os.getpid()}" in done.stderr
            or f"SUITE-5: another acceptance run holds {safe_dir}/run/lock: nothing touched" in done.stderr), \
        said(done)
    assert marker.exists(), "the second run touched the first run's marker"
    assert not (safe_dir / "elsewhere").exists()


def test_a_run_that_is_not_refused_removes_what_an_earlier_run_left(project, target, safe_dir):
    """The other side of the order: the same leftover goes once the run starts."""
    left = leftover(safe_dir)
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-20:])
    assert not left.exists()
    assert any(f"runtime environment copy {ENV_COPY}: removed" in l for l in res.outlines), res.outlines[-20:]


# ------------------------------------------------- the guard's own pieces
def test_the_checkouts_acceptance_conftest_arms_the_guard_as_the_projects_does():
    """The fixture project's acceptance/conftest.py carries the real one's hook
    (GUARD_HOOK): the runs above prove the real hook."""
    text = (REPO / "acceptance/conftest.py").read_text()
    for line in GUARD_HOOK.splitlines():
        assert line in text.splitlines(), line


def test_the_options_read_before_pytest_parses_them_are_the_suites():
    """checkout.VALUE_OPTIONS: every option of the suite's that takes a value
    (their values are not paths to collect, and name markers and inventories)."""
    from pty_acceptance.gate import checkout, startup

    parser = pytest.Parser(_ispytest=True)
    startup.pytest_addoption(parser, pluginmanager=_NoConfig())
    valued = [o.names()[0] for o in parser.getgroup("pty-acceptance").options if o.attrs()["nargs"] != 0]
    assert sorted(valued) == sorted(checkout.VALUE_OPTIONS)


class _NoConfig:
    def get_plugin(self, name):
        return None


# ------------------------------------- a blind red team's second pass (session 32)
# starts the early guard read wrongly: arguments in a file (`pytest @FILE`), a
# working directory that is gone, an environment the run guard would refuse
def assert_marker_gone_and_failed(done: subprocess.CompletedProcess, marker: Path) -> None:
    assert not os.path.lexists(marker), f"the earlier READY run's marker still stands\n{said(done)}"
    assert done.returncode != 0, f"exit 0 for a run that judged nothing\n{said(done)}"


def test_inventory_in_an_args_file_and_a_usage_error(project, target):
    """`pytest @args` (pytest >= 8.2 reads arguments from a file): the raw
    arguments the marker paths are read from never show `--inventory FILE`;
    a usage error of the full parse ends the run before startup removes the
    parsed inventory's marker."""
    marker = earlier_ready(project, target)
    (project.path / "args.txt").write_text(f"acceptance/\n--inventory\n{target.inventory}\n--inventroy\nx.yml\n")
    done = start(project, [PYTEST, "-p", "no:cacheprovider", "@args.txt"])
    assert_marker_gone_and_failed(done, marker)


def test_inventory_and_version_in_an_args_file(project, target):
    marker = earlier_ready(project, target)
    (project.path / "args.txt").write_text(f"acceptance/\n--inventory\n{target.inventory}\n-V\n")
    done = start(project, [PYTEST, "-p", "no:cacheprovider", "@args.txt"])
    assert_marker_gone_and_failed(done, marker)


@pytest.mark.parametrize("opt", ["--collect-only", "--fixtures", "--help"])
def test_a_showing_option_in_an_args_file(project, target, opt):
    marker = earlier_ready(project, target)
    (project.path / "args.txt").write_text(f"acceptance/\n--inventory\n{target.inventory}\n{opt}\n")
    done = start(project, [PYTEST, "-p", "no:cacheprovider", "@args.txt"])
    assert_marker_gone_and_failed(done, marker)


def test_a_refused_start_with_inventory_in_an_args_file(project, target, safe_dir):
    """`-p quietp` inside @args: pytest's preparse never sees it (it reads the
    unexpanded arguments); the full parse imports it."""
    marker = earlier_ready(project, target)
    (safe_dir / "plugins").mkdir()
    (safe_dir / "plugins/quietp.py").write_text("import os\nos._exit(0)\n")
    (project.path / "args.txt").write_text(f"acceptance/\n--inventory\n{target.inventory}\n-p\nquietp\n")
    done = start(project, [PYTEST, "-p", "no:cacheprovider", "@args.txt"], PYTHONPATH=str(safe_dir / "plugins"))
    assert_marker_gone_and_failed(done, marker)


def test_started_in_a_removed_directory_version(project, target, tmp_path):
    """os.getcwd() raises in the early guard (the directory the run starts
    in was removed): which checkout cannot be told, so the run is refused,
    the markers its absolute arguments name removed."""
    marker = earlier_ready(project, target)
    gone = tmp_path / "gone"
    gone.mkdir()
    argv = [PYTEST, "-p", "no:cacheprovider", str(project.path / "acceptance"), "--inventory",
            str(target.inventory), "-V"]
    done = subprocess.run(["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "$@"', "sh", *argv],
                          env=env_without_pytest_vars(), capture_output=True, text=True, timeout=DEADLINE_S,
                          stdin=subprocess.DEVNULL)
    assert_marker_gone_and_failed(done, marker)


def test_pythonpath_sitecustomize_ending_the_process_exits_0(project, target, tmp_path):
    """PYTHONPATH is refused by the run guard, which never arms: a
    sitecustomize.py on it (site runs it after the .pth files) ends the
    process with status 0 before pytest starts: the early guard refuses the
    environment first (it runs before site's sitecustomize)."""
    earlier_ready(project, target)
    (tmp_path / "sitecustomize.py").write_text("import os\nos._exit(0)\n")
    done = start(project, [PYTEST, *suite_args(target)], PYTHONPATH=str(tmp_path))
    assert done.returncode != 0, f"exit 0 without READY\n{said(done)}"


# ------------------------------------------------- pytest started other ways (a red team's second pass)
def _started_otherwise(tmp_path: Path) -> dict[str, list[str]]:
    python = str(Path(sys.executable).parent / "python")
    (tmp_path / "t").symlink_to(PYTEST)
    (tmp_path / "run_it.py").write_text("import sys\nimport pytest\nsys.exit(pytest.main(sys.argv[1:]))\n")
    return {
        "python -m pytest.__main__": [python, "-m", "pytest.__main__"],
        "python -- the console script": [python, "--", PYTEST],
        "a link to the console script named otherwise": [str(tmp_path / "t")],
        "python -c pytest.main()": [python, "-c", "import sys, pytest; sys.exit(pytest.main())"],
        "python -m runpy pytest": [python, "-m", "runpy", "pytest"],
        "a script calling pytest.main": [python, str(tmp_path / "run_it.py")],
    }


@pytest.mark.parametrize("how", ["python -m pytest.__main__", "python -- the console script",
                                 "a link to the console script named otherwise", "python -c pytest.main()",
                                 "python -m runpy pytest", "a script calling pytest.main"])
def test_pytest_started_any_other_way_with_version_leaves_no_marker(project, target, tmp_path, how):
    """However pytest is started on the suite (MARK-4): where sys.orig_argv does
    not show the console script or `-m pytest`, the early guard judges the
    first Config the process makes, before pytest parses its arguments."""
    marker = earlier_ready(project, target)
    done = start(project, [*_started_otherwise(tmp_path)[how], *suite_args(target, "-V")])
    assert_not_ready(done, marker, "MARK-4: the run guard never ran")
    assert done.returncode == EARLY_EXIT, said(done)


def test_an_inventory_given_through_a_linked_directory_leaves_no_marker(project, target, tmp_path):
    """The run refuses an inventory whose path holds a link; the marker that
    inventory names is one the run could name, and goes (MARK-4)."""
    marker = earlier_ready(project, target)
    (tmp_path / "inv").symlink_to(Path(target.inventory).parent)
    linked = tmp_path / "inv" / Path(target.inventory).name
    done = start(project, [PYTEST, "-p", "no:cacheprovider", "acceptance/", "--inventory", str(linked)])
    assert_marker_gone_and_failed(done, marker)


@pytest.mark.parametrize("first", ["pytest.main(['--version'])", "_pytest.config.get_config()"])
def test_every_pytest_run_of_a_process_is_judged_not_only_the_first(project, target, tmp_path, first):
    """A blind red team's third pass: a program that runs pytest (or makes a
    Config) once elsewhere, then runs it on the suite with -V, left an earlier
    marker standing."""
    marker = earlier_ready(project, target)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "twice.py"
    script.write_text("import os, sys\nimport pytest, _pytest.config\n"
                      f"here = os.getcwd()\nos.chdir({str(elsewhere)!r})\n{first}\nos.chdir(here)\n"
                      "sys.exit(pytest.main(sys.argv[1:]))\n")
    python = str(Path(sys.executable).parent / "python")
    done = start(project, [python, str(script), *suite_args(target, "-V")])
    assert_not_ready(done, marker, "MARK-4: the run guard never ran")


@pytest.mark.parametrize("line", ["zz: 1" + "0" * 5000, "zz: " + "[" * 3000])
def test_an_inventory_yaml_cannot_build_still_names_its_marker(project, target, line):
    """A blind red team's third pass: an inventory line YAML reads but cannot
    build (ValueError, RecursionError) stopped the removal of its marker."""
    marker = earlier_ready(project, target)
    with open(target.inventory, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    done = start(project, [PYTEST, *suite_args(target)])
    assert_marker_gone_and_failed(done, marker)
