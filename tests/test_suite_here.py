"""The real suite on this machine, where no supervisor is installed: it must
fail, name the failing requirement IDs in its last line, write JUnit, remove a
marker placed beforehand and write none (issue: suite foundation). It runs
in a copy of the checkout whose configuration names a run lock of its own
(suitecopy.py: a run refuses `-o pty_acceptance_run_dir=...` at start-up)."""

import subprocess
import sys
import xml.etree.ElementTree as ET

import yaml

from conftest import REPO
from gateproject import earlier_marker
from suitecopy import suite_copy


def filled_target(tmp_path):
    """inventories/target.yml with its pins filled in (units.candidate, runtime.sha256,
    plugin.bun_sha256, plugin.harness_sha256, plugin.success), as an operator would."""
    data = yaml.safe_load((REPO / "inventories/target.yml").read_text())
    data["all"]["hosts"]["pilot"]["runtime"]["sha256"] = "ab" * 32
    data["all"]["hosts"]["pilot"]["units"]["candidate"] = "opencode-v2-candidate.service"
    data["all"]["hosts"]["pilot"]["plugin"].update(bun_sha256="cd" * 32, harness_sha256="ef" * 32,
                                                   success={"last_line": "^PASS ", "result_file": "^r$"})
    path = tmp_path / "target.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_target_inventory_stops_the_run_naming_runtime_1(tmp_path, safe_dir):
    marker = earlier_marker(safe_dir / "etc/opencode/pty-supervisor-verified")
    copy = suite_copy(safe_dir / "checkout", f"{safe_dir}/run")
    done = subprocess.run([sys.executable, "-m", "pytest", "acceptance/", f"--marker={marker}",
                           f"--report-dir={tmp_path / 'reports'}"], cwd=copy, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode != 0, done.stdout + done.stderr
    said = [l for l in done.stdout.splitlines() if "runtime.sha256: FILL-IN 'FILL-IN" in l]
    assert said and "RUNTIME-1" in said[0], done.stdout[-3000:]  # the preflight says so first
    assert done.stdout.strip().splitlines()[-1].startswith("NOT READY: ")
    assert not marker.exists() and "passed" not in done.stdout
    (report,) = (tmp_path / "reports").glob("acceptance-*.xml")  # every run leaves its JUnit
    props = ET.parse(report).getroot().find("./testsuite/properties")
    assert props[0].get("name") == "preflight"  # the report leads with the preflight
    said = [p.get("value") for p in props if p.get("name").split(".")[0] == "preflight"]
    assert any("runtime.sha256: FILL-IN 'FILL-IN" in v for v in said), said


def test_suite_fails_closed_on_a_host_without_the_supervisor(tmp_path, safe_dir):
    marker = earlier_marker(safe_dir / "etc/opencode/pty-supervisor-verified")
    copy = suite_copy(safe_dir / "checkout", f"{safe_dir}/run")
    reports = tmp_path / "reports"
    done = subprocess.run([sys.executable, "-m", "pytest", "acceptance/", f"--marker={marker}",
                           f"--inventory={filled_target(tmp_path)}",
                           f"--report-dir={reports}"], cwd=copy, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 1  # NOT READY, whether tests failed or none could run (pytest says 5 then)
    assert lines[-1].startswith("NOT READY: "), lines[-5:]
    ids = lines[-1].split(": ", 2)[2].split()
    for must in ("OWN-1", "SCOPE-2", "BUILD-1", "PEER-1", "MARK-1"):
        assert must in ids, lines[-1]
    assert not marker.exists() and not marker.is_symlink()
    assert any("MARK-4: removed an existing marker" in l for l in lines)
    (xml,) = reports.glob("acceptance-pilot-*.xml")
    root = ET.parse(xml).getroot()
    cases = list(root.iter("testcase"))
    assert cases and all(any(p.get("name") == "requirement" for p in c.iter("property"))
                         for c in cases)
    gate = {p.get("name"): p.get("value") for p in root.find("./testsuite/properties")}
    assert gate["gate"] == "NOT READY"
