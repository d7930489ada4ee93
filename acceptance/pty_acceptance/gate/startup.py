"""What an acceptance run does before anything else (MARK-4, SUITE-3).

These hooks are the root conftest.py's own (it imports them), not the gate
plugin's: `-p no:pty_acceptance.gate.plugin` blocks a plugin module, never a
conftest's hooks. So even with the gate disabled, a session that reaches into
acceptance/:

- knows the suite's options, and does not stop at an unknown `--marker`
  before anything is removed;
- judges what the process was started with first of all (launch.py: the
  environment variables that change what Python or the dynamic loader
  loads or which bus answers, `-p NAME`, a debugger, `--lsof`): refused
  runs take the lock and remove the marker, and nothing else happens (no
  cleanup of an earlier run, no bus opened) before they end NOT READY;
- takes the run lock (rundir.py) first of all: a second run fails at once,
  NOT READY, naming the first, and touches nothing (SUITE-5);
- removes, holding the lock, what a SIGKILLed run left: its stand-in
  sockets and runtime environment copies under /run, its scratch area in
  /tmp (scratch.py: the workspaces and build directories it handed to the
  service user), its disposable units; at the end of the run, before the
  lock goes, the run's own scratch area is removed;
- turns SIGTERM into the same orderly teardown as SIGINT (KeyboardInterrupt:
  fixtures torn down, the gate blocks the marker as "interrupted");
- removes the marker in pytest_cmdline_main, before any pytest_configure,
  so before the inventory is loaded: where the inventory file names it (else
  at the default path), and at `--marker` too when that is another path;
- then refuses, NOT READY, a run whose reporting was turned off or
  redirected (reporting.py: `-p no:` one of the suite's own plugins or a
  reporting one, Testinfra's `--nagios`, a report directory inside the
  checkout or its virtualenv, ...), before anything else ran (SUITE-3);
- ends at the last pytest_configure, NOT READY with the reason, when no
  gate got registered (the plugin disabled, or its registration failed).

Only not loading the root conftest at all switches this off (`--noconftest`,
a `--confcutdir` below the project, `-p no:<path of conftest.py>`); then no
acceptance test can run (each needs the plugin's fixtures) and the run fails,
but an earlier marker is not removed. ROOT-ACCEPTANCE.md's invocation uses
none of them.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from pty_acceptance.decision import launch, readiness_marker, reporting
from pty_acceptance.gate import node_listing
from pty_acceptance.host import rundir, scratch, terminal
from pty_acceptance.spec import inventory

GATE = "pty-acceptance-gate"  # the name plugin.py registers the gate under
REMOVAL = pytest.StashKey[tuple[tuple[str, ...], str]]()  # (marker paths, what happened)
LOCK = pytest.StashKey["rundir.Lock | None"]()
CLEANED = pytest.StashKey[list]()  # what the start-up removed of an earlier run
SIGTERM_BEFORE = pytest.StashKey["signal._HANDLER"]()  # what signal.signal returns (typeshed's name)
RUN_DIR_BEFORE = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("pty-acceptance", "opencode PTY supervisor root acceptance")
    g.addoption("--inventory", metavar="FILE", default=None,
                help="what the target host is expected to be (default inventories/target.yml)")
    g.addoption("--marker", metavar="PATH", default=None,
                help="readiness marker path (default: the inventory's marker)")
    g.addoption("--no-marker", action="store_true", default=False,
                help="never write the marker, even when every gate passes")
    g.addoption("--waivers", metavar="FILE", default=None,
                help="reviewed waivers acknowledging CONCERN items (waivers.py); never a failure")
    g.addoption("--sign-key", metavar="PATH", default=None,
                help="sign the in-toto Statement (a DSSE envelope beside it) with this root-only "
                     "key (signing.py); a key or tool that fails blocks the marker")
    # not argparse choices: a bad value must end the run NOT READY after the
    # marker was removed (plugin._signer), not stop pytest before that
    g.addoption("--sign-tool", metavar="TOOL", default=None,
                help="the host program that signs: openssl (Ed25519 PEM key, the default), "
                     "ssh-keygen (OpenSSH key) or gpg (exported secret key file)")
    g.addoption("--report-dir", metavar="DIR", default=None,
                help="where JUnit and evidence go (default reports/)")
    parser.addini("pty_acceptance_run_dir", default=rundir.DEFAULT_DIR,
                  help="the run lock's root-only directory (the suite's own tests move it)")


def acceptance_args(config: pytest.Config, acceptance: Path) -> list[Path]:
    """The session's path arguments that reach into acceptance/."""
    hits = []
    for arg in config.args:
        p = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if p == acceptance or acceptance in p.parents or p in acceptance.parents:
            hits.append(p)
    return hits


def project_root(config: pytest.Config) -> Path:
    """The checkout: the directory of the conftest.py that carries these hooks
    (the project's root conftest), whatever --rootdir says; pytest's rootpath
    when no such conftest is registered. invocation.py blocks a run whose
    rootpath is not this directory (SUITE-3)."""
    for name, plugin in config.pluginmanager.list_name_plugin():
        if getattr(plugin, "pytest_cmdline_main", None) is pytest_cmdline_main \
                and str(name).endswith("/conftest.py"):
            return Path(name).parent.resolve()
    return Path(config.rootpath).resolve()


def acceptance_dir(config: pytest.Config) -> Path:
    return project_root(config) / "acceptance"


def is_acceptance_run(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput") or getattr(config.option, "help", False) \
            or getattr(config.option, "version", False) or node_listing.listing(config):
        return False
    return bool(acceptance_args(config, acceptance_dir(config)))


def inventory_file(config: pytest.Config) -> str:
    return config.getoption("--inventory") or str(project_root(config) / "inventories" / "target.yml")


def remove_marker(path: str) -> str:
    """MARK-4, in words for the report; a failure is reported, not raised."""
    try:
        return readiness_marker.remove(path)
    except (OSError, readiness_marker.UnsafeChain) as e:
        return f"could not remove the marker at {path}: {e}"


def marker_paths(config: pytest.Config) -> list[str]:
    """Every marker a run must remove first (MARK-4): the inventory's (where
    the inventory file names one, else the default path) and, with --marker,
    that one too: a run with another --marker never keeps the inventory's
    marker from an earlier READY run."""
    named = inventory.marker_named(inventory_file(config)) or readiness_marker.DEFAULT_PATH
    return list(dict.fromkeys(p for p in (config.getoption("--marker"), named) if p))


def remove_markers(paths: list[str]) -> tuple[tuple[str, ...], str]:
    """(the paths looked at, what happened at each, in words)."""
    said = [remove_marker(p) for p in paths]
    return tuple(paths), "; ".join(said)


def not_ready(config: pytest.Config, reason: str) -> str:
    removal = config.stash.get(REMOVAL, ("", "the marker was not looked at"))[1]
    return terminal.escape(f"NOT READY: {reason} (MARK-4: {removal})")


SIGINT_IGNORED = ("SUITE-5: SIGINT is ignored by this run (started as a background job, `cmd &`?): "
                  "Ctrl-C or kill -INT cannot interrupt it; SIGTERM still ends it NOT READY after "
                  "its teardown")


def sigint_ignored() -> bool:
    """Python installs its KeyboardInterrupt handler only when SIGINT was not
    ignored at start; a shell's `cmd &` starts a job with SIGINT ignored."""
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Said first, before any test: what this run cannot honour (SUITE-5)."""
    return [SIGINT_IGNORED] if is_acceptance_run(config) and sigint_ignored() else []


def _terminated(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def take_lock(config: pytest.Config, clean: bool = True) -> str | None:
    """SUITE-5: the run lock, then (`clean`) what a SIGKILLed run left. Returns
    why the run cannot go on (the marker is then still removed), or raises
    UsageError when another run holds the lock (it is left alone)."""
    path = config.getini("pty_acceptance_run_dir") or rundir.DEFAULT_DIR
    config.stash[RUN_DIR_BEFORE] = rundir.current()
    rundir.use(path)
    try:
        config.stash[LOCK] = rundir.acquire(path)
    except rundir.Busy as e:
        _give_back(config)
        raise pytest.UsageError(terminal.escape(
            f"NOT READY: SUITE-5: {e}; two runs never overlap, this one did nothing")) from None
    except (rundir.RunDirError, OSError) as e:
        return f"SUITE-5: the run lock cannot be taken: {e}"
    if not clean:  # a refused launch (launch.py): nothing of an earlier run is touched, no bus opened
        config.stash[CLEANED] = []
        return None
    cleaned = []
    try:
        cleaned += rundir.clean_first(path)
        if path == rundir.DEFAULT_DIR:  # the host's lock: the host's temporary directory too
            cleaned += rundir.clean_tmp(tempfile.gettempdir(), keep=scratch.current_ident())
    except (rundir.RunDirError, OSError) as e:
        return f"SUITE-5: what an earlier run left in {path} cannot be removed: {e}"
    cleaned += units_left()
    config.stash[CLEANED] = cleaned
    return None


def units_left() -> list[str]:
    """Disposable units an earlier run left, stopped (SUITE-1, SUITE-5)."""
    from pty_acceptance.supervisor import peer
    from pty_acceptance.host.bus import BusError, Systemd

    try:
        bus = Systemd.connect()
    except (OSError, BusError):
        return []  # no system bus: no unit can be left (the bus fixture fails such a run)
    try:
        return [terminal.escape(f"disposable unit {n} of an earlier run: stopped")
                for n in peer.cleanup_leftovers(bus)]
    except BusError as e:
        return [terminal.escape(f"disposable units of an earlier run not listed: {e}")]
    finally:
        bus.close()


def report_places(config: pytest.Config) -> list[tuple[str, str]]:
    """(option, absolute path) of each report directory the run was given."""
    here = str(config.invocation_params.dir)
    out = []
    if config.getoption("--report-dir"):
        out.append(("--report-dir", os.path.join(here, config.getoption("--report-dir"))))
    xml = getattr(config.option, "xmlpath", None)
    if xml:
        out.append(("--junitxml", os.path.dirname(os.path.join(here, xml))))
    return out


def reporting_problems(config: pytest.Config) -> list[str]:
    """SUITE-3: what this run's options turn off or redirect (reporting.py)."""
    return (reporting.disabled_problems(list(getattr(config.option, "plugins", None) or []))
            + reporting.option_problems(config.option)
            + reporting.report_place_problems(report_places(config), project_root(config), sys.prefix))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Before pytest_configure, so before the plugin loads the inventory."""
    if is_acceptance_run(config):
        # SUITE-3: an environment or option that changes what loads, first of all (launch.py)
        first = launch.refused(config.invocation_params.args, config.option)
        problem = take_lock(config, clean=not first)
        config.stash[SIGTERM_BEFORE] = signal.signal(signal.SIGTERM, _terminated)
        config.stash[REMOVAL] = remove_markers(marker_paths(config))
        if not problem:
            refused = first + reporting_problems(config)
            problem = "SUITE-3: " + "; ".join(refused) if refused else None
        if problem:
            signal.signal(signal.SIGTERM, config.stash[SIGTERM_BEFORE])
            del config.stash[SIGTERM_BEFORE]
            _give_back(config)  # no pytest_unconfigure follows a UsageError here
            raise pytest.UsageError(not_ready(config, problem))


def _give_back(config: pytest.Config) -> None:
    """The lock released, this process's run directory as it was (in-process runs)."""
    lock = config.stash.get(LOCK, None)
    if lock is not None:
        lock.release()
        config.stash[LOCK] = None
    if RUN_DIR_BEFORE in config.stash:
        rundir.use(config.stash[RUN_DIR_BEFORE])
        del config.stash[RUN_DIR_BEFORE]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After the gate's verdict and marker: the scratch area is removed, the
    lock goes last. What could not be removed is said on stderr (the verdict
    stays the last line) and its record is kept for the next run."""
    if SIGTERM_BEFORE in config.stash:
        signal.signal(signal.SIGTERM, config.stash[SIGTERM_BEFORE])
        del config.stash[SIGTERM_BEFORE]
    lock = config.stash.get(LOCK, None)
    if lock is not None:
        try:
            left = scratch.finish()
        except OSError as e:
            left = [terminal.escape(f"the scratch area was not removed: {e}")]
        for line in left:
            print(f"SUITE-5: {line}; the next run removes it", file=sys.stderr)
    _give_back(config)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After every other pytest_configure: a gate, or NOT READY now."""
    if is_acceptance_run(config) and config.pluginmanager.get_plugin(GATE) is None:
        raise pytest.UsageError(not_ready(config, "the marker gate is not registered: the plugin "
                                          "pty_acceptance.gate.plugin is disabled (-p no:?) or not loaded"))
