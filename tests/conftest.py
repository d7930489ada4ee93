"""Fixtures for the suite's own tests: scratch trees that stand in for a
target host (binaries, pilot and code trees, an inventory) in places whose
directory chain is root-owned, so the marker gate can really write there."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# pytester (the gate's fixture projects) for the suite's own tests only: the root
# conftest loads nothing but the suite's plugin, so no acceptance run has pytester's
# options (--lsof runs lsof from PATH as root around every test: issue 38 item 9)
pytest_plugins = ["pytester"]


def pytest_configure(config):
    config.addinivalue_line("markers", "refhost: boots a reference host (slow, root)")
    # CI's log names where its time went (its budget: keep CI under 40 minutes)
    if config.option.durations is None:
        config.option.durations = 25
    # started as a background job (`sh -c '...' &` ignores SIGINT), every run these
    # tests start would inherit SIGINT ignored, and the tests that interrupt a run
    # with it would read the suite's own "SIGINT is ignored" (SUITE-5) instead: the
    # runs they start get SIGINT's default, as from a terminal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _need_root():
    if os.geteuid() != 0:
        pytest.exit("the suite's own tests need root (they write root-owned marker trees)", 4)


@pytest.fixture(scope="session", autouse=True)
def _an_operators_clean_environment():
    """The suite's runs these tests start are refused when the environment sets
    what the suite refuses (decision/launch.py): a machine's own variables of
    that kind (a systemd unit's SYSTEMD_*, say) are not the tests' to judge,
    so they are left out of this session's environment."""
    from pty_acceptance.decision import launch

    dropped = {k: os.environ.pop(k) for k in list(os.environ)
               if k.startswith(("SYSTEMD_", "SYSTEMCTL_", "_PYTHON")) and launch.why_refused(k)}
    yield
    os.environ.update(dropped)


@pytest.fixture(scope="session", autouse=True)
def _private_run_dir(_need_root):
    """The library's run directory (the scratch area's record, stand-in
    ledgers) is a private one for the suite's own tests, never the host's
    /run/pty-acceptance; the scratch area a library call made goes at the end."""
    from pty_acceptance.host import hostfs, rundir, scratch

    d = tempfile.mkdtemp(prefix="pty-acc-tests-", dir="/run")
    before = rundir.current()
    rundir.use(os.path.join(d, "run"))
    try:
        yield
    finally:
        scratch.finish()
        rundir.use(before)
        parent = hostfs.open_dir("/run")
        try:
            hostfs.remove_tree_at(parent, os.path.basename(d), d)
        finally:
            os.close(parent)


@pytest.fixture(autouse=True)
def _no_systemd_here(monkeypatch):
    """PID 1 of the lab machine is not systemd: what the library runs as the
    service user in a unit of its own (host/userunit.py) runs through
    tests/unitless.py's stand-in here; the real units are tried on a
    reference host (tests/test_userunit.py, and every reference run)."""
    from pty_acceptance.host import userunit
    from tests import unitless

    monkeypatch.setattr(userunit, "run_all", unitless.run_all)


@pytest.fixture
def safe_dir():
    """A fresh directory under /run: every directory above it is root-owned
    and not group/other-writable, unlike /tmp."""
    d = tempfile.mkdtemp(prefix="pty-acc-test-", dir="/run")
    os.chmod(d, 0o755)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


PILOT_FILES = [
    "supervisor/go.mod", "supervisor/go.sum", "supervisor/opencode-pty.slice",
    "supervisor/opencode-pty-supervisor.service", "config/opencode/plugins/pty.ts",
    "config/opencode/plugins/pty-transport.ts", "config/opencode/tsconfig.json",
    "config/opencode/package.json", "config/opencode/bun.lock", "opencode-v2.service",
]


def coreutils_manifest(pilot: Path, code: Path) -> str:
    """The manifest as review-source-hash computes it, with find/sort/sha256sum."""
    fixed = " ".join(f"'{pilot}/{f}'" for f in PILOT_FILES)
    script = textwrap.dedent(f"""\
        set -eu
        {{ find '{pilot}/supervisor' -name '*.go'
           for f in '{code}'/packages/plugin/src/*.ts; do printf '%s\\n' "$f"; done
           printf '%s\\n' {fixed} '{code}/packages/plugin/package.json' '{code}/bun.lock'
        }} | LC_ALL=C sort -u | while IFS= read -r p; do sha256sum "$p"; done \
           | sha256sum | cut -d' ' -f1
        """)
    return subprocess.run(["sh", "-c", script], capture_output=True, check=True,
                           text=True).stdout.strip()


@dataclass
class FakeTarget:
    base: Path
    inventory: Path
    marker: str
    binaries: list[str]
    pilot: Path
    code: Path
    revision: str
    manifest: str


def make_target(base: Path) -> FakeTarget:
    """Binaries, a pilot and a code tree, and an inventory describing them."""
    libexec = base / "usr/local/libexec"
    libexec.mkdir(parents=True)
    binaries = []
    for role in ("supervisor", "launcher", "client"):
        p = libexec / f"opencode-pty-{role}"
        if role == "supervisor":  # a real executable: the gate ties a running process to it
            p.write_bytes(Path("/bin/sleep").read_bytes())
        else:
            p.write_bytes(f"#!/bin/sh\n# stand-in {role}\n".encode())
        p.chmod(0o755)
        binaries.append(str(p))
    pilot, code = base / "pilot", base / "code"
    for f in PILOT_FILES:
        (pilot / f).parent.mkdir(parents=True, exist_ok=True)
        (pilot / f).write_text(f"content of {f}\n")
    for f in ["supervisor/cmd/supervisor/main.go", "supervisor/internal/protocol/frame.go",
              "supervisor/internal/protocol/frame_test.go"]:
        (pilot / f).parent.mkdir(parents=True, exist_ok=True)
        (pilot / f).write_text(f"package x // {f}\n")
    for f in ["packages/plugin/src/index.ts", "packages/plugin/src/Pty Transport.ts",
              "packages/plugin/package.json", "bun.lock", "packages/plugin/src/nested/no.ts"]:
        (code / f).parent.mkdir(parents=True, exist_ok=True)
        (code / f).write_text(f"// {f}\n")
    revision = "2ac698d65aa4690a694307e9cbdf44537ea9a4fb"
    (code / ".git/refs/heads").mkdir(parents=True)
    (code / ".git/objects").mkdir()  # git takes .git for a repository only with objects/ and refs/
    (code / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (code / ".git/refs/heads/main").write_text(revision + "\n")
    digest = coreutils_manifest(pilot, code)
    # the runtime (RUNTIME-1): the gate hashes it at start and at marker time against its pin
    runtime = code / "packages/cli/dist-v2-pilot-final/cli-node-linux-x64/bin/opencode2-node"
    runtime.parent.mkdir(parents=True)
    runtime.write_bytes(b"a stand-in runtime\n")
    sha = {}
    import hashlib
    for b in binaries:
        sha[b] = hashlib.sha256(Path(b).read_bytes()).hexdigest()
    marker = str(base / "etc/opencode/pty-supervisor-verified")
    vars_ = {
        "service_user": "byk", "service_group": "byk",
        "pilot_root": str(pilot), "code_root": str(code),
        "revision": revision, "source_manifest_sha256": digest,
        "binaries": {r: {"path": b, "sha256": sha[b], "package": f"./cmd/{r}"}
                     for r, b in zip(("supervisor", "launcher", "client"), binaries, strict=True)},
        "build": {"source_dir": str(pilot / "supervisor"), "go": "/usr/bin/go", "user": "nobody"},
        "units": {"supervisor": "opencode-pty-supervisor.service", "slice": "opencode-pty.slice",
                  "peer": "opencode-v2.service", "production": "opencode.service",
                  "candidate": "opencode-v2-preview.service", "candidate_file": str(pilot / "opencode-v2.service")},
        "socket": "/run/opencode-pty/supervisor.sock",
        "marker": marker,
        "ports": {"production": 4096, "candidate": 14102},
        "runtime": {"binary": str(runtime), "node_version": "v26.4.0",
                    "sha256": hashlib.sha256(runtime.read_bytes()).hexdigest()},
        "supervisor_exec": {"path": binaries[0], "argv": [binaries[0]]},
        "cutover": {"production_health": "/", "candidate_health": "/api/health",
                    "candidate_ui": ["/"], "plugins": ["followup", "local-pty"],
                    "server_env": str(pilot / "server.env"), "directory": str(pilot)},
        "isolation": {"session_workspace_writable": True, "session_network": True},
        "plugin": {"bun": "/nonexistent/bun", "bun_sha256": "cd" * 32,
                   "harness": "/nonexistent/pty-plugin-smoke.ts", "harness_sha256": "ef" * 32,
                   "plugin_dir": "/nonexistent/plugins", "args": [], "fresh_args": ["--helper", "{helper}"],
                   "success": {"last_line": "^PASS ", "result_file": "^result-[0-9]+\\.json$"}},
        "session_environment": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/byk",
                                "TERM": "xterm-256color", "LANG": "C.UTF-8"},
        "admission": {"unauth_quota": 8, "hello_timeout_s": 5},
    }
    inv = base / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"fake": vars_}}}, sort_keys=False))
    return FakeTarget(base, inv, marker, binaries, pilot, code, revision, digest)


@pytest.fixture
def target(safe_dir) -> FakeTarget:
    return make_target(safe_dir)


class FakeBus:
    """systemd as the gate sees it at marker time: the supervisor's MainPID."""

    main_pid = 0

    @classmethod
    def connect(cls):
        return cls()

    def properties(self, name, iface=None):
        return {"MainPID": FakeBus.main_pid}

    def close(self):
        pass


@pytest.fixture
def supervisor(target, monkeypatch):
    """A process running the target's supervisor binary, reported as the
    supervisor unit's MainPID; start(path) runs another program as MainPID."""
    from pty_acceptance.provenance import running_binary

    procs = []

    def start(path):
        proc = subprocess.Popen([path, "300"])
        procs.append(proc)
        FakeBus.main_pid = proc.pid
        return proc

    monkeypatch.setattr(running_binary, "Systemd", FakeBus)
    start(target.binaries[0])
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


class NoUnitsBus:
    """A fake target's systemd for SUITE-5's stop guard: no unit of the suite's runs."""

    def call(self, method, *args):
        return ([],)

    def close(self):
        pass


@pytest.fixture
def project(pytester, target, supervisor, safe_dir, monkeypatch):
    """The gate's fixture project (tests/gateproject.py): the checkout's own
    start-up conftest, a checklist and a module naming every requirement, its
    node-id list, a fake host and acceptance/conftest.py's run guard hook, and
    a run directory of its own (the run lock: the real /run/pty-acceptance is
    the host's)."""
    from pty_acceptance.decision import nodeids, preflight

    from gateproject import ALL_IDS, FAKE_HOST, GUARD_HOOK, LISTED, PASSING

    pytester.makeini("[pytest]\njunit_family = xunit1\naddopts = -p no:cacheprovider\n"
                     f"pty_acceptance_run_dir = {safe_dir}/run\n")
    pytester.makeconftest((REPO / "conftest.py").read_text())  # the project's own start-up
    ids = ", ".join(ALL_IDS)
    (pytester.path / "ROOT-ACCEPTANCE.md").write_text(
        "| Section | Module | Requirements | State |\n|---|---|---|---|\n"
        f"| All | `acceptance/test_all.py` | {ids} | built |\n")
    (pytester.path / "acceptance").mkdir()
    monkeypatch.setattr(preflight, "host_findings", lambda inv: [])
    from pty_acceptance.spec import requirements
    monkeypatch.setattr(requirements, "SECTIONS", requirements.SECTIONS)  # FAKE_HOST's, undone after the test
    from pty_acceptance.host import stopguard
    monkeypatch.setattr(stopguard, "connect", NoUnitsBus)  # FAKE_HOST's, for in-process runs
    (pytester.path / "acceptance/conftest.py").write_text(FAKE_HOST + GUARD_HOOK)
    (pytester.path / "acceptance/test_all.py").write_text(PASSING)
    (pytester.path / nodeids.FILE).write_text(nodeids.render(LISTED))
    (pytester.path / "requirements").mkdir()  # the pins the gate judges the venv's distributions by
    (pytester.path / "requirements/target.txt").write_bytes((REPO / "requirements/target.txt").read_bytes())
    in_process_is_the_projects(pytester, monkeypatch)
    return pytester


def in_process_is_the_projects(pytester, monkeypatch):
    """What the gate judges of its own process (loaded_code.py, launch.py) is
    the project's run, not this test session around it:

    - in process (runpytest), the code and the sys.path entries of this
      session (tests/, the checkout's, the lab venv's, the interpreter's,
      earlier fixture projects') are left out, and the environment is
      os.environ (a test sets its variables there; /proc/self/environ is
      this session's start). The hostile reproductions run in separate
      processes, where nothing is left out;
    - a separate process (runpytest_subprocess) gets this session's
      environment as it is, without the PYTHONPATH pytester adds (the gate
      refuses PYTHONPATH at start-up): a test that sets PYTHONPATH sets it in
      os.environ (monkeypatch.setenv), and it is passed on."""
    import sys
    from pty_acceptance.decision import launch, loaded_code

    real = loaded_code.this_process
    project, runs = str(pytester.path), str(pytester.path.parent)
    outer = [str(REPO), runs, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)]

    def ours(path: str | None) -> bool:
        where = os.path.realpath(path) if path else ""
        return loaded_code.within(where, project) or not any(loaded_code.within(where, o) for o in outer)

    def this_process(plugins=(), rewriter=None, checkout=None):
        p = real(plugins, rewriter, checkout)
        # the project's earlier in-process runs leave their test modules' functions alive
        # (a run of its own process has none): only the module loaded now is judged
        code = tuple(c for c in p.code if ours(c.file) and all(ours(loc) for loc in c.locations)
                     and (c.code is None or c.current))
        return loaded_code.Process(code, tuple(e for e in p.path if ours(e)), (dict(os.environ),), rewriter)

    monkeypatch.setattr(loaded_code, "this_process", this_process)
    monkeypatch.setattr(launch, "exec_environment", dict)
    # the run in process is this session's, started however the session was: not the clean start
    monkeypatch.setattr(launch, "clean_form_problems", lambda *a, **k: [])

    def popen(cmdargs, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=pytester.CLOSE_STDIN, **kw):
        kw["env"] = dict(os.environ)
        kw["stdin"] = subprocess.DEVNULL if stdin is pytester.CLOSE_STDIN else stdin
        return subprocess.Popen(cmdargs, stdout=stdout, stderr=stderr, **kw)

    monkeypatch.setattr(pytester, "popen", popen)


def assert_junit_readers_accept(path: Path) -> None:
    """Third-party JUnit readers take the report as it is (issue 22): junitparser
    counts its cases; xunitparser, which refuses a suite-level property name
    given twice and totals that disagree with the cases, parses it."""
    import junitparser
    import xunitparser

    xml = junitparser.JUnitXml.fromfile(str(path))
    cases = sum(1 for suite in xml for _ in suite)
    with open(path, "rb") as f:
        suite, result = xunitparser.parse(f)
    assert result.testsRun == cases, (path, result.testsRun, cases)


@pytest.fixture
def failing(project, target):
    """The fixture project with one failing test (gateproject.ONE_FAILING), ready
    for runs in processes of their own."""
    from gateproject import ONE_FAILING, for_separate_processes
    (project.path / "acceptance/test_all.py").write_text(ONE_FAILING)
    for_separate_processes(project)
    return project
