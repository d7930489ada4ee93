"""SUITE-4: every read or copy of a user-writable file is bounded (issue 21
item 10). A sparse 8 TiB file in the source manifest or at the runtime path
kept the gate hashing for hours; now its size is read from fstat and it is
refused at once, the message naming the inventory key that bounds it. The
build's source copy is bounded per file, in bytes and in entries.

Runs that could hang are run as subprocesses with a deadline."""

import os
import pwd
from pathlib import Path
import xml.etree.ElementTree as ET

import pytest
import yaml

from pty_acceptance.host import scratch
from pty_acceptance.provenance import builds, manifest
from pty_acceptance.report import reports
from pty_acceptance.spec import inventory

from childrun import TIB, in_child, sparse
from gateproject import assert_refused, last_line

RUN_DEADLINE_S = 120  # a clean run of the project takes about 2 s


def _limits(target, **limits) -> inventory.Inventory:
    doc = yaml.safe_load(target.inventory.read_text())
    doc["all"]["hosts"]["fake"]["limits"] = limits
    target.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inventory.load(target.inventory)


def _props(project, name):
    (report,) = (project.path / "reports").glob("acceptance-fake-*.xml")
    root = ET.parse(report).getroot()
    return [p.get("value") for p in root.find("./testsuite/properties") if reports.base_name(p.get("name")) == name]


def test_a_sparse_8_tib_manifest_file_ends_the_run_at_once_naming_the_limit(project, target):
    sparse(target.pilot / "config/opencode/bun.lock")
    res = project.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory),
                                       timeout=RUN_DEADLINE_S)
    assert_refused(res, target, "SCOPE-1")
    text = "\n".join(res.outlines)
    assert (f"source manifest cannot be computed: {target.pilot}/config/opencode/bun.lock is "
            f"{8 * TIB} bytes, over limits.file_bytes = {32 << 20} bytes: not read") in text, text[-3000:]


def test_a_sparse_8_tib_runtime_is_evidence_of_its_limit_not_hours_of_hashing(project, target):
    inv = inventory.load(target.inventory)
    sparse(Path(inv.runtime.binary))
    res = project.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory),
                                       timeout=RUN_DEADLINE_S)
    assert last_line(res).startswith(("READY", "NOT READY")), res.outlines[-20:]  # it ended
    want = (f"not readable: {inv.runtime.binary}: {inv.runtime.binary} is {8 * TIB} bytes, "
            f"over limits.runtime_bytes = {512 << 20} bytes: not read")
    assert _props(project, "runtime-at-start") == [want]
    assert _props(project, "runtime-at-marker-time") == [want]


def test_runtime_identify_refuses_a_sparse_8_tib_binary_unread(safe_dir):
    big = sparse(safe_dir / "opencode2-node")
    r = in_child(f"""
from pty_acceptance.host import hostfs
from pty_acceptance.provenance import node_runtime
try:
    node_runtime.identify({str(big)!r}, limit=hostfs.Limit(512 << 20, "limits.runtime_bytes"))
except node_runtime.RuntimeUnreadable as e:
    print(e)
""")
    assert r.stdout.strip() == (f"{big} is {8 * TIB} bytes, over limits.runtime_bytes = {512 << 20} "
                                "bytes: not read"), r.stderr


def test_the_limits_of_the_inventory_bound_the_manifest(target):
    inv = _limits(target, file_bytes=8, tree_entries=3)
    with pytest.raises(manifest.ManifestError, match=r"holds more than limits.tree_entries = 3 entries"):
        manifest.compute(inv.pilot_root, inv.code_root, inv.tree_bounds())
    inv = _limits(target, file_bytes=8)
    with pytest.raises(manifest.ManifestError, match=r"over limits.file_bytes = 8 bytes: not read"):
        manifest.compute(inv.pilot_root, inv.code_root, inv.tree_bounds())
    inv = _limits(target, tree_bytes=100)
    with pytest.raises(manifest.ManifestError, match=r"come to more than limits.tree_bytes = 100 bytes"):
        manifest.compute(inv.pilot_root, inv.code_root, inv.tree_bounds())


@pytest.mark.parametrize("limits, files, says", [
    ({"file_bytes": 1 << 20}, {"huge.go": 8 * TIB}, "huge.go is 8796093022208 bytes, over limits.file_bytes"),
    ({"file_bytes": 1 << 20, "tree_bytes": 3 << 20}, {f"f{i}.go": 1 << 20 for i in range(5)},
     "its files come to more than limits.tree_bytes = 3145728 bytes"),
    ({"tree_entries": 20}, {f"f{i}.go": 1 for i in range(30)}, "holds more than limits.tree_entries = 20 entries"),
])
def test_the_build_copy_is_bounded_and_leaves_nothing(target, limits, files, says):
    """Hundreds of 1 GiB files in the source tree filled /tmp as root."""
    src = target.pilot / "supervisor"
    for name, size in files.items():
        sparse(src / name, size)
    inv = _limits(target, **limits)
    acct = pwd.getpwnam("nobody")
    before = _scratch_entries()
    with pytest.raises(builds.BuildError, match="the build source cannot be copied safely: .*" + says):
        builds.build_once(inv, acct, "a")
    assert _scratch_entries() == before, "the partial copy was left"


def _scratch_entries() -> list[str]:
    root = scratch.root()
    return sorted(os.listdir(root.fd))


def test_the_inventory_validates_its_limits(target):
    inv = inventory.load(target.inventory)
    assert (inv.limit("file_bytes").value, inv.limit("runtime_bytes").value) == (32 << 20, 512 << 20)
    assert str(inv.limit("tree_entries")) == "limits.tree_entries = 50000 entries"
    assert _limits(target, runtime_bytes=1 << 30).limit("runtime_bytes").value == 1 << 30
    for bad, says in [({"file_byte": 1}, "limits.file_byte: unknown key"),
                      ({"file_bytes": 0}, "limits.file_bytes: 0 is not a positive bound"),
                      ({"file_bytes": "1M"}, "limits.file_bytes: expected int")]:
        with pytest.raises(inventory.InventoryError, match=says):
            _limits(target, **bad)
