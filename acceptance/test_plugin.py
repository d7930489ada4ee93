"""Plugin acceptance: the review's smoke harness under the host's bun.

PLUGIN-1 `bun <plugin.harness> <plugin.args>` passes ten times in a row, then
         once more with `<plugin.fresh_args>`, whose `{helper}` is the client
         BUILD-1 just built (root-owned 0755, bound read-only into the run)
         and `{workdir}` the run's working directory. bun and the harness are
         the reviewed ones: bun root-controlled (OWN-1's chain check), not
         elevated, hashing to plugin.bun_sha256; the harness, read once by
         descriptor, hashing to plugin.harness_sha256. What runs is the
         suite's cell (candidate/smoke.py): root-owned copies of the pinned
         bytes (bun execute-only, so it runs non-dumpable; the harness 0444)
         and an empty bunfig.toml, hashed again before every run. Each run is
         a transient unit of its own as the service user (no supplementary
         groups, no new privileges, a /tmp of its own, a fresh working
         directory and HOME made for that run alone in a root-owned 0700
         directory no other process of the user can enter, bun told to read
         no bunfig.toml, no .env and install nothing), bounded by
         plugin.deadline_s; its cgroup is killed and gone before it is judged.
         A run sees nothing of the user's home or trees: an empty read-only
         tmpfs over /home, /root, /run/user (and the user's home elsewhere),
         and at pilot_root and code_root, read-only, SCOPE-1's root-owned
         copies of the source manifest's files, each read once and hashed as
         copied (provenance/source_copy.py, the session's `source`): bun
         imports exactly the reviewed plugin bytes, no file beside them
         resolves, nothing changed after hashing runs. The copies must be the
         reviewed source (their manifest source_manifest_sha256) before any
         run and are hashed again before each. Each run is traced from its
         first instruction (root's strace, attached behind the cell's gate
         before bun is exec'd): a signal or a SIGKILL from outside the run, or
         a process whose end came after bun's, fails it (host/killtrace.py).
         A run passes only on exit 0
         together with the harness's own success report (plugin.success: its
         last line, one result file), nothing left running, nothing outside
         its unit holding its output, and no file bun would read as
         configuration in its working directory or HOME. Evidence per run: how it
         ended, its duration, its output's size and last line (escaped), the
         processes still running or left behind (killed with the cgroup), the
         files it left (read by descriptor, regular files with one link,
         size-bounded, escaped). No bun or no harness fails with that reason; a
         root service user, an elevated or not root-controlled bun, and a bun
         or harness that is not the pinned one are refused before any run.
"""

import os

import pytest

from pty_acceptance.candidate import smoke
from pty_acceptance.host import hostfs
from pty_acceptance.host import scratch
from pty_acceptance.host.terminal import escape
from pty_acceptance.gate.checks import expect, expect_none, finding, reading

RUNS = 10
FRESH_CLIENT = "opencode-pty-client"
HELPER_INSIDE = "/tmp/pty-acceptance-helper"  # where the fresh run sees the freshly built helper


@pytest.fixture(scope="module")
def checked(inv):
    return smoke.preflight(inv)  # a smoke.HarnessRefused fails PLUGIN-1 (the plugin's hooks)


@pytest.fixture(scope="module")
def seen(inv, checked, source):
    """What each run sees of the user's own: the source manifest's files as
    SCOPE-1 copied and hashed them, where the trees are; nothing else."""
    made, why = source
    if made is None:
        raise finding("PLUGIN-1", f"the source manifest's files cannot be copied, so no run can see the "
                                  f"reviewed plugin: {why}")
    return smoke.view(made, inv.source_manifest_sha256, inv.plugin, checked.account)  # HarnessRefused fails


@pytest.fixture(scope="module")
def cell(inv, checked):
    """The suite's cell: root-owned copies of the pinned bun (0711) and harness (0444)."""
    made = smoke.stage(checked, inv.plugin, smoke.limits(inv)[0])  # a smoke.HarnessRefused fails PLUGIN-1
    try:
        yield made
    finally:
        smoke.unstage(made)


def _text(b: bytes) -> str:
    return escape(b.decode("utf-8", errors="replace"), keep_newlines=True)


def _record(evidence, r: smoke.Run) -> None:
    e = r.ended
    evidence(f"run {r.label}", f"{e.ending()}, {e.duration_s:.2f} s (deadline {e.deadline_s:g} s), "
                               f"{e.output_bytes} bytes of output, last line "
                               f"{escape(r.last_line)!r}, unit {e.unit}")
    evidence(f"run {r.label} argv", escape(" ".join(r.argv)))
    if e.still_running:
        evidence(f"run {r.label} still running at the deadline", ", ".join(map(escape, e.still_running)))
    if e.left_behind:
        evidence(f"run {r.label} left running", ", ".join(map(escape, e.left_behind)))
    for where, found in (("file", r.files), ("HOME file", r.home)):
        for name, body in found.items():
            evidence(f"run {r.label} {where} {escape(name)}",
                     _text(body) if isinstance(body, bytes) else escape(body))


def _runs(inv, checked, cell, seen, evidence, labels, args_for, helper, read_only=()):
    """Run the harness once per label, each in a cell run of its own; the first
    failure fails the test. Before each run every copy is hashed again."""
    p = inv.plugin
    evidence("bun", checked.bun)
    evidence("harness", checked.harness)
    evidence("cell", f"{cell.path} (root-owned {smoke.COPY_DIR_MODE:04o}): bun {smoke.BUN_MODE:04o}, harness "
                     f"{smoke.COPY_MODE:04o}, empty {smoke.CONFIG_NAME}; seen read-only at {smoke.CELL_INSIDE}")
    evidence("bun options", " ".join(smoke.BUN_OPTIONS))
    evidence("each run", f"a transient unit as {inv.service_user}, PrivateTmp, working directory "
                         f"{smoke.WORK_INSIDE} and HOME {smoke.HOME_INSIDE} fresh for the run (on the host in a "
                         "root-owned 0700 directory), environment PATH HOME LANG TERM")
    evidence("success report", f"last line {p.success.last_line!r}, {p.success.results_per_run} file(s) "
                               f"{p.success.result_file!r}")
    evidence("what a run sees of the user's own", escape(seen.describe()))
    mine = smoke.listing(p.plugin_dir)  # evidence only: no run sees this directory
    beside = (", ".join(map(escape, sorted(mine - {n for n, _ in seen.plugin_files}))) or "nothing"
              if isinstance(mine, set) else escape(mine))
    evidence("beside them in the user's plugin directory, never seen by a run", beside)
    expect(not smoke.inside(smoke.WORK_INSIDE, p.plugin_dir), "PLUGIN-1",
           f"the working directory {smoke.WORK_INSIDE} is inside the plugin directory")
    for label in labels:
        with reading("PLUGIN-1", f"before run {label}", smoke.HarnessRefused):
            evidence(f"run {label} pinned", cell.check(smoke.limits(inv)))
            evidence(f"run {label} source", seen.check())
        r = smoke.run(cell, seen, label, smoke.fill(list(args_for), helper, smoke.WORK_INSIDE), checked.account,
                      p.deadline_s, read_only)
        _record(evidence, r)
        expect_none(map(escape, smoke.judge(r, p.success)), "PLUGIN-1", f"run {label}")


@pytest.mark.requirement("PLUGIN-1")
def test_harness_passes_ten_times_in_a_row(inv, checked, cell, seen, evidence):
    _runs(inv, checked, cell, seen, evidence, [f"{i}/{RUNS}" for i in range(1, RUNS + 1)],
          inv.plugin.args, inv.binaries.client.path)


@pytest.fixture
def fresh_helper(reproduced):
    """BUILD-1's client, root-owned 0755 in a fresh root-owned 0755 directory."""
    made, why = reproduced
    if made is None:
        raise finding("PLUGIN-1", f"no freshly built helper: BUILD-1 could not build: {why}")
    d = scratch.make("pty-acceptance-fresh-helper-", mode=0o755)
    try:
        dfd = hostfs.open_dir(d)
        try:
            hostfs.create_at(dfd, FRESH_CLIENT, made.sets[0].artifacts["client"], 0o755)
        finally:
            os.close(dfd)
        yield d, made.sets[0].sha256("client")
    finally:
        scratch.remove(d)


@pytest.mark.requirement("PLUGIN-1")
def test_harness_passes_against_the_fresh_helper(inv, checked, cell, seen, fresh_helper, evidence):
    d, digest = fresh_helper
    inside = f"{HELPER_INSIDE}/{FRESH_CLIENT}"
    evidence("fresh helper", f"{digest}  {d}/{FRESH_CLIENT} (BUILD-1's build a), seen read-only at {inside}")
    _runs(inv, checked, cell, seen, evidence, ["fresh"], inv.plugin.fresh_args, inside, ((d, HELPER_INSIDE),))
