"""The run's scratch area (SUITE-4, SUITE-5; issue 21 items 11 and 12).

A workspace handed to the service user used to be a directory of its own in
sticky /tmp: the user could rename it and put a FIFO in its place, and root's
cleanup (shutil.rmtree opens the path O_RDONLY) blocked forever. A SIGKILLed
run left such directories forever (only root-owned ones were removed at the
next start). Now every such directory lives under a root-owned 0755 scratch
root recorded in the run directory: the user cannot rename it, root removes
it by descriptor, and the next run removes what a killed one left.

The root-side code runs in child processes with a deadline: a regression
hangs a child, not the suite."""

import os
import select
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from pty_acceptance.host import rundir, scratch
from gateproject import last_line, run

DEADLINE_S = 30
NOBODY = 65534

HOLDER = """
import sys
from pty_acceptance.host import rundir
from pty_acceptance.supervisor import peer
rundir.use({run!r})
with peer.workspace("nobody", "pty-acceptance-cwd-") as (d, _):
    print(d, flush=True)
    sys.stdin.readline()  # until the test has done its worst
print("CLEANED", flush=True)
"""


def private_tmp(safe_dir: Path) -> Path:
    """A root-owned sticky 1777 directory standing in for /tmp."""
    tmp = safe_dir / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    return tmp


def holder(safe_dir: Path, tmp: Path) -> subprocess.Popen:
    code = HOLDER.format(run=f"{safe_dir}/run")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, TMPDIR=str(tmp),
                                                             PYTHONPATH=str(REPO / "acceptance")))


def killed_holder(safe_dir: Path, tmp: Path) -> str:
    """A process that made a workspace for nobody, SIGKILLed: the workspace."""
    p = holder(safe_dir, tmp)
    try:
        return line_of(p)
    finally:
        p.kill()
        p.wait()


def line_of(p: subprocess.Popen, deadline_s: float = DEADLINE_S) -> str:
    if not select.select([p.stdout], [], [], deadline_s)[0]:
        pytest.fail(f"no line from the child within {deadline_s} s")
    return p.stdout.readline().decode().strip()


def as_nobody(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/usr/bin/python3", "-c", code], user=NOBODY, group=NOBODY, extra_groups=[],
                          capture_output=True, text=True, timeout=DEADLINE_S, cwd="/")


SWAP = """
import os, sys
d = sys.argv[1]
try:
    os.rename(d, d + ".moved")
except OSError as e:
    print("rename refused:", e.strerror)
    sys.exit(0)
os.mkfifo(d)
print("swapped for a FIFO")
"""


def test_a_workspace_its_user_swaps_for_a_fifo_is_still_removed_at_once(safe_dir):
    """The user renames the workspace and puts a FIFO in its place: the
    cleanup must not block on it, and must remove the workspace."""
    tmp = private_tmp(safe_dir)
    p = holder(safe_dir, tmp)
    try:
        d = line_of(p)
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == NOBODY
        swap = as_nobody(SWAP.replace("sys.argv[1]", repr(d)))
        p.stdin.write(b"\n")
        p.stdin.flush()
        try:
            out, err = p.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the cleanup of {d} still blocks {DEADLINE_S} s later (the user: {swap.stdout!r})")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert b"CLEANED" in out, err
    assert swap.stdout.startswith("rename refused: Permission denied"), swap.stdout + swap.stderr
    assert not os.path.lexists(d) and not os.path.lexists(d + ".moved")
    assert os.listdir(tmp) == [], "the scratch area was left"
    assert os.listdir(safe_dir / "run") == [], "the scratch area's record was left"


def test_the_scratch_root_is_roots_0755_and_recorded_until_it_is_removed(safe_dir, monkeypatch):
    tmp = private_tmp(safe_dir)
    monkeypatch.setattr(rundir, "_current", str(safe_dir / "run"))
    monkeypatch.setattr(scratch, "_root", None)
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp))
    d = scratch.make("pty-acceptance-x-", owner=(NOBODY, NOBODY))
    root = os.path.dirname(d)
    st = os.lstat(root)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o755)
    assert os.path.dirname(root) == str(tmp) and os.path.basename(root).startswith(scratch.PREFIX)
    (record,) = [n for n in os.listdir(safe_dir / "run") if rundir.SCRATCH_RECORD.match(n)]
    assert f'"path": "{root}"' in (safe_dir / "run" / record).read_text()
    assert as_nobody(f"import os; os.rename({d!r}, {d + '.x'!r})").returncode != 0
    assert scratch.finish() == []
    assert not os.path.lexists(root) and os.listdir(safe_dir / "run") == []


def test_a_temporary_directory_others_may_rename_in_is_refused(safe_dir, monkeypatch):
    tmp = safe_dir / "tmp"
    tmp.mkdir()
    tmp.chmod(0o777)  # no sticky bit
    monkeypatch.setattr(scratch, "_root", None)
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp))
    with pytest.raises(scratch.ScratchError, match="writable by group/other without the sticky bit"):
        scratch.make("pty-acceptance-x-")
    assert os.listdir(tmp) == []


def test_the_next_run_removes_the_workspaces_a_sigkilled_run_handed_out(project, target, safe_dir,
                                                                        monkeypatch):
    """Only root-owned pty-acceptance-* directories used to be removed at the
    next start: the user's workspaces and build directories stayed forever."""
    import tempfile

    tmp = private_tmp(safe_dir)
    monkeypatch.setattr(rundir, "DEFAULT_DIR", f"{safe_dir}/run")  # the host's lock, moved
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    d = killed_holder(safe_dir, tmp)
    assert os.lstat(d).st_uid == NOBODY, "the SIGKILLed holder left nothing: nothing to show"
    res = run(project, target)
    text = "\n".join(res.outlines)
    assert last_line(res).startswith("READY: marker written"), res.outlines[-20:]
    assert not os.path.lexists(d), f"{d} was left: " + text[-2000:]
    assert os.listdir(tmp) == [], os.listdir(tmp)
    assert f"scratch area {os.path.dirname(d)}: removed" in text, text[-3000:]
    assert sorted(os.listdir(safe_dir / "run")) == ["lock"]


def test_a_scratch_area_replaced_since_is_left_alone(safe_dir):
    tmp = private_tmp(safe_dir)
    d = killed_holder(safe_dir, tmp)
    root = Path(os.path.dirname(d))
    os.rename(root, tmp / "elsewhere")
    root.mkdir()  # someone else's directory at that name now (a new inode)
    (root / "keep").write_text("keep me\n")
    said = rundir.clean_first(f"{safe_dir}/run")
    assert said == [f"scratch area {root}: left alone, a directory of uid 0 that is not the one the "
                    "crashed run made"]
    assert (root / "keep").read_text() == "keep me\n"


def test_a_removal_that_stops_at_a_bound_blocks_the_marker(project, target, monkeypatch):
    """The user fights the cleanup of its workspace: what the run made and
    handed out stays, and the gate says so."""
    project.makepyfile(**{"acceptance/test_ws.py": """
import pytest
from pty_acceptance.host import hostfs
from pty_acceptance.supervisor import peer

@pytest.mark.requirement("OWN-2")
def test_ws(monkeypatch):
    real = hostfs.remove_tree_at
    with peer.workspace("nobody", "pty-acceptance-cwd-") as (d, _):
        open(d + "/f", "w").close()
        # as if the user kept adding entries: no pass ever finds it empty
        monkeypatch.setattr(hostfs, "remove_tree_at", lambda *a, **kw: real(*a, **{**kw, "passes": 0}))
"""})
    res = run(project, target)
    text = "\n".join(res.outlines)
    assert "NOT READY" in last_line(res) and "SUITE-4" in last_line(res), text[-2000:]
    assert "a directory the run made and handed out was not removed:" in text
