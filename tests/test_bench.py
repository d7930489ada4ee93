"""The bench's arithmetic: module windows, sessions per module from the
journal, floors, medians, the table and its goals."""
import json
import pathlib

import pytest

from tests.refhost import bench

PROBE = {"bare_start": 0.1, "bare_stop": 0.02, "term_kill": 5.2, "runtime_expiry": 2.25,
         "supervisor_restart": 0.2, "build": 12.0}


def clock(*phases):
    return {"session": [0, 100], "phases": [list(p) for p in phases]}


def journal(*entries):
    return "\n".join(json.dumps(e) for e in entries).encode()


def started(unit, t, **kw):
    return {"UNIT": unit, "JOB_TYPE": "start", "__REALTIME_TIMESTAMP": str(int(t * 1e6)), **kw}


UNIT_A = "opencode-pty-" + "a" * 32 + ".service"
UNIT_B = "opencode-pty-" + "b" * 32 + ".service"


def test_a_module_spans_its_first_setup_to_its_last_teardown():
    c = clock(("acceptance/test_a.py::t1", "setup", 10.0, 11.0),
              ("acceptance/test_a.py::t1", "call", 11.0, 12.0),
              ("acceptance/test_a.py::t2[x]", "teardown", 13.0, 16.5),  # module fixture teardown
              ("acceptance/test_b.py::t", "setup", 16.5, 17.0),
              ("acceptance/test_b.py::t", "teardown", 17.0, 18.0))
    assert bench.module_windows(c) == {"acceptance/test_a.py": (10.0, 16.5),
                                       "acceptance/test_b.py": (16.5, 18.0)}


def test_only_session_unit_starts_count_and_go_to_their_module():
    j = journal(started(UNIT_A, 10.5), started(UNIT_B, 17.5),
                started("opencode-v2.service", 10.6),  # the peer: not a session
                started("opencode-pty-supervisor.service", 10.7),
                {"UNIT": UNIT_A, "MESSAGE": "Stopped", "JOB_TYPE": "stop",
                 "__REALTIME_TIMESTAMP": "11000000"},
                started(UNIT_B, 17.6, MESSAGE="Started"),  # "Starting", then "Started": one session
                "not json")
    starts = bench.session_starts(j)
    assert starts == {UNIT_A: 10.5, UNIT_B: 17.5}
    starts = sorted(starts.values()) + [30.0]
    win = {"acceptance/test_a.py": (10.0, 16.5), "acceptance/test_b.py": (16.5, 18.0)}
    assert bench.assign(starts, win) == {"acceptance/test_a.py": 1, "acceptance/test_b.py": 1,
                                         bench.OUTSIDE: 1}


def test_a_failed_start_is_a_session_too():
    j = journal({"UNIT": UNIT_B, "MESSAGE_ID": "be02cf6855d2428ba40df7e9d022f03d",
                 "__REALTIME_TIMESTAMP": "30000000"})
    assert bench.session_starts(j) == {UNIT_B: 30.0}


def test_one_run_keeps_what_is_outside_the_tests():
    c = clock(("acceptance/test_a.py::t", "setup", 10.0, 14.0))
    r = bench.one_run(c, journal(started(UNIT_A, 12)), wall_s=6.0, status=0)
    assert r["modules"] == {"acceptance/test_a.py": 4.0, bench.OUTSIDE: 2.0}
    assert r["sessions"] == {"acceptance/test_a.py": 1, bench.OUTSIDE: 0}


def test_floor_is_sessions_times_a_bare_unit_plus_the_forced_waits():
    f = bench.floors(PROBE, {"acceptance/test_concurrency.py": 10, "acceptance/test_x.py": 0,
                             "acceptance/test_builds.py": 0})
    assert f["acceptance/test_concurrency.py"] == pytest.approx(10 * 0.12 + 5.2 + 0.2)
    assert f["acceptance/test_x.py"] == 0
    assert f["acceptance/test_builds.py"] == 12.0


def test_the_plugin_harness_runs_are_plugin_1s_floor_and_an_older_bench_has_none():
    f = bench.floors(dict(PROBE, plugin_runs=26.4), {"acceptance/test_plugin.py": 0})
    assert f["acceptance/test_plugin.py"] == pytest.approx(26.4)
    assert bench.floors(PROBE, {"acceptance/test_plugin.py": 0})["acceptance/test_plugin.py"] == 0


def run(total, a, b, sessions_a=2):
    return {"status": 0, "total": total, "modules": {"acceptance/test_a.py": a, "acceptance/test_b.py": b},
            "sessions": {"acceptance/test_a.py": sessions_a, "acceptance/test_b.py": 0}}


def test_summary_is_the_median_of_the_runs_and_judges_both_goals():
    s = bench.summarize(PROBE, [run(30, 1.0, 5.0), run(90, 9.0, 1.0), run(31, 2.0, 3.0)],
                        forced={"acceptance/test_b.py": ("build",)})
    rows = {r["module"]: r for r in s["rows"]}
    assert rows["acceptance/test_a.py"]["median"] == 2.0
    assert rows["acceptance/test_a.py"]["floor"] == pytest.approx(0.24)
    assert rows["acceptance/test_b.py"]["median"] == 3.0
    assert rows["acceptance/test_b.py"]["ratio"] == pytest.approx(3.0 / 12.0)
    assert s["total"] == 31
    assert s["total_floor"] == pytest.approx(12.24)
    assert s["goals"] == {"total <= 1.5 x floor": False, "total <= 40 s": True}
    text = bench.table(s)
    assert "acceptance/test_b.py" in text and "goal total <= 1.5 x floor: NOT met" in text
    assert text.splitlines()[-3].startswith("total")


def test_the_launchers_stop_is_shown_beside_the_floor_not_in_it():
    probe = dict(PROBE, launcher_stop=2.02)
    s = bench.summarize(probe, [run(30, 1.0, 5.0, sessions_a=10)], forced={"acceptance/test_b.py": ("build",)})
    assert s["total_floor"] == pytest.approx(10 * 0.12 + 12.0)  # the floor, unchanged
    t = s["launcher"]
    assert t["extra_per_session"] == pytest.approx(2.0) and t["sessions"] == 10
    assert t["at_most"] == pytest.approx(20.0)
    assert "the launcher's stop (script(1)) takes 2.02 s, 2.00 s more than a bare unit's; at most 20.0 s" \
        in bench.table(s)
    assert "launcher" not in bench.summarize(PROBE, [run(30, 1.0, 5.0)])  # an older bench's JSON


def test_a_module_without_floor_has_no_ratio_and_runs_must_agree():
    s = bench.summarize(PROBE, [run(5, 1, 1, sessions_a=0)], forced={})
    assert all(r["ratio"] is None for r in s["rows"]) and s["total_ratio"] is None
    other = run(5, 1, 1)
    other["modules"]["acceptance/test_c.py"] = 1
    with pytest.raises(bench.BenchError):
        bench.summarize(PROBE, [run(5, 1, 1), other])
    with pytest.raises(bench.BenchError):
        bench.summarize(PROBE, [])


GO_UNIT = """package main

const (
\t// TimeoutStopSec of a session unit
\tstopTimeoutUSec = 5_000_000
)

func whatIfs(faults map[string]bool) bool { return faults["session-stop-sendsighup"] }
"""


def test_the_stop_timeout_is_read_from_the_reference_supervisor(tmp_path):
    with pytest.raises(bench.BenchError, match="cannot read"):
        bench.stop_timeout_s(tmp_path)
    (tmp_path / bench.SUPERVISOR_SRC).parent.mkdir(parents=True)
    (tmp_path / bench.SUPERVISOR_SRC).write_text(GO_UNIT)
    assert bench.stop_timeout_s(tmp_path) == 5.0
    (tmp_path / bench.SUPERVISOR_SRC).write_text("const stopTimeoutUSec uint64 = 2_500_000 // typed\n")
    assert bench.stop_timeout_s(tmp_path) == 2.5
    (tmp_path / bench.SUPERVISOR_SRC).write_text("STOP_TIMEOUT_USEC = 5_000_000\n")  # the Python one's
    with pytest.raises(bench.BenchError, match="no stopTimeoutUSec"):
        bench.stop_timeout_s(tmp_path)


@pytest.mark.skipif(not (pathlib.Path(__file__).resolve().parents[1] / bench.SUPERVISOR_SRC).exists(),
                    reason=f"the Go supervisor is not written yet ({bench.SUPERVISOR_SRC})")
def test_the_go_supervisor_gives_the_stop_timeout_and_knows_every_what_if():
    root = pathlib.Path(__file__).resolve().parents[1]
    assert bench.stop_timeout_s(root) == 5.0
    text = (root / bench.SUPERVISOR_SRC).read_text()
    for word in bench.WHAT_IFS:  # the reference supervisor acts on every what-if
        assert f'"{word}"' in text


def test_benchclock_writes_every_phase(pytester, monkeypatch):
    out = pytester.path / "clock.json"
    monkeypatch.setenv("PTY_BENCH_CLOCK", str(out))
    pytester.makepyfile(test_m="def test_one():\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    r = pytester.runpytest_subprocess("-p", "tests.refhost.benchclock", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    data = json.loads(out.read_text())
    assert [p[1] for p in data["phases"]] == ["setup", "call", "teardown"]
    assert all(p[0] == "test_m.py::test_one" and p[2] <= p[3] for p in data["phases"])


def test_the_table_is_made_again_from_a_json(tmp_path, capsys):
    f = tmp_path / "b.json"
    f.write_text(json.dumps({"probe": PROBE, "runs": [run(30, 1.0, 5.0)], "valid": True,
                             "load_start": "1", "load_end": "2", "commit": "c"}))
    assert bench.retable(f) == 0
    assert "acceptance/test_a.py" in capsys.readouterr().out
    f.write_text(json.dumps({"error": "deployment failed (3)"}))
    assert bench.retable(f) == 1


def test_a_snapshot_is_the_commit_with_this_checkouts_tools(tmp_path):
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    bench.snapshot(root, tmp_path / "s", "e246a3c")  # before the bench existed
    assert (tmp_path / "s/acceptance/test_builds.py").is_file()
    for tool in bench.TOOLS:
        assert (tmp_path / "s" / tool).read_bytes() == (root / tool).read_bytes()
    assert "build_sets" not in (tmp_path / "s/acceptance/pty_acceptance/builds.py").read_text()
    # the clock is named by the snapshot's root conftest, never with -p (a SUITE-3 blocker since
    # the gate refuses plugins the checkout does not name: every bench run ended NOT READY)
    conftest = (tmp_path / "s/conftest.py").read_text()
    assert conftest.endswith(bench.CLOCK_LINE)
    named: dict = {"pytest_plugins": ["pty_acceptance.gate.plugin"]}
    exec(bench.CLOCK_LINE, named)  # noqa: S102 - the line the bench appends, alone
    assert named["pytest_plugins"] == ["pty_acceptance.gate.plugin", "tests.refhost.benchclock"]
    import inspect
    source = inspect.getsource(bench._suite)  # the suite's argv names no plugin
    assert '"tests.refhost.benchclock"' not in source and "CLOCK_PLUGIN" not in source
    with pytest.raises(bench.BenchError):
        bench.snapshot(root, tmp_path / "t", "no-such-rev")


def test_build_1s_floor_is_its_two_builds_cpu_on_these_cores():
    """Issue 32 item 7: the floor counted one build's wall time while BUILD-1's
    two builds side by side need twice one build's CPU on the cores: the
    floor counts what the requirement forces, so the ratio measures the suite alone."""
    probe = dict(PROBE, build=12.0, build_cpu=17.6)
    builds = {"acceptance/test_builds.py": 0}
    assert bench.floors(probe, builds, cores=2)["acceptance/test_builds.py"] == pytest.approx(17.6)
    assert bench.floors(probe, builds, cores=8)["acceptance/test_builds.py"] == pytest.approx(12.0)  # the wall
    assert bench.floors(PROBE, builds, cores=2)["acceptance/test_builds.py"] == 12.0  # an older bench: no CPU
    s = bench.summarize(probe, [run(30, 1.0, 20.0)], forced={"acceptance/test_b.py": bench.FORCED[
        "acceptance/test_builds.py"]}, cores=2)
    row = {r["module"]: r for r in s["rows"]}["acceptance/test_b.py"]
    assert row["floor"] == pytest.approx(17.6) and row["ratio"] == pytest.approx(20.0 / 17.6)
    assert s["build_cpu"] == {"per_build": 17.6, "cores": 2, "double_at_least": pytest.approx(17.6)}
    assert "in the floor: one build uses 17.60 s of CPU, so BUILD-1's two side by side take at least 17.60 s " \
        "on 2 cores" in bench.table(s)
    assert "build_cpu" not in bench.summarize(PROBE, [run(30, 1.0, 5.0)])  # an older bench's JSON


def test_the_floor_probes_alone_are_runs_0_and_the_counts_are_checked(tmp_path, capsys):
    for kw in ({"runs": 0, "warmup": 1}, {"runs": 0, "warmup": 0, "what_if": "session-stop-sendsighup"},
               {"runs": -1}, {"repeats": 0}):
        assert bench.run_bench(tmp_path, **kw) == 2, kw
        assert "--runs 0: the floor probes alone" in capsys.readouterr().err
    lines = bench.probe_lines(dict(PROBE, build_cpu=17.6), 2)
    assert "probe bare_start: 0.100 s" in lines
    assert "forced wait of acceptance/test_builds.py: 17.60 s (builds)" in lines
    assert "forced wait of acceptance/test_concurrency.py: 5.40 s (term_kill + supervisor_restart)" in lines


def test_a_what_if_is_known_and_its_supervisor_must_know_it(tmp_path, capsys):
    assert bench.run_bench(tmp_path, what_if="no-such-what-if") == 2
    assert "unknown what-if" in capsys.readouterr().err

    class NoMachine:
        def run(self, argv, **kw):
            raise AssertionError("nothing may run for a what-if the supervisor does not know")

    class Machine:
        ran: list = []

        def run(self, argv, **kw):
            self.ran.append(argv)
            return type("R", (), {"returncode": 0, "stdout": b""})()

    with pytest.raises(bench.BenchError, match="has no what-if"):  # no unit.go: an older commit's
        bench.switch_on(NoMachine(), tmp_path, "session-stop-sendsighup")
    (tmp_path / bench.SUPERVISOR_SRC).parent.mkdir(parents=True)
    (tmp_path / bench.SUPERVISOR_SRC).write_text("package main\n")  # a Go supervisor without it
    with pytest.raises(bench.BenchError, match="has no what-if"):
        bench.switch_on(NoMachine(), tmp_path, "session-stop-sendsighup")
    (tmp_path / bench.SUPERVISOR_SRC).write_text(GO_UNIT)
    m = Machine()
    bench.switch_on(m, tmp_path, "session-stop-sendsighup")
    assert m.ran and "session-stop-sendsighup" in " ".join(m.ran[0])


def test_no_fault_of_the_catalogue_is_a_what_if():
    from tests.mutants import catalogue
    words = {w for f in catalogue.FAULTS for w in f.supervisor}
    assert "capacity17" in words  # the catalogue is read right
    assert not words & set(bench.WHAT_IFS)
