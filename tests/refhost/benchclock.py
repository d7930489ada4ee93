"""A pytest plugin the bench loads into the suite (named in the root conftest
of the bench's snapshot, bench.CLOCK_LINE: `-p` would be a SUITE-3 blocker):
it only observes. Every phase report's wall-clock start and stop (pytest's own
TestReport.start/.stop, time.time()) is written, at the end of the session, as
JSON to the file named by $PTY_BENCH_CLOCK or, where it is not set (the
suite's clean start keeps no such variable: docs/operator.md), to CLOCK_NAME in
the run's --report-dir:

    {"session": [start, stop], "phases": [[nodeid, when, start, stop], ...]}

A module's time is then its first setup's start to its last teardown's stop:
module-scoped fixtures are torn down in the teardown phase of the module's last
test, so their teardown counts for the module; a session-scoped fixture is set
up in the first test that asks for it (BUILD-1's builds: test_builds) and torn
down in the last test of the run."""
from __future__ import annotations

import json
import os
import time

ENV = "PTY_BENCH_CLOCK"
CLOCK_NAME = "bench-clock.json"
_phases: list[list] = []
_session: list[float] = []


def pytest_sessionstart(session) -> None:
    _session[:] = [time.time()]


def pytest_runtest_logreport(report) -> None:
    start, stop = getattr(report, "start", None), getattr(report, "stop", None)
    if start is not None and stop is not None:
        _phases.append([report.nodeid, report.when, start, stop])


def pytest_unconfigure(config) -> None:
    reports = getattr(config.option, "report_dir", None)
    path = os.environ.get(ENV) or (os.path.join(reports, CLOCK_NAME) if reports else "")
    if not path:
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"session": [*_session[:1], time.time()], "phases": _phases}, f)
