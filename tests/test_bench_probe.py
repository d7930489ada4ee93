"""`pty-acceptance bench`'s probe path on a reference host, cheaply (issue 32
item 7): the command itself, `bench --runs 0 --warmup 0 --repeats 1`, boots
one reference host, deploys, runs every floor probe inside it
(tests/refhost/benchprobe.py: the unit probes, one clean build with its CPU
time from its units, PLUGIN-1's harness in the suite's cell) and prints them,
exit status 0, in minutes where the whole bench takes half an hour. The
crash the issue found (benchprobe passing a `Checked` where `smoke.run`
wanted the account) fails here. The guest runs the checkout's HEAD (bench's
snapshot) with this checkout's probe (bench.TOOLS)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

from leftovers import assert_nothing_left

pytestmark = [pytest.mark.refhost]

PROBES = ("bare_start", "bare_stop", "launcher_stop", "term_kill", "runtime_expiry", "supervisor_restart",
          "build", "build_cpu", "plugin_runs")


def test_the_bench_command_runs_every_floor_probe():
    done = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "bench", "--runs", "0", "--warmup", "0",
                           "--repeats", "1"], cwd=REPO, capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL)
    said = done.stdout + done.stderr
    found = re.search(r"^bench (\S+): exit status (\d+); (\S+\.json)$", done.stderr, re.M)
    assert found, said[-4000:]
    run_id, status, path = found.groups()
    assert_nothing_left(f"ptyacc-bench-{run_id.lower()}")
    assert done.returncode == 0 and status == "0", said[-4000:]
    result = json.loads(Path(path).read_text())
    probe = result["probe"]
    for name in PROBES:
        assert isinstance(probe.get(name), float) and probe[name] > 0, (name, probe.get(name))
        assert f"probe {name}: " in done.stdout
    assert len(probe["plugin_run_samples"]) == 1 and result["valid"] is True and result["runs"] == []
    assert "forced wait of acceptance/test_builds.py: " in done.stdout
