"""Every test and collection report through terminal.escape before the
terminal or the JUnit writer sees it (SUITE-4): failure messages, tracebacks,
captured output and skip reasons, whichever module wrote them."""

from __future__ import annotations

import pytest

from pty_acceptance.host.terminal import escape_report


class HostText:
    """Registered for an acceptance session next to the gate."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        escape_report(report)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector):
        report = yield
        escape_report(report)
        return report
