"""Every test and collection report through terminal.escape before the
terminal or the JUnit writer sees it (SUITE-4): failure messages, tracebacks,
captured output and skip reasons, whichever module wrote them; and the
server.env password (and the Basic credential made of it) taken out of them
and of every evidence property, wherever a test read it from (a blind red
team's round six: the service user wrote its password into the candidate unit's
ExecStart=, which RUNTIME-1 and RUNTIME-2 record)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from pty_acceptance.host.terminal import escape_report, redactor


class HostText:
    """Registered for an acceptance session next to the gate, with the secrets
    no report may show."""

    def __init__(self, secrets: Callable[[], Iterable[str]] = tuple) -> None:
        self.read_secrets = secrets
        self.secrets: set[str] = set()
        self.redact = redactor(())
        self.refresh()

    def refresh(self) -> None:
        """Every secret ever read, this time's added (a password changed during the run: a
        blind red team's ninth pass wrote the new one into the candidate's ExecStart=)."""
        now = set(self.read_secrets())
        if not now <= self.secrets:
            self.secrets |= now
            self.redact = redactor(self.secrets)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        self.refresh()
        escape_report(report, self.redact)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector):
        report = yield
        escape_report(report, self.redact)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        """Every report logged, the ones the gate makes itself included (a test
        not run, its reason), before the terminal or the JUnit writer reads it."""
        escape_report(report, self.redact)
