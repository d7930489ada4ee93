"""The early guard (MARK-4, SUITE-3): what runs of the suite before pytest
does, in a pytest process started on a checkout of the suite.

The suite's distribution installs a start-up file, `pty_acceptance_early.pth`
(setup.py; listed and hashed in its RECORD like every file of it, so
decision/loaded_code.py accepts it), whose one import line imports this
module as Python's site module starts, before the main program runs: before
pytest splits PYTEST_ADDOPTS, reads its configuration, parses its options,
answers `--version`, imports a `-p` plugin or loads the run guard's entry
point. Everything pytest can stop at before the run guard arms (a usage
error of its first parse, `-c`/`--rootdir`/`--confcutdir` that name nothing,
`-V` alone, a `-p` plugin that cannot be imported or that ends the process)
comes after this.

Every other Python process of the virtualenv (pip, `python -c`,
`pty-acceptance`) reads sys.orig_argv here and puts a finder in front of
sys.meta_path that finds nothing until `_pytest.config` is imported; then it
puts the same guard in front of pytest's entry and `Config.__init__`, so that pytest
started any other way (`python -m pytest.__main__`, `-m runpy pytest`, a
renamed link to the console script, a program calling pytest.main) is judged
when it enters pytest or makes a Config, from its arguments and directory,
before pytest parses them; every run of such a process is judged as it
starts. A pytest run that is not on the suite (`pytest tests/`) is left
alone. No import beyond `sys` until then, no output. A pytest run is the virtualenv's console
script (`pytest`, `py.test`) or `python -m pytest`/`-m py.test`, interpreter
options allowed before it. It is on the suite when what it collects reaches
a checkout (gate/checkout.py, as the run guard decides it: the paths of
pytest's own first parse of the command line and PYTEST_ADDOPTS, the suite's
option values left out, else the directory it starts in). Then, before
pytest starts:

1. unless another run holds the checkout's run lock (host/rundir.py, read in
   the kernel's lock table, never taken: the run guard takes it), every
   marker the run could name is removed (decision/marker_paths.py, as the run
   guard removes them: only a root-owned file that parses as a marker);
2. a `-p NAME` on the command line or in PYTEST_ADDOPTS (code pytest would
   import before the run guard loads) refuses the run at once: `ERROR: NOT
   READY: SUITE-3: ...`, exit status 4, the plugin never imported;
3. an exit handler is registered (first, so it runs last) that, when the run
   guard never armed in this process (runguard.arm tells this module),
   says `ERROR: NOT READY: MARK-4: the run guard never ran ...` as the last
   line and ends the process with exit status 4, whatever pytest returned;
4. a run started from the command line (`pytest`, `python -m pytest`) that
   is not in the clean start (decision/launch.py: `python -I -u -m pytest` with
   the suite's environment) starts again in it: the process is replaced
   (execve), its arguments, working directory and descriptors kept, what
   step 1 said carried in the environment for the report
   (marker_paths.Removal.carried); a clean start that is still not clean is
   refused. Every other way to pytest is refused by the run guard
   (launch.refused).

The run guard takes over what was removed (`taken_over`): it does not look at
those paths again, and its report says what happened at each. Nothing here
raises: a failure of this module leaves the process as it would be without
it (the run guard still arms where it loads)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported only in a pytest run on the suite (_start)
    from pathlib import Path

    from pty_acceptance.decision.marker_paths import Removal

PTH = "pty_acceptance_early.pth"  # the start-up file (setup.py installs it)
REFUSED_EXIT = 4  # pytest's usage error: the run stopped before the gate could register
PYTHON_VALUE_OPTIONS = "cmWX"  # the interpreter's short options that take a value
PYTEST_SCRIPTS = ("pytest", "py.test")


class _Run:
    """This process's run on the suite, as the early guard saw it."""

    def __init__(self, root: Path, removal: Removal) -> None:
        self.root = root
        self.removal = removal
        self.armed = False  # the run guard armed in this process (runguard.arm)


_run: _Run | None = None


def pytest_args(argv: list[str]) -> list[str] | None:
    """pytest's command-line arguments when `argv` (sys.orig_argv: the
    interpreter's own, as started) runs pytest; None for any other program."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--check-hash-based-pycs":
            i += 2
            continue
        if arg == "--":  # the end of the interpreter's options: the script follows
            name = argv[i + 1].rsplit("/", 1)[-1] if i + 1 < len(argv) else ""
            return list(argv[i + 2:]) if name in PYTEST_SCRIPTS else None
        if arg.startswith("--"):
            return None  # --help, --version: the interpreter's own
        if arg.startswith("-") and arg != "-":
            for j in range(1, len(arg)):
                if arg[j] not in PYTHON_VALUE_OPTIONS:
                    continue
                value = arg[j + 1:]
                if not value:
                    i += 1
                    value = argv[i] if i < len(argv) else ""
                if arg[j] == "c":
                    return None
                if arg[j] == "m":
                    return list(argv[i + 1:]) if value in PYTEST_SCRIPTS else None
                break
            i += 1
            continue
        name = arg.rsplit("/", 1)[-1]
        return list(argv[i + 1:]) if name in PYTEST_SCRIPTS else None
    return None


ARGS_DEPTH = 64  # @FILE within @FILE: argparse has no bound but Python's recursion
ARGS_FILE_LIMIT = 64 << 20  # bytes of one @FILE read (argparse reads it whole)


def expanded(args: list[str], here: str, depth: int = 0) -> list[str]:
    """`args` with each `@FILE` replaced by FILE's lines, one argument each
    (pytest's parser reads them so: argparse's fromfile_prefix_chars, nested
    and whole), FILE relative to `here`; a file that cannot be read stays as it
    is (pytest stops at it). Red teams' second and fourth passes: an
    --inventory inside such a file, nested nine deep or past its first MiB,
    named a marker the early guard did not see. Past ARGS_DEPTH or
    ARGS_FILE_LIMIT, RecursionError naming it (argparse's own end): the run is
    refused."""
    import os

    out: list[str] = []
    for a in args:
        if a.startswith("@"):
            if depth >= ARGS_DEPTH:
                raise RecursionError(f"{a}: @FILE arguments nested over {ARGS_DEPTH} deep")
            try:
                with open(os.path.join(here, a[1:]), encoding="utf-8", errors="surrogateescape") as f:
                    text = f.read(ARGS_FILE_LIMIT + 1)
            except OSError:
                out.append(a)
                continue
            if len(text) > ARGS_FILE_LIMIT:
                raise RecursionError(f"{a}: an @FILE over {ARGS_FILE_LIMIT} bytes")
            out += expanded(text.splitlines(), here, depth + 1)
        else:
            out.append(a)
    return out


def _start() -> None:
    args = pytest_args(list(getattr(sys, "orig_argv", [])))
    if args is None:  # not started as pytest: it may yet run pytest in the process
        sys.meta_path.insert(0, _PytestConfigFinder)
        return
    _begin(args, None, command_line=True)


class _PytestConfigFinder:
    """A finder that finds nothing itself (a red team's second pass: pytest
    started as `python -m pytest.__main__`, `python -m runpy pytest`, a link to
    the console script under another name, `python -c "import pytest;
    pytest.main()"`, any program calling pytest.main, left an earlier marker
    behind on `-V`). When `_pytest.config` is first imported, it leaves
    sys.meta_path and has the module's own loader run it, then puts the
    early guard in front of pytest's entry and of `Config.__init__`: every
    pytest run passes one of them before it parses its options, reads its
    configuration, answers `--version` or imports a `-p` plugin, and each run
    of the process is judged as a command line would be (its arguments, its
    directory)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "_pytest.config":
            return None
        try:
            sys.meta_path.remove(cls)
        except ValueError:
            pass
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        loader = spec and spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            _guard_config(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_listing = False  # this process's pytest runs are listing collections (node_listing.py)
_judging = False  # a run is being judged now (early_run makes a Config of its own)
_in_run = 0  # depth of pytest's entry: a Config made inside belongs to the run judged there


def _judge(args, here: str | None) -> None:
    """Every pytest run of the process is judged as it starts (a blind red team's
    third pass: a first run elsewhere, or a Config made first, left the second
    unjudged), except what is made while one is judged."""
    global _judging
    if _judging or _listing:
        return
    import os

    if args is None:
        args = sys.argv[1:]
    elif isinstance(args, (str, os.PathLike)):
        args = [args]
    try:
        argv = [os.fspath(a) for a in args]
    except TypeError:
        argv = []
    _judging = True
    try:
        _begin(argv, here)
    finally:
        _judging = False


def listing() -> None:
    """This process's pytest run is a listing collection (node_listing.py: its
    start-up hooks inert, no marker read or removed): not judged here."""
    global _listing
    _listing = True


def _guard_config(module) -> None:
    """pytest's own entry (`_main`, which pytest.main, the console script and
    `-m pytest` all go through, and which answers a single `-V` before any
    Config exists; `main` where there is no `_main`) and `Config.__init__`
    (every other way to a run, when made outside that entry) judge each run
    before pytest starts it."""
    entry = "_main" if callable(getattr(module, "_main", None)) else "main"
    run_main = getattr(module, entry, None)
    config = getattr(module, "Config", None)
    original = getattr(config, "__init__", None)
    if run_main is None or config is None or original is None:
        return

    def guarded_main(*args, **kwargs):
        global _in_run
        _judge(kwargs.get("args", args[0] if args else None), None)
        _in_run += 1
        try:
            return run_main(*args, **kwargs)
        finally:
            _in_run -= 1

    def __init__(self, *args, **kwargs):
        if not _in_run:  # a Config made outside pytest's entry is a run of its own
            params = kwargs.get("invocation_params")
            if params is None:
                _judge([], None)
            else:
                _judge(getattr(params, "args", []), str(getattr(params, "dir", "")) or None)
        original(self, *args, **kwargs)

    setattr(module, entry, guarded_main)
    config.__init__ = __init__


def _begin(args: list[str], here: str | None, command_line: bool = False) -> None:
    """A pytest run with arguments `args`, started in `here` (None: the working
    directory): when it is on the suite, its markers go and its options are
    judged before pytest reads anything (_judged). Whatever that raises
    refuses the run, the default marker removed first (a blind red team's
    fifth pass: a NUL byte in an @FILE's argument silenced this guard)."""
    import os

    try:
        _judged(args, here, command_line)
    except Exception as e:  # noqa: BLE001  # what cannot be judged is refused
        said = "the default marker could not be looked at"
        try:
            from pty_acceptance.decision import marker_paths, readiness_marker

            removal = marker_paths.Removal()
            try:  # what the arguments name, as far as they can be read; the default marker always
                removal.add(marker_paths.named(args, here or f"/proc/{os.getpid()}/cwd",
                                               readiness_marker.DEFAULT_PATH))
            except Exception:  # noqa: BLE001
                pass
            removal.add([readiness_marker.DEFAULT_PATH])
            said = removal.text()
        except Exception:  # noqa: BLE001
            pass
        line = (f"ERROR: NOT READY: SUITE-3: the early guard could not judge this pytest run "
                f"({type(e).__name__}: {str(e)[:300]}); refused before pytest started (MARK-4: {said})")
        try:
            from pty_acceptance.host import terminal

            line = terminal.escape(line)
        except Exception:  # noqa: BLE001
            line = line.encode("ascii", "backslashreplace").decode("ascii")
        _say(line, sys.stderr)
        os._exit(REFUSED_EXIT)


def _judged(args: list[str], here: str | None, command_line: bool = False) -> None:
    """_begin's work: whatever it raises refuses the run. A run on the suite
    started from the command line (`pytest`, `python -m pytest`) that is
    not in the clean start (decision/launch.py) starts again in it, its
    refusals found nothing first: the process is replaced (execve), nothing
    of it carries over but its arguments, its working directory, its
    descriptors and the environment's names launch.KEPT."""
    global _run
    import atexit
    import os

    from pty_acceptance.decision import launch, marker_paths, readiness_marker
    from pty_acceptance.gate import checkout
    from pty_acceptance.host import rundir, terminal

    try:
        here = os.getcwd() if here is None else here
    except OSError as e:  # which checkout cannot be told: the default marker goes, and the run with it
        removal = marker_paths.Removal()
        # relative names are still opened from the directory it is in (a blind red team's eleventh
        # pass: a lazily unmounted working directory, `--inventory inv.yml` read from there)
        removal.add(marker_paths.named(args, f"/proc/{os.getpid()}/cwd", readiness_marker.DEFAULT_PATH))
        _say(terminal.escape(f"ERROR: NOT READY: SUITE-3: the working directory cannot be read ({e.strerror}): "
                             f"which checkout this pytest runs cannot be told; refused before pytest started "
                             f"(MARK-4: {removal.text()})"), sys.stderr)
        os._exit(REFUSED_EXIT)
    given = list(args)
    args = expanded(args, here)  # past its bounds it raises: _begin refuses the run
    found = checkout.early_run(args, here)
    if found is None:
        return
    root, raw = found
    started_with = launch.exec_environment() if command_line else {}  # read once: judged twice below
    restarted = started_with.get(launch.RESTARTED)
    removal = marker_paths.Removal.after(restarted)
    busy = rundir.held_by_another(checkout.run_dir_of(root))
    if not busy:
        removal.add(marker_paths.named(raw, here, str(root / "inventories" / "target.yml")))
    if _run is None:
        atexit.register(_at_exit)  # once: it judges the process's last run on the suite
    _run = _Run(root, removal)
    said = f" (MARK-4: {removal.text()})" if not busy else \
        f" (SUITE-5: another acceptance run holds {checkout.run_dir_of(root)}/{rundir.LOCK_NAME}: nothing touched)"
    # what the run guard would refuse of the options and the environment, refused before
    # anything of pytest's or the environment's runs (a sitecustomize on PYTHONPATH runs
    # after this start-up file, and could end the process before the run guard loads)
    refused = (launch.process_problems() + launch.option_problems(raw, None)
               + launch.environment_problems(launch.environments())
               + launch.interpreter_problems() + launch.first_path_problems() + launch.preload_problems())
    ini, _, _ = checkout.discovered(raw, here)  # as the run guard judges it: a file of the checkout's own
    if ini is not None and os.path.realpath(ini.parent) != os.path.realpath(root):  # none: the run guard says
        refused.append(f"pytest would take {ini} for its configuration, not one of the checkout {root}: its "
                       "addopts (-p plugins) would apply before any of the suite's code")
    far = checkout.outside(raw, here, root)
    if far:
        refused.append(f"{'; '.join(far[:8])}: paths outside the checkout {root} that pytest is given (an "
                       "option's value given apart from it, `--inventory FILE`, is one to pytest's first parse) "
                       "have it load a conftest.py or a configuration file there before any of the suite's code; "
                       "give a value as --inventory=FILE, or keep it in a directory root's alone")
    unclean = launch.clean_form_problems(env=started_with) if command_line and not refused else []
    if unclean and restarted is not None:  # started again once, and still not clean
        refused.append(f"{'; '.join(unclean)}: started again in the clean start, it is still not in it")
    if refused:
        _say(terminal.escape(f"ERROR: NOT READY: SUITE-3: {'; '.join(refused)}; refused before pytest "
                             f"started{said}"), sys.stderr)
        os._exit(REFUSED_EXIT)
    if unclean:
        argv, env = launch.clean_start(given, removal.carried())
        _uncaptured()
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(argv[0], argv, env)  # an OSError: _begin refuses the run


def _uncaptured() -> None:
    """pytest's capture of descriptors 0, 1 and 2 stopped, what it held written
    out: where the suite is not installed in the virtualenv (the reference
    host's pinned one), this module is imported late, by the run guard while
    pytest loads the conftests, with its capture already started; the clean
    start must get the descriptors the run was given, not pytest's temporary
    files (the reference host's first run after the clean start printed
    nothing at all)."""
    capture = sys.modules.get("_pytest.capture")
    if capture is None:
        return
    import gc

    for obj in gc.get_objects():
        if isinstance(obj, capture.CaptureManager):
            obj.stop_global_capturing()


def _say(line: str, stream) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        print(line, file=stream, flush=True)
    except (OSError, ValueError):
        pass


def _at_exit() -> None:
    run = _run
    if run is None or run.armed:
        return
    import os

    from pty_acceptance.host import terminal

    _say(terminal.escape("ERROR: NOT READY: MARK-4: the run guard never ran: pytest ended before it loaded "
                         "any of the suite's code (a usage error of its first parse, --version, a plugin "
                         f"that stopped it); nothing was judged (MARK-4: {run.removal.text()})"), sys.stdout)
    os._exit(REFUSED_EXIT)


def taken_over(root: Path) -> Removal | None:
    """The run guard armed in this process (runguard.arm): the
    marker_paths.Removal the early guard made at `root` (None: it made
    none there), which the run guard carries on."""
    run = _run
    if run is None:
        return None
    run.armed = True
    return run.removal if run.root == root else None


try:
    _start()
except Exception:  # never in the way of a process this guard is not for (the module docstring)
    pass
