"""The gate's fixture project for the suite's own tests (pytester sessions):
what it holds (a module naming every requirement, its checked-in node-id
list, a fake host whose preflight finds nothing wrong), and how its runs are
made and read. The `project` fixture that builds it is tests/conftest.py's;
these are the plain functions and data several test modules share."""

import os
import subprocess as sp
import sys
from pathlib import Path

from pty_acceptance.decision import nodeids, readiness_marker as marker
from pty_acceptance.spec.requirements import CATALOGUE, ENFORCED_BY_GATE

ALL_IDS = [r.id for r in CATALOGUE if r.id not in ENFORCED_BY_GATE]

PASSING = f"""
import pytest

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything(evidence):
    evidence("checked", "all of it")

@pytest.mark.requirement("OWN-1")
def test_other():
    pass
"""

# a module of the fixture project with one failing test (OWN-2): `NOT READY: 1 blockers: OWN-2`
FAILING = f"""
import pytest

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything():
    pass

@pytest.mark.requirement("OWN-2")
def test_supervisor_inputs():
    assert False, "an input of the supervisor is the service user's"
"""

# what the fixture project's checked-in node-id list says (nodeids.FILE)
LISTED = {"acceptance/test_all.py::test_everything": tuple(ALL_IDS),
          "acceptance/test_all.py::test_other": ("OWN-1",)}


# The fixture project's host is a fake target on this machine, not a systemd
# host: its preflight finds nothing wrong with the host (preflight.py's own
# tests check the host checks), for in-process and separate-process runs alike.
# A fixture project's requirement records (the gate checks the list of what must run
# against them: rules.records_blockers): the sections of its own checklist. The real
# records' sections are the real checkout's (tests/test_gate_rules.py).
OWN_RECORDS = ("from pty_acceptance.spec import checklist as _checklist, requirements as _requirements\n"
               "from pathlib import Path as _Path\n"
               "try:\n"
               "    _requirements.SECTIONS = tuple(_requirements.SectionRecord(\n"
               "        s.module.removeprefix('acceptance/'), s.title, s.state)\n"
               "        for s in _checklist.load(_Path(__file__).resolve().parents[1] / 'ROOT-ACCEPTANCE.md'))\n"
               "except _checklist.ChecklistError:\n"
               "    pass  # the gate says why (module_blockers)\n")

FAKE_HOST = (OWN_RECORDS +
             "from pty_acceptance.decision import preflight\n"
             "preflight.host_findings = lambda inv: []  # the suite's own tests: a fake target\n"
             "from pty_acceptance.host import stopguard\n"
             "class _NoUnits:  # the fake target's systemd: no unit of the suite's is running\n"
             "    def call(self, method, *args): return ([],)\n"
             "    def close(self): pass\n"
             "stopguard.connect = _NoUnits\n")

# For a run in a process of its own: systemd's answer at marker time, the
# supervisor fixture's process as the unit's MainPID (in process, tests/conftest.py's
# FakeBus is monkeypatched in).
SEPARATE_BUS = """
from pty_acceptance.provenance import running_binary

class _SupervisorBus:
    @classmethod
    def connect(cls):
        return cls()
    def properties(self, name, iface=None):
        return {{"MainPID": {main_pid}}}
    def close(self):
        pass

running_binary.Systemd = _SupervisorBus
"""


def for_separate_processes(project) -> None:
    """The fixture project's conftest made ready for runs in processes of their
    own (runpytest_subprocess): the supervisor's MainPID as in process."""
    from conftest import FakeBus
    with (project.path / "acceptance/conftest.py").open("a") as f:
        f.write(SEPARATE_BUS.format(main_pid=FakeBus.main_pid))


# acceptance/conftest.py's own hook (the real one holds it too: test_run_guard.py
# checks): where the root conftest is not loaded, it arms the run guard
GUARD_HOOK = ("from pty_acceptance.gate import runguard\n\n\n"
              "def pytest_addoption(parser, pluginmanager):\n"
              "    runguard.arm_from_conftest(pluginmanager, __file__, \"acceptance/conftest.py\")\n")

RELIST = ("import sys; from pathlib import Path; from pty_acceptance.decision import nodeids; "
          "from pty_acceptance.gate import node_listing; "
          "r = Path(sys.argv[1]); sys.stdout.write(nodeids.render(node_listing.collect(r, r / 'tox.ini')))")


def relist(project) -> None:
    """The project's node-id list anew from what it collects now, as
    `pty-acceptance node-ids --write` makes the checkout's (a separate process:
    the collection imports the project's test modules)."""
    done = sp.run([sys.executable, "-c", RELIST, str(project.path)], capture_output=True, text=True,
                  cwd=project.path, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (project.path / nodeids.FILE).write_text(done.stdout)


def run(project, target, *args, path="acceptance/", subprocess=False):
    runner = project.runpytest_subprocess if subprocess else project.runpytest
    return runner(path, "--inventory", str(target.inventory), *args)


def last_line(res) -> str:
    lines = [l for l in res.outlines if l.strip()]
    return lines[-1]


def earlier_ready(project, target) -> Path:
    """The marker of a READY run of the project (in process): the marker a later run must not
    leave standing unless it wrote it (MARK-4)."""
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-20:])
    return Path(target.marker)


def earlier_marker(path) -> Path:
    """A marker in MARK-2's shape, root:root 0644, at `path`, as an earlier
    READY run leaves one: a run's start removes it (MARK-4)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(marker.render("0" * 40, "0" * 64, [("0" * 64, b) for b in marker.DEFAULT_BINARIES]))
    p.chmod(0o644)
    return p


def expectation(target):
    """What the fake target's inventory pins: the verifier judges a marker only against them."""
    import yaml
    (host,) = yaml.safe_load(target.inventory.read_text())["all"]["hosts"].values()
    return marker.Expectation(target.revision, target.manifest, tuple(target.binaries),
                              tuple(host["binaries"][r]["sha256"] for r in ("supervisor", "launcher", "client")))


def assert_refused(res, target, *ids):
    line = last_line(res)
    assert line.startswith("NOT READY: "), "\n".join(res.outlines[-30:])
    for i in ids:
        assert i in line.split(": ", 2)[2].split(), line
    assert not os.path.lexists(target.marker), "a marker was written"
    assert res.ret != 0


def assert_refused_at_start(res, target, *said, ret=4):
    """Refused before anything ran (startup.py): usage error (`ret`), one
    `ERROR: NOT READY: SUITE-3: ...` line saying each of `said`, no marker."""
    text = "\n".join(res.outlines + res.errlines)
    assert res.ret == ret, text[-3000:]
    refusal = [line for line in res.errlines if line.startswith("ERROR: NOT READY: SUITE-3: ")]
    assert refusal, text[-3000:]
    for s in said:
        assert s in refusal[0], refusal[0]
    assert not os.path.lexists(target.marker), "a marker was written"
    return refusal[0]


def add_tests(project, text):
    """PASSING and `text` as the project's one test module (its node-id list unchanged)."""
    (project.path / "acceptance/test_all.py").write_text(PASSING + text)


def with_module(project, body: str, sections: str = "") -> None:
    """`body` as the project's one test module, its node-id list following it,
    and `sections` appended to its ROOT-ACCEPTANCE.md."""
    (project.path / "acceptance/test_all.py").write_text(body)
    relist(project)  # the checkout's list of tests follows the module (nodeids.py)
    if sections:
        with (project.path / "ROOT-ACCEPTANCE.md").open("a") as f:
            f.write(sections)


def junit(project) -> Path:
    """The one JUnit report the project's run wrote."""
    found = list((project.path / "reports").glob("acceptance-fake-*.xml"))
    assert len(found) == 1, found
    return found[0]


def matrix_lines(outlines: list[str]) -> list[str]:
    """The terminal's requirement matrix: its heading and its rows."""
    start = outlines.index("requirement matrix (one row per ROOT-ACCEPTANCE.md section):")
    end = start + 1
    while end < len(outlines) and outlines[end].startswith("  "):
        end += 1
    return outlines[start:end]


# ------------------------------------- a pytest process of its own, as an operator starts one
PYTEST = str(Path(sys.executable).parent / "pytest")  # the virtualenv's console script
SEPARATE_DEADLINE_S = 120  # generous on a shared machine: a refused run takes about a second


def env_without_pytest_vars(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return dict(environ, **extra)


def start(project, argv: list[str], cwd: Path | None = None, **env: str) -> sp.CompletedProcess:
    """`argv` run in the project (or `cwd`) with this session's environment less
    its PYTEST_* variables, plus `env`."""
    return sp.run(argv, cwd=cwd or project.path, env=env_without_pytest_vars(**env), capture_output=True,
                  text=True, timeout=SEPARATE_DEADLINE_S, stdin=sp.DEVNULL)


def said(done: sp.CompletedProcess) -> str:
    return f"exit {done.returncode}\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"


def suite_args(target, *more: str) -> list[str]:
    return ["-p", "no:cacheprovider", "acceptance/", "--inventory", str(target.inventory), *more]


# A patch of pytest's report (no plugin at all): every failed test reported passed.
QUIET = """
def _quiet():
    from _pytest.reports import TestReport
    made = TestReport.from_item_and_call.__func__

    def from_item_and_call(cls, item, call):
        report = made(cls, item, call)
        if report.failed:
            report.outcome, report.longrepr = "passed", None
        return report

    TestReport.from_item_and_call = classmethod(from_item_and_call)

_quiet()
"""


# The fixture project's test_all.py with one test failing: a correct gate says NOT READY: 1 blockers: OWN-1.
ONE_FAILING = PASSING.replace("def test_other():\n    pass", "def test_other():\n    assert False, 'OWN-1 fails'")
