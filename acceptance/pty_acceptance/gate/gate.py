"""The marker gate: the hooks of one acceptance session (MARK-1, SUITE-3).

The marker was removed before the gate was registered (startup.py, MARK-4).
The gate records every collection and test report (recorder.py), reads the
host at session start and when the marker is decided (hostfacts.py), applies
the rules to what happened (rules.py) and ends in one straight sequence
(end_of_run.py): the marker is written only when no rule and no step blocks it.
SIGINT and SIGTERM are held from the decision to the recorded outcome
(interrupts.py): an interrupt there takes back what the end wrote. An error
of the suite's own while deciding or ending is a blocker in a report that
is still written, never a run without one (SUITE-2).
The last line of the terminal output is either
``READY: marker written <path>`` or ``NOT READY: <n> blockers: <IDs>``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from pty_acceptance.decision import end_of_run, hostfacts, interrupts, properties, rules
from pty_acceptance.gate import failures, recorder, runguard, runwatch, startup
from pty_acceptance.gate.rewriting import assertion_rewriter
from pty_acceptance.decision.run_records import AtStart, Setup
from pty_acceptance.gate.failures import check_requirement_marks, requirement_ids
from pty_acceptance.host import terminal
from pty_acceptance.report import reports
from pty_acceptance.spec.requirements import sort_key


class Gate:
    """Registered per acceptance session by plugin.pytest_configure."""

    def __init__(self, config: pytest.Config, setup: Setup):
        self.config = config
        self.setup = setup
        self.recorder = recorder.Recorder(setup.root, setup.acceptance)
        self.properties = recorder.SuiteProperties(config)
        self.withheld: list[pytest.Item] = []  # not run: the preflight failed for them
        self.at_start = AtStart()  # read at session start, when the inventory loaded
        self.said: tuple[rules.Blocker, ...] | None = None  # the decision's blockers, then the end's
        self.outcome: end_of_run.Outcome | None = None
        self.late: str | None = None  # signals held after the READY end's last look
        self.watch: runwatch.RunWatch | None = None  # SUITE-5: the run's bound and its stop guard

    def cleaned(self) -> str:
        """What the start-up removed of an earlier, killed run (startup.take_lock)."""
        done = self.config.stash.get(startup.CLEANED, [])
        return "at start, " + ("; ".join(done) if done else "nothing left by an earlier run")

    # -- start
    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """The preflight's verdict, before any test (and its first cause, once)."""
        found = self.setup.preflight
        if found is None:
            return []
        host = [terminal.escape(line) for line in found.host_lines()]
        off = [terminal.escape(f"preflight: finding (SUITE-4, recorded): {p.line()}")
               for p in found.protections if p.off]
        bad = found.failed
        if not bad:
            return host + [f"preflight: passed ({len(found.findings)} checks)"] + off
        head = f"NOT READY: {rules.preflight_cause(self.setup)}" if found.cause else \
            f"preflight: {len(bad)} checks failed: their tests will not run"
        return [terminal.escape(head)] + host + [terminal.escape(f"  preflight {f.line()}") for f in bad] + off

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        st = self.setup  # the marker was removed before the gate existed (startup.py)
        self.at_start = hostfacts.at_start(st, st.inventory)
        if st.inventory is not None:
            self.watch = runwatch.RunWatch(st.inventory)
            self.watch.start()
        sigint = startup.SIGINT_IGNORED if startup.sigint_ignored() else None
        for name, value in properties.at_start(st, self.at_start, self.cleaned(), sigint):
            self.properties.add(name, value)

    # -- collection
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.recorder.collect_report(report)

    def pytest_deselected(self, items) -> None:
        self.recorder.deselected += len(items)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        check_requirement_marks(items, self.setup.acceptance)
        self._withhold(items)

    def _withhold(self, items) -> None:
        """Tests the preflight says cannot run here are not run: recorded as
        collected, each with its cause (rules.not_run_blockers groups them)."""
        found = self.setup.preflight
        if found is None or not found.failed:
            return
        kept = []
        for item in items:
            why = found.withheld(tuple(requirement_ids(item)))
            if why is None:
                kept.append(item)
                continue
            self.recorder.withheld(item, f"preflight: {why}")
            self.withheld.append(item)
        items[:] = kept

    @pytest.hookimpl(wrapper=True, trylast=True)  # inside the terminal's: its 100% comes after them
    def pytest_runtestloop(self, session):
        """Each test withheld by the preflight is reported (JUnit, terminal)
        as not run, with its requirement IDs: an error at setup (a JUnit reader
        counts it as not passed), after the tests that do run (pytest stops
        before its loop when a failure is reported ahead of it). They count
        among the session's tests (pytest's progress and totals)."""
        session.testscollected += len(self.withheld)
        try:
            return (yield)
        finally:
            for item in self.withheld:
                recorder.report_not_run(item, f"not run: {rules.cause_label(self.recorder.not_run[item.nodeid])} "
                                              "(the preflight's cause, above)")

    def pytest_report_teststatus(self, report, config):
        """A withheld test's error is counted apart in pytest's own summary
        ("161 not run", not one ERROR section per test): the gate's lines say
        its cause once, per module (rules.not_run_blockers)."""
        if report.when == "setup" and report.failed and recorder.NOT_RUN_KEY in report.keywords:
            return "not run", "n", "NOT RUN"
        return None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            self.recorder.item(item)

    # -- running
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool | None:
        """SUITE-5: no test runs once a process of the suite's own was stopped
        from outside (runwatch.py); each is reported not run, naming why."""
        why = self.watch.entering(item.nodeid) if self.watch is not None else None
        if why is None:
            return None
        item.user_properties.append(("requirement", "SUITE-5"))  # its case names why it did not run
        recorder.report_not_run(item, failures.NOT_RUN + why)
        return True

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        if self.watch is not None:
            self.watch.left()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.recorder.test_report(report)

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.recorder.interrupted = True

    # -- end
    # The order at the end is the point (MARK-1, SUITE-2): decide; pytest's
    # JUnit writer writes (into a private directory); then end_of_run.py's
    # sequence: the report is published NOT READY, read back and parsed; the
    # marker written and read back; only then the READY bundle and report.
    # SIGINT and SIGTERM are held (interrupts.py) until the outcome is recorded.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus):
        watched = self._end_watch()  # first: the run's alarm never fires in the end
        with interrupts.Held() as held:
            decision = self._decide(session, exitstatus, watched)  # before the JUnit writer: its properties go in
            result = yield  # pytest's JUnit writer has written its file
            try:
                out = end_of_run.finish(self.setup, self.at_start, decision, recorder.junit_file(self.config), held)
            except Exception as e:  # noqa: BLE001  # the end's own guard failed: still NOT READY, and said
                out = end_of_run.failed(self.setup, decision, e)
            self.outcome, self.said = out, out.blockers
            self.late = held.said() if out.written else None
        if out.published:
            recorder.show_published(self.config, self.setup.report_path)
        withheld_all = self.withheld and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
        if out.interrupted:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        elif out.blockers and (session.exitstatus == pytest.ExitCode.OK or withheld_all):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # NOT READY: 1, as any failed run
        return result

    def _end_watch(self) -> tuple[tuple[str, ...], str | None, str | None]:
        """The run's bound disarmed and its stop guard halted: what they saw."""
        watch, self.watch = self.watch, None
        if watch is None:
            return (), None, None
        try:
            return watch.end()
        except Exception as e:  # noqa: BLE001  # the suite's own fault: the run counts as unwatched
            return (), f"the watch did not end cleanly: {type(e).__name__}: {e}", None

    def _decide(self, session: pytest.Session, exitstatus, watched) -> rules.Decision:
        """The rules applied to what happened and what the host says now; an
        error of the suite's own here is the decision's one blocker."""
        st = self.setup
        now = None
        try:
            happened = self.recorder.freeze(self.config, session, exitstatus, *watched)
            now = hostfacts.at_marker_time(st, read_content=rules.preflight_cause(st) is None,
                                           plugins=tuple(self.config.pluginmanager.list_name_plugin()),
                                           rewriter=assertion_rewriter())
            decision = rules.decide(st, happened, self.at_start, now)
        except Exception as e:  # noqa: BLE001  # the suite's own fault: a blocker, the report still written
            decision = rules.Decision((rules.internal_error("deciding the verdict", e),), (), sign_refused=True)
        redact = self.redactor()
        decision = dataclasses.replace(decision, blockers=tuple(
            dataclasses.replace(b, reason=redact(b.reason)) for b in decision.blockers))
        try:
            for name, value in properties.at_decision(st, now, decision) + properties.watched(*watched):
                self.properties.add(name, redact(value) if isinstance(value, str) else value)
        except Exception as e:  # noqa: BLE001  # as above
            decision = dataclasses.replace(decision, blockers=decision.blockers + (
                rules.internal_error("recording the decision in the report", e),))
        self.said = decision.blockers
        return decision

    def redactor(self) -> Callable[[str], str]:
        """The secrets no report shows, as the host-text plugin holds them now (read again):
        the gate's own text (blockers, properties, the summary) carries host text too (a
        blind red team's round eleven named a link after the password; the blocker that
        named it reached the JUnit, the HTML and the terminal as it was)."""
        host_text = self.config.pluginmanager.get_plugin("pty-acceptance-host-text")
        if host_text is None:
            return _unreadable
        host_text.refresh()
        return host_text.redact

    def ready(self) -> bool:
        """The end's sequence ran and wrote the marker, and nothing blocked it."""
        return self.said == () and self.outcome is not None and self.outcome.written

    def summary_lines(self) -> list[str]:
        """The last line. READY only when the end's sequence ran and wrote the
        marker: a decision without blockers whose end never finished (pytest's
        JUnit writer raised after it) is NOT READY (MARK-1)."""
        if self.said is None:
            return ["NOT READY: 1 blockers: SUITE-3"]
        if not self.said:
            if not self.ready():
                return ["NOT READY: the end of the run did not finish: no marker written",
                        "NOT READY: 1 blockers: MARK-1"]
            return [terminal.escape(f"READY: marker written {self.setup.marker}")]
        ids = sorted({i for b in self.said for i in b.ids}, key=sort_key)
        last = terminal.escape(f"NOT READY: {len(self.said)} blockers: {' '.join(ids)}")
        cause = rules.preflight_cause(self.setup) or next(iter(self.recorder.not_run.values()), None)
        return ([terminal.escape(f"NOT READY: {cause}")] if cause else []) + [last]

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        """Every line here may carry host text (file names, error texts): each
        goes through terminal.escape (SUITE-4)."""
        st = self.setup
        inv = (f"{st.inventory.file} (host {st.inventory.host})" if st.inventory is not None
               else f"{st.inventory_file} (did not load)")
        lines = [f"inventory: {inv}; marker: {st.marker}",
                 f"MARK-4: {st.removal}", f"SUITE-5: {self.cleaned()}"]
        lines += [startup.SIGINT_IGNORED] if startup.sigint_ignored() else []
        lines += [f"BLOCKER [{' '.join(b.ids)}] {b.reason}" for b in self.said or ()]
        if self.outcome is not None:
            if self.outcome.interrupted:
                lines.append(f"SUITE-5: {self.outcome.interrupted} received at the end of the run, held "
                             "until the end had taken back what it wrote: no marker stands")
            if self.late:
                lines.append(f"SUITE-5: {self.late} received after the marker was written and read back "
                             "and the report said READY: the run had ended")
            lines += self.outcome.matrix
            lines += [f"bundle: {path}" for path in self.outcome.bundle_files]
        terminalreporter.section("root acceptance gate")
        redact = self.redactor()
        for line in lines:
            terminalreporter.line(terminal.escape(redact(line)))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._end_watch()  # a session that never reached its decision
        reports.discard(self.setup.report_private_dir)  # a session that never finished
        tr = config.pluginmanager.get_plugin("terminalreporter")
        redact = self.redactor()
        for line in map(redact, self.summary_lines()):
            if tr is not None:
                tr.write_line(line)
            else:
                print(line)
        guard = runguard.of(config)
        if guard is not None:  # the exit status follows the verdict just said (SUITE-3)
            guard.ready = self.ready()


def _unreadable(text: str) -> str:
    """No host-text plugin to say what is secret: a line that may hold one is not shown."""
    return "<not shown: the suite's redaction is not registered>"
