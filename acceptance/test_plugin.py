"""Plugin acceptance: the review's smoke harness under the host's bun.

PLUGIN-1 `bun <plugin.harness> <plugin.args>` passes (exit 0) ten times in a
         row, as the service user with a fixed environment, from a fresh 0700
         directory outside the auto-discovered plugin directory
         (plugin.plugin_dir); then once more with `<plugin.fresh_args>`, whose
         `{helper}` is the client BUILD-1 just built (written root-owned, 0755,
         into a fresh directory of its own) and `{workdir}` that run's fresh
         directory. bun and the harness are the reviewed ones: bun must be
         root-controlled (OWN-1's chain check) and hash to plugin.bun_sha256;
         the harness, read once by descriptor, must hash to
         plugin.harness_sha256, and bun runs a root-owned 0444 copy of those
         bytes in a root-owned 0755 directory of the suite's own; both are
         hashed again by descriptor before every run. Every run has a deadline
         (plugin.deadline_s, default 120 s): at the deadline its process group
         is killed and what was still running is named. Evidence per run: exit
         status, duration, last output line (escaped), the files it left in its
         directory (read by descriptor, regular files only, size-bounded,
         escaped). A run fails PLUGIN-1 when it exits non-zero, outlives its
         deadline, leaves a process behind or changes the plugin directory's
         listing. No bun or no harness fails with that reason; a root service
         user, a bun that would run with other privileges (set-ID bits, file
         capabilities) or is not root's, and a bun or harness that is not the
         pinned one are refused before any run.
"""

import os

import pytest

from pty_acceptance.candidate import smoke
from pty_acceptance.host import hostfs
from pty_acceptance.host import scratch
from pty_acceptance.supervisor.peer import workspace
from pty_acceptance.host.terminal import escape
from pty_acceptance.gate.marks import fail

RUNS = 10
FRESH_CLIENT = "opencode-pty-client"


@pytest.fixture(scope="module")
def checked(inv):
    try:
        return smoke.preflight(inv)
    except smoke.Refused as e:
        fail(f"PLUGIN-1: {e}")


@pytest.fixture(scope="module")
def harness_copy(inv, checked):
    """The pinned harness bytes, root-owned 0444 in a root-owned 0755 directory: what bun runs."""
    name = os.path.basename(inv.plugin.harness)
    d = smoke.stage_harness(checked.harness_bytes, name)
    try:
        yield os.path.join(d, name)
    finally:
        smoke.unstage(d, name)


def _text(b: bytes) -> str:
    return escape(b.decode("utf-8", errors="replace"), keep_newlines=True)


def _record(evidence, r: smoke.Run) -> None:
    status = "killed at the deadline" if r.exit_status is None else f"exit {r.exit_status}"
    evidence(f"run {r.label}", f"{status}, {r.duration_s:.2f} s (deadline {r.deadline_s:.0f} s), "
                               f"{r.output_bytes} bytes of output, last line "
                               f"{escape(r.last_line.decode('utf-8', errors='replace'))!r}")
    evidence(f"run {r.label} argv", escape(" ".join(r.argv)))
    if r.still_running:
        evidence(f"run {r.label} still running at the deadline", ", ".join(map(escape, r.still_running)))
    if r.left_behind:
        evidence(f"run {r.label} left running", ", ".join(map(escape, r.left_behind)))
    for name, body in r.files.items():
        evidence(f"run {r.label} file {escape(name)}",
                 _text(body) if isinstance(body, bytes) else escape(body))


def _why(r: smoke.Run) -> str:
    last = escape(r.last_line.decode("utf-8", errors="replace"))
    if r.exit_status is None:
        return (f"run {r.label} did not finish within its {r.deadline_s:.0f} s deadline; still running "
                f"then: {', '.join(map(escape, r.still_running)) or 'nothing listed'}; last line {last!r}")
    if r.exit_status != 0:
        return f"run {r.label} exited {r.exit_status} after {r.duration_s:.1f} s; last line {last!r}"
    return f"run {r.label} left processes running after it exited: {', '.join(map(escape, r.left_behind))}"


def _runs(inv, checked, copy, evidence, labels, args_for, helper):
    """Run the harness once per label in one fresh workspace; the first failure fails the test.
    Before each run bun and the harness copy are hashed again: not the pinned ones, no run."""
    p = inv.plugin
    evidence("bun", checked.bun)
    evidence("harness", checked.harness)
    evidence("harness copy run by bun", f"{copy} (root-owned {smoke.COPY_MODE:04o}, directory "
                                        f"root-owned {smoke.COPY_DIR_MODE:04o})")
    deadline = p.deadline_s
    before = smoke.listing(p.plugin_dir)
    if isinstance(before, str):
        fail(f"PLUGIN-1: the plugin directory: {before}")
    with workspace(inv.service_user, "pty-acceptance-plugin-") as (workdir, _):
        if smoke.inside(workdir, p.plugin_dir):
            fail(f"PLUGIN-1: the working directory {workdir} is inside the plugin directory")
        evidence("working directory", f"{workdir} (fresh, 0700, {inv.service_user})")
        for label in labels:
            try:
                evidence(f"run {label} pinned", smoke.before_run(p, copy, smoke.limits(inv)))
            except smoke.Refused as e:
                fail(f"PLUGIN-1: before run {label}: {e}")
            r = smoke.run(label, p.bun, copy, smoke.fill(args_for, helper, workdir),
                          checked.account, workdir, deadline)
            _record(evidence, r)
            after = smoke.listing(p.plugin_dir)
            changed = sorted(after ^ before) if isinstance(after, set) else [after]
            if changed:
                fail(f"PLUGIN-1: run {label} changed the plugin directory "
                     f"{p.plugin_dir}: {', '.join(map(escape, changed))}")
            if not r.passed:
                fail(f"PLUGIN-1: {_why(r)}")


@pytest.mark.requirement("PLUGIN-1")
def test_harness_passes_ten_times_in_a_row(inv, checked, harness_copy, evidence):
    _runs(inv, checked, harness_copy, evidence, [f"{i}/{RUNS}" for i in range(1, RUNS + 1)],
          inv.plugin.args, inv.binaries.client.path)


@pytest.fixture
def fresh_helper(reproduced):
    """BUILD-1's client, root-owned 0755 in a fresh root-owned 0755 directory."""
    made, why = reproduced
    if made is None:
        fail(f"PLUGIN-1: no freshly built helper: BUILD-1 could not build: {why}")
    d = scratch.make("pty-acceptance-fresh-helper-", mode=0o755)
    try:
        dfd = hostfs.open_dir(d)
        try:
            hostfs.create_at(dfd, FRESH_CLIENT, made.sets[0].artifacts["client"], 0o755)
        finally:
            os.close(dfd)
        yield os.path.join(d, FRESH_CLIENT), made.sets[0].sha256("client")
    finally:
        scratch.remove(d)


@pytest.mark.requirement("PLUGIN-1")
def test_harness_passes_against_the_fresh_helper(inv, checked, harness_copy, fresh_helper, evidence):
    path, digest = fresh_helper
    evidence("fresh helper", f"{digest}  {path} (BUILD-1's build a)")
    _runs(inv, checked, harness_copy, evidence, ["fresh"], inv.plugin.fresh_args, path)
