"""SUITE-4, issue 11 item 7: the suite's own tree (checkout, virtualenv,
interpreter, package, inventory, checklist, report directory) must pass the
OWN-1 chain check, or the run cannot earn the marker. Before, nothing looked:
a checkout whose checklist another user could rewrite still wrote READY."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pty_acceptance.decision import nodeids
from pty_acceptance.gate import owntree
from pty_acceptance.spec.requirements import CATALOGUE, ENFORCED_BY_GATE

import venvcopy
from conftest import REPO
from gateproject import OWN_RECORDS

NOBODY = 65534


def _tree(base: Path) -> dict[str, Path]:
    co = base / "checkout"
    (co / "acceptance/pty_acceptance").mkdir(parents=True)
    (co / "acceptance/pty_acceptance/x.py").write_text("x = 1\n")
    (co / "ROOT-ACCEPTANCE.md").write_text("| a |\n")
    (co / "inventories").mkdir()
    (co / "inventories/target.yml").write_text("all: {}\n")
    (co / "reports").mkdir()
    for p in [co, *co.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return {"co": co}


def _owns(co: Path) -> list[owntree.Own]:
    # the checkout stands in for the virtualenv too: where this test session's own
    # interpreter lives (a CI checkout under /tmp, say) is not what is tested here
    return owntree.own_tree(str(co), str(co / "inventories/target.yml"), str(co / "reports"),
                            str(co / "acceptance/pty_acceptance"), prefix=str(co))


def _problems(co: Path) -> list[str]:
    return owntree.problems(_owns(co), skip=[str(co / "reports")])


def test_a_root_controlled_tree_passes(safe_dir):
    co = _tree(safe_dir)["co"]
    assert _problems(co) == []


HOSTILE = {
    "a group-writable file deep in the package":
        lambda co: os.chmod(co / "acceptance/pty_acceptance/x.py", 0o664),
    "a file of another user in the checkout":
        lambda co: os.chown(co / "acceptance/pty_acceptance/x.py", NOBODY, NOBODY),
    "an other-writable checklist": lambda co: os.chmod(co / "ROOT-ACCEPTANCE.md", 0o646),
    "the inventory is a link":
        lambda co: (os.rename(co / "inventories/target.yml", co / "t.yml"),
                    os.symlink(co / "t.yml", co / "inventories/target.yml")),
    "a link in the checkout to another user's file":
        lambda co: (Path(co.parent / "theirs.py").write_text("evil\n"),
                    os.chown(co.parent / "theirs.py", NOBODY, NOBODY),
                    os.symlink(co.parent / "theirs.py", co / "acceptance/pty_acceptance/y.py")),
    "a FIFO in the package": lambda co: os.mkfifo(co / "acceptance/pty_acceptance/fifo", 0o644),
    "the report directory is group-writable": lambda co: os.chmod(co / "reports", 0o775),
    "the checkout directory belongs to another user": lambda co: os.chown(co, NOBODY, 0),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_what_another_user_could_change_is_found(safe_dir, case):
    co = _tree(safe_dir)["co"]
    HOSTILE[case](co)
    found = _problems(co)
    assert found, case


def test_nothing_is_followed_or_opened(safe_dir):
    co = _tree(safe_dir)["co"]
    os.mkfifo(co / "acceptance/pty_acceptance/fifo", 0o644)  # opening it would block the run
    os.symlink("/proc/self/fd/0", co / "acceptance/pty_acceptance/stdin")
    assert _problems(co)


def test_report_directory_under_tmp_is_refused(safe_dir, tmp_path):
    co = _tree(safe_dir)["co"]
    owns = owntree.own_tree(str(co), str(co / "inventories/target.yml"), str(tmp_path),
                            str(co / "acceptance/pty_acceptance"))
    assert any(p.startswith("report directory: /tmp is writable") for p in owntree.problems(owns))


# ------------------------------------------------------------ the gate
ALL_IDS = [r.id for r in CATALOGUE if r.id not in ENFORCED_BY_GATE]


def test_suite_4_is_carried_by_a_test_not_the_gate():
    assert "SUITE-4" in ALL_IDS and "SUITE-5" in ENFORCED_BY_GATE


def _project(base: Path) -> Path:
    """A checkout (in a root-controlled place) whose only modules are a passing
    test of everything and the real acceptance/test_suite_itself.py."""
    p = base / "project"
    (p / "acceptance").mkdir(parents=True)
    # its own run directory (the run lock): the real /run/pty-acceptance is the host's
    (p / "pytest.ini").write_text("[pytest]\njunit_family = xunit1\naddopts = -p no:cacheprovider\n"
                                  f"pty_acceptance_run_dir = {base}/run\n")
    shutil.copyfile(REPO / "conftest.py", p / "conftest.py")
    shutil.copyfile(REPO / "acceptance/test_suite_itself.py", p / "acceptance/test_suite_itself.py")
    ids = [i for i in ALL_IDS if i != "SUITE-4"]
    (p / "acceptance/test_all.py").write_text(
        f"import pytest\n\n@pytest.mark.requirement(*{ids!r})\ndef test_everything():\n    pass\n")
    (p / "ROOT-ACCEPTANCE.md").write_text(
        "| Section | Module | Requirements | State |\n|---|---|---|---|\n"
        f"| All | `acceptance/test_all.py` | {', '.join(ids)} | built |\n"
        "| Itself | `acceptance/test_suite_itself.py` | SUITE-4 | built |\n")
    itself = {n: i for n, i in nodeids.load(REPO).items() if n.startswith("acceptance/test_suite_itself.py::")}
    (p / nodeids.FILE).write_text(nodeids.render({"acceptance/test_all.py::test_everything": tuple(ids),
                                                  **itself}))
    (p / "acceptance/conftest.py").write_text(FAKE_SUPERVISOR_UNIT)
    # The package the run imports and the virtualenv it runs in are part of the
    # tree it checks: a copy of the package here, and a virtualenv below `base`
    # holding the pinned distributions (venvcopy.py: the gate refuses PYTHONPATH,
    # and judges every loaded module against requirements/target.txt), so that
    # where this test session's own checkout lives (under /tmp, say) does not decide it.
    shutil.copytree(REPO / "acceptance/pty_acceptance", p / "acceptance/pty_acceptance",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (p / "requirements").mkdir()
    shutil.copyfile(REPO / "requirements/target.txt", p / "requirements/target.txt")
    venvcopy.build(base / "venv")
    for q in [p, *p.rglob("*")]:
        os.chmod(q, 0o755 if q.is_dir() else 0o644)
    return p


# The gate ties the marker to the running supervisor (SCOPE-2 at marker time):
# here systemd is a fake that names a process running the target's supervisor.
FAKE_SUPERVISOR_UNIT = OWN_RECORDS + """
import os
from pty_acceptance.decision import preflight
from pty_acceptance.host import stopguard
from pty_acceptance.provenance import running_binary

preflight.host_findings = lambda inv: []  # a fake target, not a systemd host


class FakeBus:
    @classmethod
    def connect(cls):
        return cls()

    def properties(self, name, iface=None):
        # beside the project (the clean start keeps no variable of the test's): _run writes it
        base = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(base, "supervisor.pid")) as f:
            return {"MainPID": int(f.read())}

    def close(self):
        pass


running_binary.Systemd = FakeBus


class NoUnits:  # SUITE-5's stop guard: no unit of the suite's runs on the fake target
    def call(self, method, *args):
        return ([],)

    def close(self):
        pass


stopguard.connect = NoUnits
"""


def _run(project: Path, target) -> subprocess.CompletedProcess:
    supervisor = subprocess.Popen([str(target.binaries[0]), "300"])
    try:
        (project.parent / "supervisor.pid").write_text(str(supervisor.pid))  # the fake bus's MainPID
        return subprocess.run([str(project.parent / "venv/bin/python"), "-m", "pytest", "acceptance/",
                               "--inventory", str(target.inventory)], cwd=project, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
    finally:
        supervisor.kill()
        supervisor.wait()


def test_the_marker_needs_a_root_controlled_checkout(safe_dir, target):
    project = _project(safe_dir)
    done = _run(project, target)
    last = done.stdout.strip().splitlines()[-1]
    assert last == f"READY: marker written {target.marker}", done.stdout[-3000:]
    os.chmod(project / "ROOT-ACCEPTANCE.md", 0o664)  # the checklist: group-writable
    done = _run(project, target)
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode != 0 and last.startswith("NOT READY: ") and "SUITE-4" in last.split(), \
        done.stdout[-3000:]
    assert "ROOT-ACCEPTANCE.md is writable by group" in done.stdout
    assert not os.path.lexists(target.marker)
