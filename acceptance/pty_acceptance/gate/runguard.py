"""The run guard (MARK-4, SUITE-3, SUITE-5): whatever of the suite's code
runs first in a pytest session started on the suite takes the run lock,
removes every marker the run could name, refuses a start it cannot trust,
and arms the end that keeps a run that did not pass from looking like one.

However pytest was started on the suite, some of the suite's code runs before
anything else of the run, and each of these arms the guard (the first does
the work, the later ones find it armed):

- this module, a `pytest11` entry point of the checkout installed in its
  virtualenv (`pip install -e .`: tools/setup.sh, tools/setup-target.sh).
  pytest loads it before any conftest.py and before it has parsed the suite's
  options, so it arms even when no conftest of the checkout loads
  (`--noconftest`; `--inventory FILE` and no path, where pytest's first
  parse takes FILE for the path to collect and starts from FILE's
  directory) or the root conftest.py cannot be imported
  (`--import-mode=append`, where the editable install's path finds
  acceptance/conftest.py under the root's module name);
- the root conftest.py (startup.pytest_addoption), where the entry point is
  not loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD, a virtualenv without the
  checkout installed, such as the reference host's);
- acceptance/conftest.py's pytest_addoption, where the root conftest.py is
  not loaded (`--confcutdir acceptance`, acceptance/ reached through a link
  from outside the checkout);
- startup.pytest_cmdline_main, once pytest has parsed every option.

Before all of them, where the checkout is installed in the virtualenv, the
early guard (gate/early.py, run by the suite's start-up file as the
interpreter starts) has removed the markers and refused a `-p` plugin before
pytest started; arming takes over what it removed (early.taken_over: those
paths are not looked at again, the report says what happened at each) and
tells it the run guard ran.

Arming does, in this order:

1. takes the run lock (host/rundir.py) at the checkout's own place: the
   `pty_acceptance_run_dir` of the checkout's own configuration file, read
   from the checkout (no `-o`, `-c` or `--rootdir` moves it), else
   /run/pty-acceptance. Another run holding it ends this one at once,
   before it touches anything (SUITE-5);
2. removes every marker the run could name (decision/marker_paths.py):
   only a root-owned file that parses as a marker is deleted, anything else
   at a marker path is named (readiness_marker.remove);
3. refuses, NOT READY, exit 4, what makes the start untrustworthy
   (invocation.start_problems: `-c`, `--rootdir`, `-o`, `-p`,
   `PYTEST_PLUGINS`, `--confcutdir`, `--noconftest`, `--import-mode`,
   `--pyargs`, a rootdir or configuration file that is not the checkout's)
   and what stands at a marker path (2).

The lock first, so that a second run never touches what the first is
writing; the markers second, so that even a refused run leaves none behind;
the refusal third, before anything else acts on the host: startup.py then
removes what an earlier run left (its units, its scratch area), judges the
reporting options, and the plugin loads the inventory.

Armed, the guard ends the run: its wrapper of pytest_cmdline_main makes the
exit status non-zero unless the gate said READY, and says NOT READY with the
reason where the gate said nothing (`--fixtures`, `--fixtures-per-test`,
`--markers`, `--help` show without judging; a run whose start-up hooks did
not all run); a session that stops before pytest_cmdline_main (a usage error
such as a mistyped option, a conftest.py that does not import) says NOT READY
from the config's cleanup, where the lock is released last. A pytest that
stops before it loads any of the suite's code (`-V` alone, which pytest
answers before it loads any plugin; a PYTEST_ADDOPTS that does not split; a
usage error of its first parse; a `-p` plugin) never arms the guard: the
early guard has removed the markers before pytest started, and ends the
process NOT READY, exit status 4 (gate/early.py). What is left: a virtualenv
without the checkout installed has no early guard (those starts keep an
earlier marker there; the reference host's is one, and no acceptance test can
run in any of them); code of the virtualenv that runs before the early guard
(a `.pth` file whose name sorts before `pty_acceptance_early.pth`) and ends
the process keeps an earlier marker; code that runs after it but before the
run guard (a sitecustomize.py) and ends the process with os._exit makes the
exit status its own, without a verdict line, the marker removed. (Each is
a file added to the virtualenv, which the run guard refuses at the marker:
decision/loaded_code.py.) A session
with entry points off whose conftests do not load arms nothing either (no
acceptance test can run: each needs the plugin's fixtures); where the
checkout is installed, the early guard ends it NOT READY.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pty_acceptance.decision import launch, marker_paths
from pty_acceptance.gate import checkout, early, invocation, node_listing, rewriting
from pty_acceptance.host import rundir, terminal

NAME = "pty-acceptance-run-guard"  # the guard object's plugin name (the entry point's is pyproject.toml's)
RUN_DIR_INI = checkout.RUN_DIR_INI
STARTUP = "the checkout's conftest.py"  # how startup.py arms: the root conftest's start-up hooks are loaded


class Guard:
    """One session's guard (config.stash[GUARD])."""

    def __init__(self, config: pytest.Config, root: Path):
        self.config = config
        self.root = root
        self.armed_by: list[str] = []
        self.lock: rundir.Lock | None = None
        self.lock_problem: str | None = None
        self.run_dir_before = rundir.current()
        self.removal = marker_paths.Removal()
        self.refused: str | None = None  # the NOT READY line a refusal raised
        self.entered = False  # its pytest_cmdline_main wrapper was entered
        self.started = False  # startup.pytest_cmdline_main got past its refusals
        self.showing: str | None = None  # the option that makes this session show, not judge
        self.ready: bool | None = None  # the gate's verdict (None: it gave none)

    # -- arming
    def take_lock(self) -> None:
        place = run_dir_of(self.root)
        rundir.use(place)
        try:
            self.lock = rundir.acquire(place)
        except rundir.Busy as e:
            raise self.refuse(f"SUITE-5: {e}; two runs never overlap, this one did nothing",
                              removal=False) from None
        except (rundir.RunDirError, OSError) as e:
            self.lock_problem = f"SUITE-5: the run lock cannot be taken: {e}"

    def remove_markers(self, args: list[str] | None = None) -> None:
        """Every marker path the arguments could name (MARK-4); again with
        the parsed options when pytest has them (nothing is looked at twice)."""
        args = checkout.raw_args(self.config) if args is None else args
        here = str(self.config.invocation_params.dir)
        self.removal.add(marker_paths.named(args, here, str(self.root / "inventories" / "target.yml")))

    def problems(self, option) -> list[str]:
        """Why this start cannot be trusted, from `option` (pytest's first
        parse, or its full one)."""
        out = [self.lock_problem] if self.lock_problem else []
        out += [f"MARK-4: {k}" for k in self.removal.kept]
        shape = launch.refused(self.config.invocation_params.args, option)  # what changes what loads
        shape += invocation.start_problems(self.config, option, self.root)
        return out + (["SUITE-3: " + "; ".join(shape)] if shape else [])

    def not_ready(self, reason: str, removal: bool = True) -> str:
        said = f" (MARK-4: {self.removal.text(kept=False)})" if removal else ""
        return terminal.escape(f"NOT READY: {reason}{said}")

    def refuse(self, reason: str, removal: bool = True) -> pytest.UsageError:
        """The UsageError that ends the session, NOT READY, with `reason`."""
        self.refused = self.not_ready(reason, removal)
        return pytest.UsageError(self.refused)

    # -- the end
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_cmdline_main(self, config: pytest.Config):
        """Around every pytest_cmdline_main: refused at once when the
        checkout's start-up hooks are not loaded; afterwards the exit
        status is non-zero unless the gate said READY (SUITE-3)."""
        self.entered = True
        if STARTUP not in self.armed_by:
            raise self.refuse("the suite's start-up hooks did not run: the checkout's conftest.py "
                              f"({self.root / 'conftest.py'}) is not loaded (--noconftest, --confcutdir, "
                              "acceptance/ reached through a link, another rootdir?): no test runs")
        try:
            ret = yield
        except pytest.UsageError:
            self.refused = self.refused or "refused"
            raise
        if self.ready and self.started and not self.showing:
            return ret
        if self.ready is None:  # the gate said nothing: say it here, last
            self.say(self.not_ready(self.why_not()))
        return ret if int(ret) != 0 else pytest.ExitCode.TESTS_FAILED

    def why_not(self) -> str:
        if self.showing:
            return f"SUITE-3: {self.showing}: it runs no test, nothing was judged"
        if not self.started:
            return "SUITE-3: the suite's start-up did not finish: nothing was judged"
        return "SUITE-3: the marker gate gave no verdict"

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """No test runs in a session whose start-up did not finish (the
        guard armed too late for its refusals: a conftest.py met only
        during collection)."""
        if self.started:
            return None
        session.shouldfail = "the suite's start-up did not finish"
        return True

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus):
        result = yield
        if not self.started and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return result

    def say(self, line: str, stream=None) -> None:
        stream = stream or sys.stdout
        stream.flush()
        print(line, file=stream, flush=True)

    def close(self) -> None:
        """The config's cleanup, after every pytest_unconfigure: a session
        that stopped before pytest_cmdline_main says NOT READY (pytest's own
        error follows); the lock goes last."""
        try:
            if not self.entered and not self.refused:
                self.say(self.not_ready("SUITE-3: pytest stopped before the run began (its error "
                                        "below): nothing was judged"), sys.stderr)
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None
            rundir.use(self.run_dir_before)


GUARD = pytest.StashKey[Guard]()


def of(config: pytest.Config) -> Guard | None:
    return config.stash.get(GUARD, None)


run_dir_of = checkout.run_dir_of  # the run lock's directory, read from the checkout


def inert(config: pytest.Config) -> bool:
    """A listing (node_listing.collect) or a worker process: never armed."""
    return hasattr(config, "workerinput") or node_listing.listing(config)


def arm(config: pytest.Config, root: Path | None, how: str, targets: list[str] | None = None,
        *, always: bool = False) -> Guard | None:
    """The session's guard, armed now if this session is on a checkout and
    it was not yet (the module docstring); None when it is not on one.
    `root`: the checkout the caller belongs to (None: the one `targets`
    reach); `targets`: what pytest collects (None: decided from pytest's
    first parse); `always`: the caller is loaded only where a checkout is
    collected. Before pytest has parsed every option, a start it refuses
    raises UsageError here."""
    guard = of(config)
    if guard is None:
        if inert(config):
            return None
        first_parse = not config.args
        targets = checkout.early_targets(config) if targets is None else targets
        paths = checkout.target_paths(config, targets, bool(getattr(_option(config), "pyargs", False)))
        if root is None:
            root = checkout.checkout_reached(paths)
            if root is None:
                return None
        elif not always and not any(checkout.reaches(root, p) for p in paths):
            return None
        guard = Guard(config, root)
        removed = early.taken_over(root)  # what the early guard removed at this checkout, carried on
        if removed is not None:
            guard.removal = removed
        config.stash[GUARD] = guard
        config.add_cleanup(guard.close)
        config.pluginmanager.register(guard, NAME) or config.pluginmanager.register(guard)
        guard.armed_by.append(how)
        guard.take_lock()
        guard.remove_markers()
        config.stash[REMOVAL] = (tuple(guard.removal.looked_at), guard.removal.text())
        problems = guard.problems(config.known_args_namespace) if first_parse else []
        if first_parse and (forged := rewriting.forged_caches(root)):
            problems.append("SUITE-3: " + "; ".join(forged[:5]) + (f"; and {len(forged) - 5} more" if len(forged) > 5
                                                                     else ""))
        if problems:
            raise guard.refuse("; ".join(problems))
        return guard
    guard.armed_by.append(how)
    return guard


def _option(config: pytest.Config):
    return config.option if config.args else config.known_args_namespace


def arm_from_conftest(pluginmanager: pytest.PytestPluginManager, conftest: str, how: str) -> Guard | None:
    """arm(), from the pytest_addoption of acceptance/conftest.py (called
    when it is registered; it is loaded only where acceptance/ is collected),
    at the checkout it belongs to, links resolved."""
    config = pluginmanager.get_plugin("pytestconfig")
    if not isinstance(config, pytest.Config):
        return None
    root = Path(os.path.realpath(conftest)).parent.parent
    return arm(config, root, how, list(config.args) or None, always=True)


REMOVAL = pytest.StashKey[tuple[tuple[str, ...], str]]()  # (marker paths looked at, what happened)


# ---------------------------------------------------------------- the entry point's hooks
def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Called as pytest loads the entry point, before PYTEST_PLUGINS and any
    conftest.py: armed if the session is on a checkout."""
    parser.addini(RUN_DIR_INI, default=rundir.DEFAULT_DIR,
                  help="the run lock's root-only directory (the suite's own tests move it)")
    config = pluginmanager.get_plugin("pytestconfig")
    if isinstance(config, pytest.Config):
        arm(config, None, "the entry point")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before any conftest.py is loaded, with the options of every plugin
    known: armed if it was not (the session judged again)."""
    arm(early_config, None, "the entry point")

