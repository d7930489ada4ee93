"""SUITE-2, SUITE-4 (issue 29 item 5): every run leaves a report. A chain of
directories 1,200 deep in the supervisor source raised RecursionError out
of the gate's decision (the manifest walked recursively, bounded in entries
only): INTERNALERROR, exit 3, no JUnit, HTML or Statement. Every walk of a
user-writable tree is now iterative and bounded in depth too (the
inventory's limits.tree_depth), the refusal naming the bound; the suite's
own tree is walked iteratively as well; and an error the gate did not
expect at its end is a blocker in a report that is still written."""

import dataclasses
import json
import os
import pwd
import resource
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from pty_acceptance.gate import owntree
from pty_acceptance.host import scratch
from pty_acceptance.provenance import builds, manifest
from pty_acceptance.report import bundle, htmlreport, reports, verdict
from pty_acceptance.spec import inventory

from gateproject import assert_refused, junit, run

DEEP = 1200  # deeper than Python's recursion limit (1000)
RUN_DEADLINE_S = 180


def chain(top: Path, depth: int = DEEP, leaf: str = "deep.go") -> Path:
    """`depth` nested directories `d` below `top`, `leaf` at the bottom; made
    by descriptor, one level at a time (os.makedirs recurses)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", 0o755, dir_fd=fd)
            fd, up = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
            os.close(up)
        os.close(os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    bottom = top.joinpath(*["d"] * depth)
    (bottom / leaf).write_text("package deep\n")
    return bottom


def unchain(top: Path) -> None:
    """The chain below `top` removed, bottom first (shutil.rmtree recurses)."""
    fds = [os.open(top, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        while "d" in os.listdir(fds[-1]):
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        for name in os.listdir(fds[-1]):
            os.unlink(name, dir_fd=fds[-1])
        while len(fds) > 1:
            os.close(fds.pop())
            for name in os.listdir(fds[-1]):  # the chain's next level, and at the top what else was there
                if name == "d":
                    os.rmdir(name, dir_fd=fds[-1])
                    break
    finally:
        for fd in fds:
            os.close(fd)


@pytest.fixture
def deep(safe_dir):
    """chain(), the chains made removed before safe_dir is (its rmtree recurses)."""
    made = []

    def make(top: Path, depth: int = DEEP, leaf: str = "deep.go") -> Path:
        made.append(top)
        return chain(top, depth, leaf)

    yield make
    for top in made:
        unchain(top)


def _limits(target, **limits) -> inventory.Inventory:
    doc = yaml.safe_load(target.inventory.read_text())
    doc["all"]["hosts"]["fake"]["limits"] = limits
    target.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inventory.load(target.inventory)


def assert_a_not_ready_report(project, says: str) -> ET.Element:
    """The run's report, its HTML and Statement exist and say NOT READY; a
    blocker and the failing verdict case say `says`."""
    report = junit(project)
    root = ET.parse(report).getroot()
    v = verdict.from_junit(root)
    assert not v.ready and any(says in b for b in v.blockers), v.blockers
    (case,) = [c for c in root.iter("testcase") if reports.is_verdict_case(c)]
    assert says in case.find("failure").text
    html, statement, _ = bundle.names(str(report))
    assert "NOT READY" in Path(html).read_text()
    assert json.loads(Path(statement).read_text())["predicate"]["result"] == "FAILED"
    return root


# -- the gate, end to end
def test_a_1200_deep_chain_in_the_supervisor_source_is_not_ready_with_a_report(project, target, deep):
    deep(target.pilot / "supervisor")
    res = project.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory),
                                       timeout=RUN_DEADLINE_S)
    assert "INTERNALERROR" not in "\n".join(res.outlines + res.errlines), res.errlines[-20:]
    assert_refused(res, target, "SCOPE-1")
    assert res.ret == 1
    assert_a_not_ready_report(project, "past limits.tree_depth = 32 levels: not walked further")


def test_an_error_of_the_suite_while_deciding_is_a_blocker_in_a_written_report(project, target):
    (project.path / "acceptance/conftest.py").write_text(
        "from pty_acceptance.decision import preflight, rules\n"
        "preflight.host_findings = lambda inv: []\n"
        "def broken(*a, **kw):\n    raise RuntimeError('the rules broke')\n"
        "rules.decide = broken\n")
    res = project.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory),
                                       timeout=RUN_DEADLINE_S)
    assert "INTERNALERROR" not in "\n".join(res.outlines + res.errlines), res.errlines[-20:]
    assert_refused(res, target, "SUITE-2")
    assert_a_not_ready_report(project, "SUITE-2: an internal error of the suite while deciding the verdict: "
                                       "RuntimeError: the rules broke")


def test_an_error_of_the_suite_after_the_marker_takes_it_back(project, target, monkeypatch):
    """The READY bundle's rendering raises what the end did not expect (at
    6b337c8: after the marker was written): the marker is not left behind,
    and the report says why."""
    real = htmlreport.render

    def broken(v, *a, **kw):
        if v.ready:
            raise RuntimeError("the renderer broke")
        return real(v, *a, **kw)

    monkeypatch.setattr(htmlreport, "render", broken)
    res = run(project, target)
    assert_refused(res, target, "SUITE-2")
    assert_a_not_ready_report(project, "SUITE-2: an internal error of the suite while making the READY "
                                       "verdict bundle: RuntimeError: the renderer broke")


# -- each walk of a user-writable tree
def test_the_manifest_walk_is_bounded_in_depth_and_iterative(target, deep):
    deep(target.pilot / "supervisor")
    inv = inventory.load(target.inventory)
    with pytest.raises(manifest.ManifestError, match=r"lies 33 directories deep, past limits.tree_depth = "
                                                     r"32 levels: not walked further"):
        manifest.compute(inv.pilot_root, inv.code_root, inv.tree_bounds())
    # a bound raised past the chain: walked to the bottom (no recursion: no RecursionError)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * DEEP:  # one descriptor per level
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * DEEP), hard))
    try:
        inv = inventory.load(target.inventory)
        bounds = dataclasses.replace(inv.tree_bounds(), depth=inventory.limit("tree_depth", DEEP + 1))
        _, listing = manifest.compute(inv.pilot_root, inv.code_root, bounds)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "/d/d/deep.go\n" in listing


def test_the_build_copy_is_bounded_in_depth_and_leaves_nothing(target, deep):
    deep(target.pilot / "supervisor")
    inv = inventory.load(target.inventory)
    before = sorted(os.listdir(scratch.root().fd))
    with pytest.raises(builds.BuildError, match=r"the build source cannot be copied safely: .* lies 33 "
                                                r"directories deep, past limits.tree_depth = 32 levels"):
        builds.build_once(inv, pwd.getpwnam("nobody"), "a")
    assert sorted(os.listdir(scratch.root().fd)) == before, "the partial copy was left"


def test_the_build_copy_keeps_its_shape_and_gives_each_directory_away(target, safe_dir):
    src = target.pilot / "supervisor"
    chain(src, depth=3, leaf="x.go")
    work = safe_dir / "work"
    work.mkdir()
    acct = pwd.getpwnam("nobody")
    copy = Path(builds.copy_source(str(src), str(work), acct, inventory.load(target.inventory).tree_bounds()))
    want = sorted(str(p.relative_to(src)) for p in src.rglob("*"))
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == want
    for p in [copy, *copy.rglob("*")]:
        assert (p.stat().st_uid, p.is_symlink()) == (acct.pw_uid, False), p
    assert (copy / "d/d/d/x.go").read_text() == "package deep\n"


def test_the_inventory_names_the_depth_bound(target):
    inv = inventory.load(target.inventory)
    assert str(inv.limit("tree_depth")) == "limits.tree_depth = 32 levels"
    assert inv.tree_bounds().depth.value == 32
    assert _limits(target, tree_depth=8).tree_bounds().depth.value == 8
    # deeper than the run removes what it made: refused
    with pytest.raises(inventory.InventoryError, match=r"limits.tree_depth: 61 is past 60: a build's source copy"):
        _limits(target, tree_depth=61)


def test_the_suite_s_own_tree_walk_is_iterative_and_bounded(safe_dir, deep):
    co = safe_dir / "checkout"
    co.mkdir()
    bottom = deep(co)
    own = owntree.Own("checkout", str(co), "directory", walk=True)
    found = owntree.problems([own])
    assert len(found) == 1 and f"{co}/{'d/' * (owntree.MAX_DEPTH + 1)}".rstrip("/") in found[0], found
    assert f"past the walk's bound of {owntree.MAX_DEPTH}: not walked, so not judged" in found[0]
    os.chmod(bottom / "deep.go", 0o666)  # below the bound: not judged, but the chain is a problem already
    assert owntree.problems([own]) == found
