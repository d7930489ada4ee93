"""`pty-acceptance bench`: the suite's wall time against the floor the
requirements impose, measured on ONE booted reference host in the same run.

1. Boot, deploy (tests/reference/deploy.sh), then the floor probes inside
   (benchprobe.py): a bare hardened transient unit's start-to-exec and
   stop-to-cgroup-gone, TERM-to-KILL at the session unit's TimeoutStopSec, the
   shortest runtime expiry the suite waits out, a supervisor restart, one clean
   build of the three binaries.
2. The suite `warmup` times (not counted: "warm" = the same booted host has run
   the whole suite once, page cache and units loaded), then `runs` times; each
   run with benchclock.py (per-test phase times) and its own report directory.
   Sessions opened = the session units (opencode-pty-<32 hex>) whose start job
   PID 1 logged in the journal during the run, each unit counted once and
   given to the module whose first-setup..last-teardown window holds its
   first entry.
3. Per module: floor = sessions x (bare start + bare stop) + the forced waits
   FORCED names for it; median of the runs; ratio = median / floor. Total: the
   pytest process's wall time (median), floor = the sum of the module floors;
   "(outside tests)" is collection, start-up and the gate's end. BUILD-1's
   forced wait is its two builds side by side on this machine's cores: at
   least one build's wall time, and at least their CPU time over the cores
   (go build is parallel itself: 2 x one build's CPU / cores), so that the
   ratio measures the suite alone.
With runs=0 (and no warm-up) the bench stops after the floor probes and
prints them: the probe path in a few minutes (tests/test_bench_probe.py).
The guest runs a snapshot of the checkout's HEAD (git archive), never the
live checkout, with this checkout's probe and clock (TOOLS), the clock named
in its root conftest (CLOCK_LINE): a run the bench counts must end READY.
Printed as a table and written to reports/bench/<run id>.json (the runs'
outputs beside it in reports/bench/<run id>/). A run that fails makes the bench
fail (exit 1): its times are kept but no verdict is given on them.
Beside the floor, not in it: the launcher's stop (script(1) sleeps 2 s after
a caught SIGTERM).
`what_if` (WHAT_IFS) switches a variant of the reference deployment on after
the floor probes: the suite's time on it, against the same floor."""
from __future__ import annotations

import io
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tarfile
import time

from . import benchclock, nodedist, npmdist, pinnedvenv
from .common import supervisor_switch_lines
from .machine import WORK_ROOT, Machine, MachineError, log
from .run import DEPLOY, EXIT_SETUP_FAILED, GUEST_OUT, GUEST_PYTHON, GUEST_SRC, new_run_id
from .tree import ensure_tree

# The Go supervisor's unit settings (the bench deploys the default, go): its
# `stopTimeoutUSec = 5_000_000` and every what-if word as a Go string literal.
SUPERVISOR_SRC = "tests/reference/src/supervisor/cmd/supervisor/unit.go"
STOP_TIMEOUT_RE = re.compile(r"^\s*(?:const\s+)?stopTimeoutUSec(?:\s+[A-Za-z0-9_]+)?\s*=\s*([0-9_]+)\b", re.M)
# The shortest runtime the suite waits to expire: ENDINGS "runtime expiry" in
# test_concurrency.py and PATHS in test_cgroups.py (2 s).
SHORTEST_RUNTIME_S = 2
# What-ifs: a variant of the reference deployment the suite must still pass,
# switched on in the reference supervisor (its faults file) after the floor
# probes, so that the bench shows what a contract decision would buy. The floor
# is the same; the JSON and the table say which what-if ran.
WHAT_IFS = {
    "session-stop-sendsighup": "session units with SendSIGHUP=yes: SIGHUP right after a stop's SIGTERM, "
                               "so the launcher's script(1) dies at once instead of sleeping 2 s "
                               "after the SIGTERM it caught",
}
GOAL_RATIO = 1.5
GOAL_TOTAL_S = 40.0
OUTSIDE = "(outside tests)"
SESSION_UNIT = re.compile(r"^opencode-pty-[0-9a-f]{32}\.service$")
START_DONE_IDS = {"39f53479d3a045ac8e11786248231fbf", "be02cf6855d2428ba40df7e9d022f03d"}
# The forced waits each module's requirements impose (probe names). The
# endings of test_concurrency run side by side, so its runtime expiry (2 s)
# overlaps its TERM-to-KILL and only the longer counts; its second forced
# wait is the supervisor stopped and started again (CONC-2).
# Not counted anywhere: the reference session's own stop time (script(1)
# sleeps 2 s after SIGTERM before it kills its child): the floor's per-session
# stop is a bare unit's.
FORCED = {
    # BUILD-1: the two builds side by side (builds_side_by_side: their CPU on these cores)
    "acceptance/test_builds.py": ("builds",),
    "acceptance/test_cgroups.py": ("runtime_expiry",),
    "acceptance/test_concurrency.py": ("term_kill", "supervisor_restart"),
    "acceptance/test_orphans.py": ("supervisor_restart",),
    # FLOOD-4: a STOP under saturated output ends at the stop timeout's SIGKILL
    "acceptance/test_flood.py": ("term_kill",),
    # CONC-3: a command that ignores SIGTERM lives until the stop timeout's SIGKILL
    "acceptance/test_stops.py": ("term_kill",),
    # PLUGIN-1: the pilot's harness, ten times in a row and once more
    "acceptance/test_plugin.py": ("plugin_runs",),
}


class BenchError(RuntimeError):
    pass


# ------------------------------------------------------------------ logic
def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def module_windows(clock: dict) -> dict[str, tuple[float, float]]:
    """module -> (first phase start, last phase stop), from benchclock's JSON."""
    win: dict[str, tuple[float, float]] = {}
    for nodeid, _when, start, stop in clock["phases"]:
        m = module_of(nodeid)
        a, b = win.get(m, (start, stop))
        win[m] = (min(a, start), max(b, stop))
    return win


def session_starts(journal_json: bytes) -> dict[str, float]:
    """Session unit -> realtime seconds of its first start-job entry PID 1 logged
    (journalctl -o json). Each start logs two ("Starting", then "Started" or
    "Failed"), both with JOB_TYPE=start: a session is its unit name, counted once."""
    out: dict[str, float] = {}
    for line in journal_json.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if not isinstance(e, dict):
            continue
        unit = e.get("UNIT")
        if not isinstance(unit, str) or not SESSION_UNIT.match(unit):
            continue
        if e.get("JOB_TYPE") == "start" or e.get("MESSAGE_ID") in START_DONE_IDS:
            t = int(e["__REALTIME_TIMESTAMP"]) / 1e6
            out[unit] = min(t, out.get(unit, t))
    return out


def assign(starts: list[float], windows: dict[str, tuple[float, float]]) -> dict[str, int]:
    counts = {m: 0 for m in windows}
    counts[OUTSIDE] = 0
    for t in starts:
        m = next((m for m, (a, b) in windows.items() if a <= t <= b), OUTSIDE)
        counts[m] += 1
    return counts


def one_run(clock: dict, journal_json: bytes, wall_s: float, status: int) -> dict:
    win = module_windows(clock)
    modules = {m: b - a for m, (a, b) in win.items()}
    modules[OUTSIDE] = max(0.0, wall_s - sum(modules.values()))
    starts = session_starts(journal_json)
    return {"status": status, "total": wall_s, "modules": modules,
            "sessions": assign(sorted(starts.values()), win), "session_units": len(starts)}


def derived(probe: dict, cores: int | None) -> dict:
    """The probes, and what the requirements force from them on `cores`:
    `builds`, BUILD-1's two builds side by side (build_cpu_share). A bench
    before build_cpu was probed counts one build's wall time."""
    out = dict(probe)
    if "build" in probe:
        out["builds"] = build_cpu_share(probe, cores)["double_at_least"] if "build_cpu" in probe else probe["build"]
    return out


def floors(probe: dict, sessions: dict[str, int], forced=FORCED, cores: int | None = None) -> dict[str, float]:
    per_session = probe["bare_start"] + probe["bare_stop"]
    waits = derived(probe, cores)
    # a probe an older bench did not make counts 0 (its JSON is retabled as it was)
    return {m: n * per_session + sum(waits.get(w, 0.0) for w in forced.get(m, ())) for m, n in sessions.items()}


def _median(values: list[float]) -> float:
    return statistics.median(values)


def summarize(probe: dict, runs: list[dict], forced=FORCED, cores: int | None = None) -> dict:
    """Median per module over the counted runs, its floor and ratio; the total."""
    if not runs:
        raise BenchError("no counted run")
    names = list(runs[0]["modules"])
    for r in runs[1:]:
        if set(r["modules"]) != set(names):
            raise BenchError(f"the runs ran different modules: {sorted(set(r['modules']) ^ set(names))}")
    sessions = {m: int(_median([r["sessions"].get(m, 0) for r in runs])) for m in names}
    floor = floors(probe, sessions, forced, cores)
    rows = []
    for m in names:
        med = _median([r["modules"][m] for r in runs])
        rows.append({"module": m, "sessions": sessions[m], "floor": floor[m], "median": med,
                     "ratio": med / floor[m] if floor[m] > 0 else None})
    total = _median([r["total"] for r in runs])
    total_floor = sum(floor.values())
    out = {"rows": rows, "total": total, "total_floor": total_floor,
           "total_ratio": total / total_floor if total_floor > 0 else None,
           "goals": {f"total <= {GOAL_RATIO:g} x floor": total <= GOAL_RATIO * total_floor,
                     f"total <= {GOAL_TOTAL_S:g} s": total <= GOAL_TOTAL_S}}
    if "launcher_stop" in probe:  # benches before it was probed have none
        out["launcher"] = launcher_share(probe, sum(sessions.values()))
    if "build_cpu" in probe:
        out["build_cpu"] = build_cpu_share(probe, cores)
    return out


def build_cpu_share(probe: dict, cores: int | None) -> dict:
    """What BUILD-1's two builds side by side cost at the least on `cores`:
    go build is parallel itself, so two at once share the cores, they do not
    each take one."""
    n = max(1, cores or 1)
    return {"per_build": probe["build_cpu"], "cores": n,
            "double_at_least": max(probe.get("build", 0.0), 2 * probe["build_cpu"] / n)}


def launcher_share(probe: dict, sessions: int) -> dict:
    """What the target's own session stop (script(1) in the reference
    launcher) costs over a bare unit's, per session, and for all sessions if
    each were stopped one after another: an upper bound, not a floor (a
    session whose command exits pays nothing, and stops side by side overlap).
    That part of the total no change to the suite removes, only one to the
    launcher or to the contract's stop signal."""
    extra = max(0.0, probe["launcher_stop"] - probe["bare_stop"])
    return {"per_session": probe["launcher_stop"], "extra_per_session": extra,
            "sessions": sessions, "at_most": sessions * extra}


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(summary: dict) -> str:
    w = max([len(r["module"]) for r in summary["rows"]] + [len("total")])
    lines = [f"{'module':<{w}}  {'sessions':>8}  {'floor s':>8}  {'median s':>8}  {'ratio':>6}"]
    for r in summary["rows"]:
        lines.append(f"{r['module']:<{w}}  {r['sessions']:>8}  {_num(r['floor']):>8}  "
                     f"{_num(r['median']):>8}  {_num(r['ratio']):>6}")
    lines.append(f"{'total':<{w}}  {sum(r['sessions'] for r in summary['rows']):>8}  "
                 f"{_num(summary['total_floor']):>8}  {_num(summary['total']):>8}  "
                 f"{_num(summary['total_ratio']):>6}")
    lines += [f"goal {g}: {'met' if ok else 'NOT met'}" for g, ok in summary["goals"].items()]
    b = summary.get("build_cpu")
    if b:
        lines.append(f"in the floor: one build uses {b['per_build']:.2f} s of CPU, so BUILD-1's two "
                     f"side by side take at least {b['double_at_least']:.2f} s on {b['cores']} cores "
                     f"(acceptance/test_builds.py's forced wait)")
    t = summary.get("launcher")
    if t:
        lines.append(f"not in the floor: the launcher's stop (script(1)) takes {t['per_session']:.2f} s, "
                     f"{t['extra_per_session']:.2f} s more than a bare unit's; at most "
                     f"{t['at_most']:.1f} s over {t['sessions']} sessions (if each were stopped, one at a time)")
    return "\n".join(lines)


def probe_lines(probe: dict, cores: int | None) -> list[str]:
    """The floor probes alone (runs=0), and the forced waits they make."""
    lines = [f"probe {k}: {v:.3f} s" for k, v in probe.items() if isinstance(v, float)]
    waits = derived(probe, cores)
    lines += [f"forced wait of {m}: {sum(waits.get(w, 0.0) for w in ws):.2f} s ({' + '.join(ws)})"
              for m, ws in FORCED.items()]
    return lines


def what_if_line(word: str) -> str:
    return f"what-if {word}: {WHAT_IFS.get(word, '?')} (not the reference contract)"


def stop_timeout_s(repo_root: pathlib.Path) -> float:
    """The session units' TimeoutStopSec: what the reference supervisor gives them."""
    try:
        text = (repo_root / SUPERVISOR_SRC).read_text()
    except OSError as e:
        raise BenchError(f"cannot read {SUPERVISOR_SRC}: {e.strerror or e}") from None
    m = STOP_TIMEOUT_RE.search(text)
    if not m:
        raise BenchError(f"no stopTimeoutUSec in {SUPERVISOR_SRC}")
    return int(m.group(1).replace("_", "")) / 1e6


def loadavg() -> str:
    return pathlib.Path("/proc/loadavg").read_text().strip()


def git_head(repo_root: pathlib.Path, rev: str = "HEAD") -> str:
    r = subprocess.run(["/usr/bin/git", "-C", str(repo_root), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                       capture_output=True, check=False)
    return r.stdout.decode().strip() or "unknown"


def git_dirty(repo_root: pathlib.Path) -> bool:
    r = subprocess.run(["/usr/bin/git", "-C", str(repo_root), "status", "--porcelain", "--untracked-files=no"],
                       capture_output=True, check=False)
    return bool(r.stdout.strip()) or r.returncode != 0


TOOLS = ("tests/refhost/benchclock.py", "tests/refhost/benchprobe.py")
CLOCK_PLUGIN = "tests.refhost.benchclock"
# Appended to the snapshot's root conftest: the checkout names the clock, so that
# the run earns READY as the operator's does (a plugin given with -p is a SUITE-3
# blocker: gate/invocation.py), and the bench measures READY runs.
CLOCK_LINE = (f'\npytest_plugins = [*globals().get("pytest_plugins", ()), "{CLOCK_PLUGIN}"]'
              "  # the bench's clock (tests/refhost/bench.py snapshot)\n")


def snapshot(repo_root: pathlib.Path, dest: pathlib.Path, rev: str = "HEAD") -> None:
    """The committed tree of `rev` (git archive) in dest: the guest runs what the
    bench names, and edits in the checkout meanwhile do not reach it. The
    measuring tools (TOOLS) are this checkout's, so an older commit is measured
    the same way."""
    r = subprocess.run(["/usr/bin/git", "-C", str(repo_root), "archive", "--format=tar", rev, "--"],
                       capture_output=True, check=False)
    if r.returncode != 0:
        raise BenchError(f"git archive {rev} failed: {r.stderr.decode(errors='replace')}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as t:
        t.extractall(dest, filter="tar")
    for tool in TOOLS:
        (dest / tool).parent.mkdir(parents=True, exist_ok=True)
        (dest / tool).write_bytes((repo_root / tool).read_bytes())
    conftest = dest / "conftest.py"
    if not conftest.is_file():
        raise BenchError(f"{rev} has no root conftest.py: the bench's clock cannot be named")
    with conftest.open("a", encoding="utf-8") as f:
        f.write(CLOCK_LINE)


def retable(path: pathlib.Path) -> int:
    """The table again from a bench's JSON, with this checkout's FORCED."""
    result = json.loads(pathlib.Path(path).read_text())
    if "probe" not in result or not result.get("runs"):
        print(f"{path}: no probe or no counted run: {result.get('error', '')}", file=sys.stderr)
        return 1
    if result.get("what_if"):
        print(what_if_line(result["what_if"]))
    print(table(summarize(result["probe"], result["runs"], cores=result.get("cores"))))
    print(f"load: start {result.get('load_start')} / end {result.get('load_end')}; "
          f"commit {result.get('commit')}; valid {result.get('valid')}")
    return 0 if result.get("valid") else 1


# ------------------------------------------------------------------ on the host
def _suite(m: Machine, i: int, out: pathlib.Path, scratch: pathlib.Path) -> dict:
    guest_dir = f"{GUEST_OUT}/bench/run-{i}"
    (scratch / "bench" / f"run-{i}").mkdir(parents=True)
    # the clock plugin is named by the snapshot's conftest (snapshot): no -p, which would earn a SUITE-3
    # blocker; it writes into the run's report directory (the clean start keeps no variable to name it)
    argv = [GUEST_PYTHON, "-m", "pytest", "-p", "no:cacheprovider",
            "acceptance/", "--inventory", "inventories/reference.yml", "--report-dir", f"{guest_dir}/reports"]
    since = int(time.time()) - 1
    t0 = time.monotonic()
    r = m.run(argv, cwd=GUEST_SRC, env={"PYTHONDONTWRITEBYTECODE": "1"})
    wall = time.monotonic() - t0
    (out / f"suite-output-{i}.txt").write_bytes(r.stdout)
    j = m.run(["/usr/bin/journalctl", "-o", "json", "--no-pager", "--since", f"@{since}", "_PID=1"])
    if j.returncode != 0:
        raise BenchError(f"journalctl failed ({j.returncode}): {j.stderr!r}")
    try:
        data = json.loads((scratch / "bench" / f"run-{i}" / "reports" / benchclock.CLOCK_NAME).read_text())
    except (OSError, ValueError) as e:
        raise BenchError(f"run {i}: no clock from benchclock: {e}") from None
    run = one_run(data, j.stdout, wall, r.returncode)
    last = r.stdout.decode(errors="replace").strip().splitlines()
    log(f"run {i}: {wall:.1f} s, exit status {r.returncode}: {last[-1] if last else '(no output)'}")
    return run


def switch_on(m: Machine, src: pathlib.Path, what_if: str) -> None:
    """The what-if (a WHAT_IFS word: run_bench checks) in the reference
    supervisor's faults file, the supervisor restarted to read it. The
    snapshot's supervisor must know the word (an older commit's may not: its
    unknown words are only logged)."""
    try:
        text = (src / SUPERVISOR_SRC).read_text()
    except OSError:  # an older commit: the Python supervisor, or none
        text = ""
    if f'"{what_if}"' not in text:
        raise BenchError(f"the reference supervisor of this commit has no what-if {what_if!r} "
                         f"(no Go string literal \"{what_if}\" in {SUPERVISOR_SRC})")
    r = m.run(["/bin/sh", "-ec", "\n".join(supervisor_switch_lines([what_if]))])
    if r.returncode != 0:
        raise BenchError(f"switching on {what_if} failed ({r.returncode}): {r.stdout[-2000:]!r}")


def _suites(m: Machine, src: pathlib.Path, out: pathlib.Path, scratch: pathlib.Path, probe: dict, result: dict,
            *, runs: int, warmup: int, what_if: str | None) -> int:
    """The warm-up and counted suite runs on the booted host, the table printed; the exit status."""
    if what_if:
        switch_on(m, src, what_if)  # after the probes: the floor is the reference contract's
        log(what_if_line(what_if))
    warm = [_suite(m, i, out, scratch) for i in range(warmup)]
    counted = [_suite(m, warmup + i, out, scratch) for i in range(runs)]
    result.update(warmup_runs=warm, runs=counted)
    failed = [i for i, r in enumerate(warm + counted) if r["status"] != 0]
    summary = summarize(probe, counted, cores=result["cores"])
    result.update(summary)
    result["valid"] = not failed
    status = 0 if not failed else 1
    if what_if:
        print(what_if_line(what_if))
    print(table(summary))
    if failed:
        print(f"runs {failed} failed: the times are not a verdict (see {out}/suite-output-*.txt)")
    return status


def run_bench(repo_root: pathlib.Path, *, runs: int = 3, warmup: int = 1, repeats: int = 5,
              rev: str = "HEAD", what_if: str | None = None) -> int:
    repo_root = pathlib.Path(repo_root).resolve()
    if what_if is not None and what_if not in WHAT_IFS:
        print(f"bench: unknown what-if {what_if!r}: one of {sorted(WHAT_IFS)}", file=sys.stderr)
        return 2
    if runs < 0 or warmup < 0 or repeats < 1 or runs == 0 and (warmup or what_if):
        print("bench: --runs and --warmup are counts (--runs 0: the floor probes alone, with no warm-up "
              "and no what-if), --repeats at least 1", file=sys.stderr)
        return 2
    load_start = loadavg()
    tree = ensure_tree()
    npmdist.ensure_all()
    nodedist.ensure_sea(repo_root / "tests/reference/src/candidate/server.js")
    run_id = new_run_id()
    root = repo_root / "reports" / "bench"
    out = root / run_id
    out.mkdir(parents=True)
    name = f"ptyacc-bench-{run_id.lower()}"
    scratch = WORK_ROOT / name / "out"
    src = WORK_ROOT / name / "src"
    m = Machine(tree, name=name, console_log=out / "console.log",
                binds=[(str(src), GUEST_SRC, True), (str(scratch), GUEST_OUT, False), *npmdist.binds(),
                       *pinnedvenv.binds(repo_root, tree)])
    result: dict = {"run_id": run_id, "commit": git_head(repo_root, rev), "load_start": load_start,
                    "warmup": warmup, "runs_counted": runs, "cores": os.cpu_count(), "what_if": what_if}
    if rev == "HEAD" and git_dirty(repo_root):
        result["note"] = "the checkout had uncommitted changes: the bench ran the commit, not them"
        log(result["note"])
    status = EXIT_SETUP_FAILED
    try:
        scratch.mkdir(parents=True)
        snapshot(repo_root, src, rev)
        m.boot()
        r = m.run(["/bin/sh", f"{GUEST_SRC}/{DEPLOY}"], cwd=GUEST_SRC)
        if r.returncode != 0:
            (out / "deploy-output.txt").write_bytes(r.stdout)
            raise BenchError(f"deployment failed ({r.returncode})")
        stop_s = stop_timeout_s(src)
        p = m.run([GUEST_PYTHON, f"{GUEST_SRC}/tests/refhost/benchprobe.py", f"{stop_s:g}",
                   str(SHORTEST_RUNTIME_S), str(repeats)], cwd=GUEST_SRC)
        if p.returncode != 0:
            raise BenchError(f"floor probes failed ({p.returncode}): {p.stdout[-2000:]!r} {p.stderr[-2000:]!r}")
        probe = json.loads(p.stdout)
        result["probe"] = probe
        log("floor probes: " + ", ".join(f"{k} {v:.3f} s" for k, v in probe.items() if isinstance(v, float)))
        if runs == 0:  # the floor probes alone
            result.update(valid=True, runs=[])
            for line in probe_lines(probe, result["cores"]):
                print(line)
            status = 0
        else:
            status = _suites(m, src, out, scratch, probe, result, runs=runs, warmup=warmup, what_if=what_if)
    except (BenchError, MachineError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        log(f"bench: {e}")
        result["error"] = str(e)
    finally:
        m.shutdown()  # the scratch directory is in the machine's work dir: removed with it
        result["load_end"] = loadavg()
        (root / f"{run_id}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"load: start {load_start} / end {result['load_end']}")
    print(f"bench {run_id}: exit status {status}; {root / (run_id + '.json')}", file=sys.stderr)
    return status
