"""What an acceptance run does before anything else (MARK-4, SUITE-3, SUITE-5).

These hooks are the root conftest.py's own (it imports them), not the gate
plugin's: `-p no:pty_acceptance.gate.plugin` blocks a plugin module, never a
conftest's hooks. So even with the gate disabled, a session that reaches into
acceptance/:

- knows the suite's options (pytest_addoption), and arms the run guard
  there, before pytest parses them (runguard.py: the run lock at the
  checkout's own place, every marker the run could name removed, a start it
  cannot trust refused: launch.py's environment variables that change what
  Python or the dynamic loader loads or which bus answers, `-p NAME`, a
  debugger, `--lsof`, and invocation.py's options), unless the guard's entry
  point armed it already;
- in pytest_cmdline_main, before any pytest_configure (so before the
  inventory is loaded): refuses, NOT READY, exit 4, what the full parse of
  the options shows (invocation.py: the configuration, the start-up, `-p`;
  reporting.py: a run whose reporting was turned off or redirected: `-p no:`
  one of the suite's own plugins or a reporting one, Testinfra's `--nagios`,
  a report directory inside the checkout or its virtualenv, ...);
- only then removes what a SIGKILLed run left: its stand-in sockets and
  runtime environment copies under /run, its scratch area in /tmp
  (scratch.py: the workspaces and build directories it handed to the
  service user), its disposable units; at the end of the run, before the
  lock goes, the run's own scratch area is removed;
- turns SIGTERM into the same orderly teardown as SIGINT (KeyboardInterrupt:
  fixtures torn down, the gate blocks the marker as "interrupted");
- ends at the last pytest_configure, NOT READY with the reason, when no
  gate got registered (the plugin disabled, or its registration failed).

A session that shows instead of running (`--fixtures`, `--fixtures-per-test`,
`--markers`, `--help`, `--version`) registers no gate: the guard ends it NOT
READY, exit 1, naming the option. Where this conftest is not loaded at all
(`--noconftest`, a `--confcutdir` below the project, acceptance/ reached
through a link, `--import-mode=append`) the guard is armed by the suite's
other code and refuses the run (runguard.py).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from pty_acceptance.decision import marker_paths, readiness_marker, reporting
from pty_acceptance.gate import runguard
from pty_acceptance.host import rundir, scratch, terminal

GATE = "pty-acceptance-gate"  # the name plugin.py registers the gate under
REMOVAL = runguard.REMOVAL  # (marker paths looked at, what happened at each)
CLEANED = pytest.StashKey[list]()  # what the start-up removed of an earlier run
SIGTERM_BEFORE = pytest.StashKey["signal._HANDLER"]()  # what signal.signal returns (typeshed's name)
# Options that show instead of running: no gate judges such a session, the
# guard ends it NOT READY naming the option (config.option's name, the flag).
SHOWING = (("help", "--help"), ("version", "--version"), ("showfixtures", "--fixtures"),
           ("show_fixtures_per_test", "--fixtures-per-test"), ("markers", "--markers"))


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
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
    parser.addini(runguard.RUN_DIR_INI, default=rundir.DEFAULT_DIR,
                  help="the run lock's root-only directory (the suite's own tests move it)")
    # the run guard, armed here unless its entry point armed it first: before
    # pytest parses the options (a usage error still finds the markers removed)
    config = pluginmanager.get_plugin("pytestconfig")
    if isinstance(config, pytest.Config):
        runguard.arm(config, project_root(config), runguard.STARTUP, list(config.args) or None)


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
    """The gate judges this session: the guard armed it (it is on the
    checkout), its start-up finished, and it runs rather than shows."""
    guard = runguard.of(config)
    return guard is not None and guard.started and not guard.showing


def showing(option) -> str | None:
    """The option that makes this session show instead of run, if any."""
    return next((flag for name, flag in SHOWING if getattr(option, name, False)), None)


def inventory_file(config: pytest.Config) -> str:
    return config.getoption("--inventory") or str(project_root(config) / "inventories" / "target.yml")


def marker_fallback(config: pytest.Config) -> str:
    """The marker path of a run whose inventory did not load: --marker, else
    the first one its file names, else the default."""
    named = marker_paths.inventory_markers(inventory_file(config))
    return config.getoption("--marker") or (named[0] if named else readiness_marker.DEFAULT_PATH)


def not_ready(config: pytest.Config, reason: str) -> str:
    guard = runguard.of(config)
    if guard is not None:
        return guard.not_ready(reason)
    return terminal.escape(f"NOT READY: {reason} (MARK-4: the marker was not looked at)")


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


def leftovers(guard: runguard.Guard) -> list[str]:
    """SUITE-5: what a SIGKILLed run left, removed holding the lock (after
    the refusals: a refused run acts on nothing). Raises RunDirError or
    OSError when it cannot be removed."""
    path = rundir.current()  # the guard's place, the checkout's own
    cleaned = rundir.clean_first(path)
    if path == rundir.DEFAULT_DIR:  # the host's lock: the host's temporary directory too
        cleaned += rundir.clean_tmp(tempfile.gettempdir(), keep=scratch.current_ident())
    return cleaned + units_left()


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
    """Before pytest_configure, so before the plugin loads the inventory:
    the guard armed (runguard.py), what the full parse shows refused, then
    what an earlier run left removed."""
    guard = runguard.arm(config, project_root(config), runguard.STARTUP, list(config.args))
    if guard is None:
        return
    guard.removal.add([p for p in (config.getoption("--marker"),) if p]
                      + marker_paths.inventory_markers(inventory_file(config)))  # as parsed: looked at already
    config.stash[REMOVAL] = (tuple(guard.removal.looked_at), guard.removal.text())
    problems = guard.problems(config.option)
    refused = reporting_problems(config)
    if refused:
        problems.append("SUITE-3: " + "; ".join(refused))
    if problems:
        raise guard.refuse("; ".join(problems))
    config.stash[SIGTERM_BEFORE] = signal.signal(signal.SIGTERM, _terminated)
    try:
        config.stash[CLEANED] = leftovers(guard)
    except (rundir.RunDirError, OSError) as e:
        signal.signal(signal.SIGTERM, config.stash[SIGTERM_BEFORE])
        del config.stash[SIGTERM_BEFORE]
        raise guard.refuse(f"SUITE-5: what an earlier run left in {rundir.current()} cannot be "
                           f"removed: {e}") from None
    guard.showing = showing(config.option)
    guard.started = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After the gate's verdict and marker: the scratch area is removed (the
    guard releases the lock after, last). What could not be removed is said
    on stderr (the verdict stays the last line) and its record is kept for
    the next run."""
    if SIGTERM_BEFORE in config.stash:
        signal.signal(signal.SIGTERM, config.stash[SIGTERM_BEFORE])
        del config.stash[SIGTERM_BEFORE]
    guard = runguard.of(config)
    if guard is not None and guard.started and guard.lock is not None:
        try:
            left = scratch.finish()
        except OSError as e:
            left = [terminal.escape(f"the scratch area was not removed: {e}")]
        for line in left:
            print(f"SUITE-5: {line}; the next run removes it", file=sys.stderr)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After every other pytest_configure: a gate, or NOT READY now."""
    if is_acceptance_run(config) and config.pluginmanager.get_plugin(GATE) is None:
        raise pytest.UsageError(not_ready(config, "the marker gate is not registered: the plugin "
                                          "pty_acceptance.gate.plugin is disabled (-p no:?) or not loaded"))
