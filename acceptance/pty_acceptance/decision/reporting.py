"""What a run may not turn off or redirect in its reporting (SUITE-3).

Refused at start-up (startup.pytest_cmdline_main, a hook of the root
conftest's own: no `-p no:` can switch it off), once the marker was removed
and before anything else ran: `ERROR: NOT READY: SUITE-3: ...`, exit status 4,
no marker. A run that reported less than it checked, or reported it where a
reader does not look, must not earn the marker it would certify.

Refused, each with its reason (`problems` says it):

- `-p no:NAME` for every plugin but pytest's cache (DISABLED_ALLOWED): the
  suite's own (the gate, the terminal escaping, the gate's module) and
  pytest's that report (terminal, junitxml, assertion rewriting, capture,
  logging, warnings, faulthandler, unraisable and thread exceptions) or
  decide outcomes and collection (skipping, python, unittest, doctest);
  the rest only provide fixtures or options the run does not use, and
  refusing them costs nothing;
- Testinfra's `--nagios` (its one summary line replaces the terminal report,
  its count the exit status) and its host-selection options (HOST_OPTIONS:
  the suite judges the host it runs on, through Testinfra's local backend;
  an option naming another host, connection or user would be ignored while
  the report seemed to be about it);
- pytest's options that drop what the terminal says first or last or send it
  elsewhere: `-q` and `--no-header` (the header holds the preflight's
  verdict and SUITE-5's SIGINT notice), `--no-summary` (the gate's BLOCKER
  lines), `--pastebin` (the session log leaves the host), `-s` and every
  `--capture` but `fd` (a test's and its host programs' output would reach
  the terminal unescaped, SUITE-4), `--log-cli-level` (log records live on
  the terminal, unescaped), `--junit-prefix` (every case of the attached
  report renamed: they no longer match the checkout's node-id list);
- a report directory (`--report-dir`) or JUnit file (`--junitxml`) inside
  the checkout (its own `reports/` excepted) or the virtualenv: the SUITE-4
  walk of those trees (owntree.py) never walks a report directory, so a
  file the service user owns there would go unreported.

Allowed, because they change how much is shown, never whether a failure is
reported: `-v`, `-r`, `--tb` (an acceptance failure is a message without a
traceback, the same in every style, and every failure is a BLOCKER line and
a failing JUnit case), `--showlocals`, `--color`, `--code-highlight`,
`--durations`, `--setup-show`, `--show-capture`, `--disable-warnings`
(warnings are still caught, their summary is not shown), `--log-level`,
`--log-file` and `--debug` (files root chose, beside the report). `-o`
(any ini override, `junit_*` included) and `-p PLUGIN` are refused
already (invocation.py).
"""

from __future__ import annotations

import os
from pathlib import Path

# The one plugin a run may disable: the reference harness runs
# `pytest -p no:cacheprovider` (tests/refhost/run.py). It keeps --lf/--sw
# state between runs (both refused as narrowing) and reports nothing.
DISABLED_ALLOWED = frozenset({"cacheprovider"})

# Why disabling one of these keeps the run from earning the marker.
DISABLED_REASONS = {
    "pty_acceptance.gate.plugin": "the suite's marker gate",
    "pty-acceptance-gate": "the suite's marker gate",
    "pty_acceptance_guard": "the suite's run guard (its entry point: the markers removed however pytest "
                            "was started, MARK-4)",
    "pty-acceptance-run-guard": "the suite's run guard (MARK-4)",
    "pty-acceptance-host-text": "the suite's escaping of host text on the terminal and in the JUnit "
                                "report (SUITE-4)",
    "terminal": "pytest's terminal report: the gate's BLOCKER lines and its last line",
    "junitxml": "pytest's JUnit writer: the report the marker certifies (SUITE-2)",
    "assertion": "pytest's assertion rewriting: the test modules' own checks become plain asserts",
    "capture": "output capture: a test's and its host programs' output would reach the terminal "
               "unescaped (SUITE-4)",
    "logging": "log capture: log records would reach the terminal unescaped",
    "warnings": "warning capture: warnings would reach the terminal unescaped",
    "faulthandler": "the traceback of a run that hangs or crashes",
    "unraisableexception": "the report of an exception nothing could catch",
    "threadexception": "the report of an exception in a worker thread",
    "skipping": "skip and xfail marks: outcomes would change",
    "python": "test collection",
    "unittest": "test collection",
    "doctest": "test collection",
}

# Testinfra's options that name another host, connection or user.
HOST_OPTIONS = (("hosts", "--hosts"), ("connection", "--connection"), ("ssh_config", "--ssh-config"),
                ("ssh_identity_file", "--ssh-identity-file"), ("ssh_extra_args", "--ssh-extra-args"),
                ("sudo", "--sudo"), ("sudo_user", "--sudo-user"),
                ("ansible_inventory", "--ansible-inventory"), ("force_ansible", "--force-ansible"))


def disabled_plugins(plugin_args: list[str]) -> list[str]:
    """The names `-p no:NAME` disabled, in the order given."""
    return [a[3:] for a in plugin_args if a.startswith("no:")]


def disabled_problems(plugin_args: list[str]) -> list[str]:
    out = []
    for name in disabled_plugins(plugin_args):
        if name in DISABLED_ALLOWED:
            continue
        what = DISABLED_REASONS.get(name, "a plugin the suite does not allow to be disabled")
        out.append(f"-p no:{name} disables {what} (only -p no:{' '.join(sorted(DISABLED_ALLOWED))} may be)")
    return out


def option_problems(option) -> list[str]:
    """What pytest's and Testinfra's parsed options (config.option) turn off
    or redirect."""
    out = []
    if getattr(option, "nagios", False):
        out.append("--nagios: Testinfra's Nagios mode replaces the terminal report (no BLOCKER lines, "
                   "no verdict line) by one summary line, and sets the exit status by its own count")
    named = [flag for attr, flag in HOST_OPTIONS if getattr(option, attr, None)]
    if named:
        out.append(f"{' '.join(named)}: Testinfra's host selection: the suite judges the host it runs on "
                   "(Testinfra's local backend); the report would seem to be about another host or user")
    if getattr(option, "verbose", 0) < 0:
        out.append("-q: the header (the preflight's verdict, SUITE-5's SIGINT notice) is not shown")
    if getattr(option, "no_header", False):
        out.append("--no-header: the header (the preflight's verdict, SUITE-5's SIGINT notice) is not shown")
    if getattr(option, "no_summary", False):
        out.append("--no-summary: the gate's BLOCKER lines are not shown")
    if getattr(option, "pastebin", None):
        out.append(f"--pastebin={option.pastebin}: the session log would leave this host for a paste service")
    capture = getattr(option, "capture", "fd")
    if capture != "fd":
        out.append(f"--capture={capture} (or -s): a test's and its host programs' output would reach the "
                   "terminal unescaped (SUITE-4)")
    if getattr(option, "log_cli_level", None) is not None:
        out.append(f"--log-cli-level={option.log_cli_level}: log records would reach the terminal live, "
                   "unescaped (SUITE-4)")
    if getattr(option, "junitprefix", None):
        out.append(f"--junit-prefix={option.junitprefix}: every case of the report renamed: they would not "
                   "match the checkout's node-id list")
    return out


def within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _forms(path: str) -> set[str]:
    """`path` as given (made absolute) and with its links resolved: a report
    directory reached through a link into the checkout is in it."""
    return {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}


def report_place_problems(places: list[tuple[str, str]], checkout: Path, venv: str) -> list[str]:
    """`places`: (what, absolute path) of each report directory the run was
    given. Inside the checkout (its reports/ excepted) or the virtualenv is refused."""
    root = {str(checkout), os.path.realpath(checkout)}
    own = {os.path.join(r, "reports") for r in root}
    env = {os.path.normpath(venv), os.path.realpath(venv)}
    out = []
    for what, path in places:
        forms = _forms(path)
        if any(within(f, e) for f in forms for e in env):
            out.append(f"{what} {path} is inside the virtualenv {venv}: the SUITE-4 walk of it would "
                       "leave that directory out")
        elif any(within(f, r) for f in forms for r in root) and \
                not all(any(within(f, o) for o in own) for f in forms):
            out.append(f"{what} {path} is inside the checkout {checkout} (only its reports/ may hold "
                       "reports): the SUITE-4 walk of it would leave that directory out")
    return out
