"""The bench's floor probes, run inside a booted reference host as root
(`python benchprobe.py STOP_TIMEOUT_S RUNTIME_S REPEATS`, cwd = the project):
prints one JSON object of measured seconds.

- bare_start: a bare transient unit with the session unit's hardening
  (Type=exec, so `systemd-run` returns once the command is exec'd): start-to-exec;
- bare_stop: StopUnit of it until its cgroup directory is gone;
- launcher_stop: the same with script(1) around the command, as the reference
  launcher runs it (reported beside the floor, not part of it);
- term_kill: the same unit ignoring SIGTERM and SIGHUP, with the session
  unit's TimeoutStopSec: stop until the cgroup is gone (TERM, wait, KILL);
- runtime_expiry: RuntimeMaxSec= the shortest runtime the suite waits out:
  start until the cgroup is gone;
- supervisor_restart: `systemctl restart` of the supervisor (Type=notify:
  returns once it is ready again);
- build: one clean build of the three binaries as the build user, exactly as
  BUILD-1 makes each of its two (pty_acceptance.provenance.builds.build_once: source copy,
  fresh GOCACHE/GOPATH);
- build_cpu: the CPU seconds (user + system, the build's whole process tree)
  of that build: go build runs in parallel itself, so BUILD-1's two builds side
  by side cannot take less than 2 x build_cpu / cores (reported beside the
  floor, not part of it);
- plugin_runs: PLUGIN-1's eleven harness runs, one after another, at the
  median of a few single runs made exactly as the suite makes them.
Each of the unit probes is repeated and its median kept (the samples too)."""
from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.getcwd(), "acceptance"))

from pty_acceptance.provenance import builds  # noqa: E402
from pty_acceptance.spec import inventory  # noqa: E402
from pty_acceptance.host.programs import ROOT_ENV  # noqa: E402

SYSTEMD_RUN = "/usr/bin/systemd-run"
SYSTEMCTL = "/usr/bin/systemctl"
SCRIPT = "/usr/bin/script"
CGROUP_ROOT = "/sys/fs/cgroup"
SLICE = "opencode-pty.slice"
POLL_S = 0.005
# The reference supervisor's session unit properties (unitProps in cmd/supervisor/unit.go),
# less the descriptors, BindsTo/After and the environment.
HARDENING = [
    "Type=exec", f"Slice={SLICE}", "User=byk", "Group=byk", "CapabilityBoundingSet=",
    "AmbientCapabilities=", "NoNewPrivileges=yes", "PrivateDevices=yes", "DevicePolicy=closed",
    "Delegate=no", "ProtectProc=invisible", "ProcSubset=pid", "RestrictNamespaces=yes",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service", "ProtectSystem=full", "PrivateTmp=yes",
    "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes", "LockPersonality=yes", "RestrictSUIDSGID=yes",
    "RestrictRealtime=yes", "KillMode=control-group", "CollectMode=inactive-or-failed",
    "SupplementaryGroups=", "InaccessiblePaths=/run/opencode-pty -/run/dbus -/run/user",
    "WorkingDirectory=/home/byk",
]


def _run(argv: list[str]) -> None:
    r = subprocess.run(argv, env=ROOT_ENV, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")


def _start(unit: str, props: list[str], argv: list[str]) -> str:
    args = [SYSTEMD_RUN, "--quiet", f"--unit={unit}"]
    for p in props:
        args += ["-p", p]
    _run(args + ["--", *argv])
    r = subprocess.run([SYSTEMCTL, "show", "-P", "ControlGroup", unit], env=ROOT_ENV,
                       capture_output=True, timeout=30)
    cg = r.stdout.decode().strip()
    if not cg:
        raise RuntimeError(f"{unit}: no ControlGroup after start")
    return CGROUP_ROOT + cg


def _wait_gone(path: str, deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while os.path.exists(path):
        if time.monotonic() >= end:
            raise RuntimeError(f"{what}: {path} still existed {deadline_s:g} s later")
        time.sleep(POLL_S)  # poll interval, not a wait for an outcome


def _start_and_stop(prefix: str, argv: list[str]) -> tuple[float, float]:
    """A unit with the session hardening running argv: (start-to-exec,
    StopUnit until its cgroup is gone), in seconds."""
    unit = f"{prefix}-{secrets.token_hex(4)}.service"
    t0 = time.monotonic()
    cg = _start(unit, HARDENING + ["TimeoutStopSec=5"], argv)
    started = time.monotonic() - t0
    t1 = time.monotonic()
    _run([SYSTEMCTL, "stop", unit])
    _wait_gone(cg, 30, f"{unit} stopped")
    return started, time.monotonic() - t1


def bare(repeats: int) -> tuple[list[float], list[float]]:
    runs = [_start_and_stop("ptybench-bare", ["/bin/sleep", "60"]) for _ in range(repeats)]
    return [a for a, _ in runs], [b for _, b in runs]


def launcher_stop(repeats: int) -> list[float]:
    """The same unit running what the reference launcher execs, script(1)
    around the command: StopUnit until its cgroup is gone. script(1) answers
    SIGTERM with "Session terminated, killing shell..." and 2 s of waiting
    (TARGET-CONTRACT section 1): the target's own share of every session stop,
    which a bare unit does not pay."""
    argv = [SCRIPT, "-q", "-e", "-f", "-c", "exec /bin/sleep 60", "/dev/null"]
    return [_start_and_stop("ptybench-script", argv)[1] for _ in range(repeats)]


def _wait_exec(unit: str, comm: str, deadline_s: float = 30) -> None:
    """Until the unit's main process runs `comm`: systemd-run (Type=exec)
    returns once /bin/sh is exec'd, before the shell has run its `trap`, and a
    stop sent then kills the shell at once (a TERM-to-KILL of 0.01 s)."""
    end = time.monotonic() + deadline_s
    seen = ""
    while time.monotonic() < end:
        r = subprocess.run([SYSTEMCTL, "show", "-P", "MainPID", unit], env=ROOT_ENV, capture_output=True, timeout=30)
        pid = r.stdout.decode().strip()
        try:
            seen = open(f"/proc/{pid}/comm", encoding="ascii").read().strip() if pid not in ("", "0") else ""
        except OSError:
            seen = ""
        if seen == comm:
            return
        time.sleep(POLL_S)  # poll interval, not a wait for an outcome
    raise RuntimeError(f"{unit}: its main process still ran {seen or 'nothing'!r}, not {comm!r}, "
                       f"{deadline_s:g} s later")


def term_kill(stop_timeout_s: float) -> float:
    unit = f"ptybench-term-{secrets.token_hex(4)}.service"
    cg = _start(unit, HARDENING + [f"TimeoutStopSec={stop_timeout_s:g}"],
                ["/bin/sh", "-c", "trap '' TERM HUP; exec /bin/sleep 60"])
    _wait_exec(unit, "sleep")  # the trap has run: TERM and HUP are ignored by what runs now
    t0 = time.monotonic()
    _run([SYSTEMCTL, "stop", unit])
    _wait_gone(cg, stop_timeout_s + 30, f"{unit} stopped")
    took = time.monotonic() - t0
    if took < stop_timeout_s:  # what ignores TERM and HUP ends only at the KILL
        raise RuntimeError(f"{unit} was gone {took:.3f} s after its stop, before its TimeoutStopSec="
                           f"{stop_timeout_s:g}: it did not ignore the stop")
    return took


def runtime_expiry(runtime_s: float) -> float:
    unit = f"ptybench-runtime-{secrets.token_hex(4)}.service"
    t0 = time.monotonic()
    cg = _start(unit, HARDENING + [f"RuntimeMaxSec={runtime_s:g}", "TimeoutStopSec=5"],
                ["/bin/sleep", "60"])
    _wait_gone(cg, runtime_s + 30, f"{unit} at its RuntimeMaxSec")
    return time.monotonic() - t0


def supervisor_restart(name: str) -> float:
    t0 = time.monotonic()
    _run([SYSTEMCTL, "restart", name])
    return time.monotonic() - t0


PLUGIN_RUNS = 11  # PLUGIN-1: the harness ten times in a row, then once against BUILD-1's fresh helper


def plugin_runs(inv, repeats: int) -> list[float]:
    """One harness run as PLUGIN-1 makes it (smoke.run: the cell's bun and
    harness, its args, as the service user in a unit of its own, fresh
    working directory and HOME, seeing the source manifest's copies where the
    trees are), `repeats` times. Its own waits (a 1 s session
    runtime, a 1 s HELLO timeout to a mute listener...) are the pilot
    harness's, and the requirement runs it in a row: the suite cannot make
    these runs shorter or overlap them."""
    from pty_acceptance.candidate import smoke
    from pty_acceptance.provenance import source_copy
    p = inv.plugin
    checked = smoke.preflight(inv)
    source = source_copy.make(inv.pilot_root, inv.code_root, inv.tree_bounds())
    cell = None
    samples = []
    try:
        seen = smoke.view(source, inv.source_manifest_sha256, p, checked.account)
        cell = smoke.stage(checked, p, smoke.limits(inv)[0])
        for i in range(repeats):
            r = smoke.run(cell, seen, f"bench {i}",
                          smoke.fill(list(p.args), inv.binaries.client.path, smoke.WORK_INSIDE),
                          checked.account, p.deadline_s)
            why = smoke.judge(r, p.success)
            if why:
                raise RuntimeError(f"the plugin harness failed in the floor probe: {'; '.join(why)}")
            samples.append(r.ended.duration_s)
    finally:
        if cell is not None:
            smoke.unstage(cell)
        source_copy.remove(source)
    return samples


def build(inv) -> tuple[float, float]:
    """(wall, CPU) seconds of one clean build; CPU counts every process of it
    (go and its compilers run in the build's units: systemd's count of them)."""
    acct = builds._account(inv.build.user)
    t0 = time.monotonic()
    made = builds.build_once(inv, acct, "bench")
    took = time.monotonic() - t0
    subprocess.run(["/bin/rm", "-rf", "--", made.directory], env=ROOT_ENV, check=False)
    return took, made.cpu_s


def main(argv: list[str]) -> int:
    stop_timeout_s, runtime_s, repeats = float(argv[0]), float(argv[1]), int(argv[2])
    inv = inventory.load("inventories/reference.yml")
    starts, stops = bare(repeats)
    script_stops = launcher_stop(min(repeats, 3))
    out = {
        "launcher_stop": statistics.median(script_stops), "launcher_stop_samples": script_stops,
        "bare_start": statistics.median(starts), "bare_start_samples": starts,
        "bare_stop": statistics.median(stops), "bare_stop_samples": stops,
        "term_kill": term_kill(stop_timeout_s), "stop_timeout_s": stop_timeout_s,
        "runtime_expiry": runtime_expiry(runtime_s), "runtime_s": runtime_s,
        "supervisor_restart": supervisor_restart(inv.units.supervisor),
    }
    out["build"], out["build_cpu"] = build(inv)
    plugin = plugin_runs(inv, min(repeats, 3))
    out.update(plugin_runs=PLUGIN_RUNS * statistics.median(plugin), plugin_run_samples=plugin)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
