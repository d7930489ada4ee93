"""Run the acceptance suite against a fresh reference host and collect its reports."""
from __future__ import annotations

import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import time

from .machine import WORK_ROOT, Machine, MachineError, log
from . import nodedist, npmdist, pinnedvenv
from .tree import DEFAULT_RELEASE, RELEASES, ensure_tree

GUEST_BASE = "/opt/pty-acceptance"
GUEST_SRC = f"{GUEST_BASE}/src"
GUEST_OUT = f"{GUEST_BASE}/out"
GUEST_EVIDENCE = f"{GUEST_OUT}/evidence"
GUEST_PYTHON = f"{GUEST_BASE}/venv/bin/python"
AFTER_SUITE = "after-suite.txt"
SUITE_STDERR = "suite-stderr.txt"  # the suite's stderr (a refusal at start-up says NOT READY there)
DEPLOY = "tests/reference/deploy.sh"
# The supervisor implementations deploy.sh installs (OPENCODE_REFERENCE_SUPERVISOR).
SUPERVISORS = ("go", "python")
DEFAULT_SUPERVISOR = "go"
MARKER = "/etc/opencode/pty-supervisor-verified"
BINARIES = [f"/usr/local/libexec/opencode-pty-{n}" for n in ("supervisor", "launcher", "client")]

EXIT_SETUP_FAILED = 3
EXIT_TIMED_OUT = 124  # the suite did not end within the caller's deadline (it was stopped)


def inventory(supervisor: str = DEFAULT_SUPERVISOR, release: str = DEFAULT_RELEASE) -> str:
    """The inventory deploy.sh checks the `supervisor` implementation on a host of
    `release` against, and the suite runs with: inventories/reference[-<release>]
    [-python].yml (tests/reference/expected.py writes them all; the default
    release's names have no release in them)."""
    return ("inventories/reference" + ("" if release == DEFAULT_RELEASE else f"-{release}")
            + ("" if supervisor == "go" else f"-{supervisor}") + ".yml")


def said_of(output: str, tail: int = 40) -> str:
    """What a failing run's output says, for an assertion: the gate's BLOCKER
    lines first (a SUITE-5 stop is named far above the last lines), then its
    last `tail` lines."""
    lines = output.strip().splitlines()
    blockers = [l for l in lines if l.startswith("BLOCKER [")]
    return "\n".join(blockers + ["-- last lines --"] + lines[-tail:])


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)


def _collect(m: Machine, out: pathlib.Path) -> None:
    """Copy reports, marker, binaries and the journal out of the guest (best effort)."""
    notes: list[str] = []

    def attempt(what: str, fn) -> None:
        try:
            notes.extend(fn() or [])
        except (OSError, MachineError, subprocess.SubprocessError) as e:
            notes.append(f"could not collect {what}: {e}")
            log(notes[-1])

    if m.guest_exists(f"{GUEST_OUT}/reports"):
        attempt("reports", lambda: m.copy_out(f"{GUEST_OUT}/reports", out / "reports"))
    if m.guest_exists(GUEST_EVIDENCE):  # what --after-suite scripts left for the caller
        attempt("evidence", lambda: m.copy_out(GUEST_EVIDENCE, out / "evidence"))
    if m.guest_exists(MARKER):
        attempt("marker", lambda: m.copy_out(MARKER, out / "pty-supervisor-verified"))
    else:
        notes.append(f"no {MARKER} on the reference host")
        log(notes[-1])
    for b in BINARIES:
        if m.guest_exists(b):
            attempt(b, lambda b=b: m.copy_out(b, out / b.lstrip("/")))
    attempt("journal", lambda: m.journal(out / "journal.log"))
    if notes:
        (out / "collect-notes.txt").write_text("\n".join(notes) + "\n")


def _point_latest(reports_root: pathlib.Path, run_dir: pathlib.Path) -> None:
    tmp = reports_root / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    tmp.replace(reports_root / "latest")


def prepare(repo_root: pathlib.Path, release: str = DEFAULT_RELEASE) -> pathlib.Path:
    """The reference host's root tree of `release`, Node and the candidate build
    (cached); returns the tree."""
    tree = ensure_tree(release)
    npmdist.ensure_all()  # Node, the released opencode: bound read-only into the guest
    nodedist.ensure_sea(repo_root / "tests/reference/src/candidate/server.js")
    nodedist.ensure_sea(repo_root / "tests/reference/src/candidate/server.js", catches_sigusr1=True)  # a fault's
    return tree


def new_machine(repo_root: pathlib.Path, tree: pathlib.Path, name: str, out: pathlib.Path,
                before: list[pathlib.Path] = (), after: list[pathlib.Path] = (),
                binds: list[tuple[str, str, bool]] = ()) -> Machine:
    """A reference host (not booted yet) with the repo at GUEST_SRC (read-only) and a
    scratch directory at GUEST_OUT holding the before-/after-suite scripts; `binds`
    (host path, guest path, read-only) are added."""
    scratch = WORK_ROOT / name / "out"  # in the machine's work dir: removed with it
    m = Machine(tree, name=name, console_log=out / "console.log",
                binds=[(str(repo_root), GUEST_SRC, True), (str(scratch), GUEST_OUT, False),
                       *npmdist.binds(), *pinnedvenv.binds(repo_root, tree), *binds])
    try:
        scratch.mkdir(parents=True)
        for i, s in enumerate(before):
            shutil.copyfile(s, scratch / f"before-{i}.sh")
        for i, s in enumerate(after):
            shutil.copyfile(s, scratch / f"after-{i}.sh")
    except BaseException:
        m.shutdown()
        raise
    return m


def run_reference(repo_root: pathlib.Path, *, before_suite: list[os.PathLike | str] = (),
                  after_suite: list[os.PathLike | str] = (), keep: bool = False, pytest_args: list[str] = (),
                  out_dir: pathlib.Path | None = None,
                  suite_paths: list[str] = ("acceptance/",), quiet: bool = False,
                  suite_timeout: float | None = None, supervisor: str = DEFAULT_SUPERVISOR,
                  release: str = DEFAULT_RELEASE) -> int:
    """Boot a reference host, deploy, run the acceptance suite inside it. Returns the suite's status.

    `release` (tests/refhost/tree.py RELEASES) is the Debian release the host is
    booted from; `supervisor` (SUPERVISORS) the implementation deploy.sh
    installs; the suite runs against the matching inventory (inventory()).

    3 means deployment or a --before-suite script failed (logs are still collected);
    124 that the suite was still running `suite_timeout` seconds later and was stopped.
    after_suite scripts run inside (as root) once the suite has ended; their exit
    statuses and output go to AFTER_SUITE in the output directory ("<i> <status>"
    lines, then the output), so a caller can check what the suite must have left alone."""
    repo_root = pathlib.Path(repo_root).resolve()
    if supervisor not in SUPERVISORS:
        log(f"unknown supervisor implementation {supervisor!r}: one of {sorted(SUPERVISORS)}")
        return EXIT_SETUP_FAILED
    if release not in RELEASES:
        log(f"unknown release {release!r}: one of {sorted(RELEASES)}")
        return EXIT_SETUP_FAILED
    if not (repo_root / DEPLOY).is_file():
        log(f"{repo_root / DEPLOY} does not exist: nothing deploys the reference host")
        return EXIT_SETUP_FAILED
    before = [pathlib.Path(s) for s in before_suite]
    after = [pathlib.Path(s) for s in after_suite]
    for s in before + after:
        if not s.is_file():
            log(f"script {s} does not exist")
            return EXIT_SETUP_FAILED
    tree = prepare(repo_root, release)
    run_id = new_run_id()
    reports_root = repo_root / "reports" / "reference"
    out = out_dir if out_dir is not None else reports_root / run_id
    out.mkdir(parents=True, exist_ok=out_dir is not None)
    m = new_machine(repo_root, tree, f"ptyacc-{run_id.lower()}", out, before, after)
    status = EXIT_SETUP_FAILED
    try:
        m.boot()
        status = _deploy_and_test(m, before, pytest_args, list(suite_paths), quiet, suite_timeout, supervisor,
                                  release)
        (out / "suite-output.txt").write_bytes(getattr(m, "suite_output", b""))
        (out / SUITE_STDERR).write_bytes(getattr(m, "suite_errors", b"") or b"")
        if after and status != EXIT_SETUP_FAILED:
            (out / AFTER_SUITE).write_text(_after_suite(m, after))
        _collect(m, out)
    finally:
        if keep and m.leader:
            print(f"reference host {m.name} left running.\n"
                  f"  enter it:  nsenter -t {m.leader} -a bash\n"
                  f"  stop it:   python -m tests.refhost --cleanup   (the next run also removes it)",
                  file=sys.stderr)
        else:
            m.shutdown()
        if out_dir is None:
            _point_latest(reports_root, out)
    print(f"reference run {run_id} ({release}, supervisor {supervisor}): exit status {status}; reports in {out}",
          file=sys.stderr)
    return status


def _after_suite(m: Machine, after: list[pathlib.Path]) -> str:
    statuses, outputs = [], []
    for i, s in enumerate(after):
        r = m.run(["/bin/sh", f"{GUEST_OUT}/after-{i}.sh"], cwd=GUEST_SRC)
        statuses.append(f"{i} {r.returncode}")
        if r.returncode != 0:
            log(f"after-suite script {s} failed with exit status {r.returncode}")
        outputs.append(r.stdout.decode(errors="replace"))
    return "\n".join(statuses + outputs) + "\n"


def deploy(m: Machine, before: list[pathlib.Path], quiet: bool, supervisor: str = DEFAULT_SUPERVISOR,
           release: str = DEFAULT_RELEASE) -> bool:
    """Deploy the reference deployment (the `supervisor` implementation) in a booted
    host of `release` (deploy.sh refuses another), then run the before-suite scripts."""
    log(f"deploying: OPENCODE_REFERENCE_SUPERVISOR={supervisor} OPENCODE_REFERENCE_RELEASE={release} "
        f"/bin/sh {GUEST_SRC}/{DEPLOY}")
    r = m.run(["/bin/sh", f"{GUEST_SRC}/{DEPLOY}"], cwd=GUEST_SRC, stream=not quiet,
              env={"OPENCODE_REFERENCE_SUPERVISOR": supervisor, "OPENCODE_REFERENCE_RELEASE": release})
    if r.returncode != 0:
        log(f"deployment failed with exit status {r.returncode}")
        return False
    for i, s in enumerate(before):
        log(f"before-suite script {s}")
        r = m.run(["/bin/sh", f"{GUEST_OUT}/before-{i}.sh"], cwd=GUEST_SRC, stream=not quiet)
        if r.returncode != 0:
            log(f"before-suite script {s} failed with exit status {r.returncode}: not running the suite")
            return False
    return True


def _deploy_and_test(m: Machine, before: list[pathlib.Path], pytest_args: list[str],
                     suite_paths: list[str], quiet: bool, suite_timeout: float | None = None,
                     supervisor: str = DEFAULT_SUPERVISOR, release: str = DEFAULT_RELEASE) -> int:
    if not deploy(m, before, quiet, supervisor, release):
        return EXIT_SETUP_FAILED
    argv = [GUEST_PYTHON, "-m", "pytest", "-p", "no:cacheprovider", *suite_paths,
            "--inventory", inventory(supervisor, release), "--report-dir", f"{GUEST_OUT}/reports",
            *pytest_args]
    log("suite: " + " ".join(argv))
    try:
        r = m.run(argv, cwd=GUEST_SRC, env={"PYTHONDONTWRITEBYTECODE": "1"}, stream=not quiet,
                  timeout=suite_timeout)
    except subprocess.TimeoutExpired as e:  # m.run has stopped the suite's unit
        m.suite_output = (e.stdout or b"") + f"\n(the suite was still running {suite_timeout:g} s later: " \
            "stopped)\n".encode()
        log(f"suite: still running {suite_timeout:g} s later: stopped")
        return EXIT_TIMED_OUT
    m.suite_output = r.stdout
    m.suite_errors = r.stderr
    lines = r.stdout.decode(errors="replace").strip().splitlines()
    print(f"suite ({release}, {supervisor} supervisor): {lines[-1] if lines else '(no output)'} "
          f"(exit status {r.returncode})", file=sys.stderr)
    return r.returncode
