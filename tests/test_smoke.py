"""PLUGIN-1's runner (pty_acceptance/candidate/smoke.py) on this machine, as root:
refusals before any run (bun root-controlled and pinned, the harness pinned),
the cell bun runs from (root's copies of the pinned bytes), how a run is
judged, and how its working directory is read. The runs themselves, each in a
unit of its own, are tried on a reference host (tests/test_userunit.py)."""
import hashlib
import os
import pwd
import shutil
import types

import pytest

from pty_acceptance.candidate import smoke
from pty_acceptance.host import hostfs, killtrace, userunit
from pty_acceptance.spec.inventory import LIMIT_DEFAULTS

NOBODY = pwd.getpwnam("nobody")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs programs as nobody: needs root")
PINNED = b"#!/bin/sh\n# the reviewed harness\nexit 7\n"


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _inv(bun, harness, user="nobody", bun_sha256=None, harness_sha256=None):
    """An inventory whose pins are what bun and the harness hold now (unless given)."""
    def pin(path, given):
        if given is not None:
            return given
        try:
            return _sha(path)
        except OSError:
            return "0" * 64
    return types.SimpleNamespace(service_user=user, plugin=types.SimpleNamespace(
        bun=str(bun), bun_sha256=pin(bun, bun_sha256),
        harness=str(harness), harness_sha256=pin(harness, harness_sha256)),
        limit=lambda key: hostfs.Limit(LIMIT_DEFAULTS[key], f"limits.{key}"))


@pytest.fixture
def files(safe_dir, tmp_path):
    """bun root-owned 0755 under /run (every directory above root's), the
    harness the service user's own in /tmp (a user-owned harness is fine once
    pinned: what runs is a root-owned copy)."""
    bun, harness = safe_dir / "bun", tmp_path / "pty-plugin-smoke.ts"
    shutil.copyfile("/bin/sh", bun)
    bun.chmod(0o755)
    harness.write_bytes(PINNED)
    os.chown(harness, NOBODY.pw_uid, NOBODY.pw_gid)
    return bun, harness


def test_preflight_accepts_a_root_owned_pinned_bun_and_a_pinned_harness(files):
    checked = smoke.preflight(_inv(*files))
    assert checked.account.pw_uid == NOBODY.pw_uid
    assert checked.harness_bytes == PINNED
    assert checked.bun.startswith(f"{_sha(files[0])}  {files[0]} (root-owned")
    assert checked.harness.startswith(f"{hashlib.sha256(PINNED).hexdigest()}  {files[1]} "
                                      f"(uid {NOBODY.pw_uid} ")


@pytest.mark.parametrize("mode,why", [(0o4755, "set-user-ID"), (0o2755, "set-group-ID")])
def test_preflight_refuses_a_set_id_bun(files, mode, why):
    files[0].chmod(mode)
    with pytest.raises(smoke.HarnessRefused, match=why):
        smoke.preflight(_inv(*files))


def test_preflight_refuses_root_and_missing_files(tmp_path, files):
    with pytest.raises(smoke.HarnessRefused, match="never run as root"):
        smoke.preflight(_inv(*files, user="root"))
    with pytest.raises(smoke.HarnessRefused, match="bun .* does not exist"):
        smoke.preflight(_inv(tmp_path / "nope", files[1]))
    with pytest.raises(smoke.HarnessRefused, match="the harness .* does not exist"):
        smoke.preflight(_inv(files[0], tmp_path / "nope.ts"))
    os.symlink(files[0], files[0].parent / "link")
    with pytest.raises(smoke.HarnessRefused, match="symlink"):
        smoke.preflight(_inv(files[0].parent / "link", files[1]))


def test_a_bun_that_is_not_root_controlled_is_refused(files, tmp_path):
    """bun is run by path after it is hashed: only a file no one but root can
    change stays what was hashed (OWN-1's chain check)."""
    bun = files[0]
    os.chown(bun, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(smoke.HarnessRefused, match=f"bun {bun} is not root-controlled.*owned by uid {NOBODY.pw_uid}"):
        smoke.preflight(_inv(*files))
    os.chown(bun, 0, 0)
    bun.chmod(0o775)
    with pytest.raises(smoke.HarnessRefused, match="writable by group"):
        smoke.preflight(_inv(*files))
    in_tmp = tmp_path / "bun"  # /tmp is writable by everyone: whoever could rename it away
    shutil.copyfile("/bin/sh", in_tmp)
    in_tmp.chmod(0o755)
    with pytest.raises(smoke.HarnessRefused, match="/tmp is writable by group and other"):
        smoke.preflight(_inv(in_tmp, files[1]))


def test_a_bun_or_harness_that_is_not_the_pinned_one_is_refused(files):
    """A harness replaced by `process.exit(0)` passed PLUGIN-1 (issue 21 item 3)."""
    other = "12" * 32
    with pytest.raises(smoke.HarnessRefused, match=f"bun {files[0]} hashes to {_sha(files[0])}, the inventory "
                                            f"pins {other} \\(plugin.bun_sha256\\)"):
        smoke.preflight(_inv(*files, bun_sha256=other))
    files[1].write_bytes(b"process.exit(0)\n")
    with pytest.raises(smoke.HarnessRefused, match=f"harness {files[1]} \\(uid {NOBODY.pw_uid} .*hashes to "
                                            f"{_sha(files[1])}, the inventory pins "
                                            f"{hashlib.sha256(PINNED).hexdigest()} \\(plugin.harness_sha256"):
        smoke.preflight(_inv(*files, harness_sha256=hashlib.sha256(PINNED).hexdigest()))


def test_a_harness_that_is_a_link_or_a_fifo_is_not_opened(files, tmp_path):
    link = tmp_path / "link.ts"
    os.symlink(files[1], link)
    with pytest.raises(smoke.HarnessRefused, match="symlink, not a regular file \\(not followed\\)"):
        smoke.preflight(_inv(files[0], link, harness_sha256=_sha(files[1])))
    fifo = tmp_path / "fifo.ts"
    os.mkfifo(fifo)
    with pytest.raises(smoke.HarnessRefused, match="FIFO, not a regular file"):  # and it does not hang
        smoke.preflight(_inv(files[0], fifo, harness_sha256=_sha(files[1])))


def test_the_cell_holds_root_owned_copies_of_the_pinned_bytes(files):
    """The user owns the original harness: what runs is the suite's cell, root's
    copies of the pinned bytes (bun execute-only: it runs non-dumpable), and an
    empty bunfig.toml; swapping the original afterwards changes nothing."""
    inv = _inv(*files)
    checked = smoke.preflight(inv)
    cell = smoke.stage(checked, inv.plugin)
    try:
        d = os.lstat(cell.path)
        assert (d.st_uid, d.st_mode & 0o7777) == (0, 0o755)
        modes = {n: (st.st_uid, st.st_gid, st.st_mode & 0o7777, st.st_nlink)
                 for n in os.listdir(cell.path) for st in [os.lstat(os.path.join(cell.path, n))]}
        assert modes == {"bun": (0, 0, 0o711, 1), files[1].name: (0, 0, 0o444, 1), "bunfig.toml": (0, 0, 0o444, 1),
                     smoke.GATE_NAME: (0, 0, 0o711, 1), userunit.PYVENV_CFG: (0, 0, 0o644, 1)}
        assert open(os.path.join(cell.path, "bun"), "rb").read() == open(files[0], "rb").read()
        assert open(os.path.join(cell.path, files[1].name), "rb").read() == PINNED
        assert open(os.path.join(cell.path, "bunfig.toml"), "rb").read() == b""
        files[1].write_bytes(b"#!/bin/sh\nexit 0\n")  # the user's swap, after the check
        assert cell.check().startswith(f"bun copy {_sha(files[0])}  {cell.path}/bun; harness copy ")
        assert cell.argv(["--x"]) == ("/tmp/pty-acceptance-cell/bun", "--config=/tmp/pty-acceptance-cell/bunfig.toml",
                                      "--no-env-file", "--no-install",
                                      f"/tmp/pty-acceptance-cell/{files[1].name}", "--x")
    finally:
        smoke.unstage(cell)
    assert not os.path.lexists(cell.path)


def test_a_bun_that_changes_while_it_is_copied_is_refused(files):
    inv = _inv(*files)
    checked = smoke.preflight(inv)
    with open(files[0], "ab") as f:  # another build in bun's place after the preflight
        f.write(b"x")
    with pytest.raises(smoke.HarnessRefused, match="bun .* hashes to .*, the inventory pins"):
        smoke.stage(checked, inv.plugin)


@pytest.mark.parametrize("change", ["content", "mode", "link"])
def test_before_every_run_both_copies_are_checked_again(files, change):
    inv = _inv(*files)
    cell = smoke.stage(smoke.preflight(inv), inv.plugin)
    bun = os.path.join(cell.path, "bun")
    try:
        if change == "content":
            with open(bun, "ab") as f:
                f.write(b"x")
        elif change == "mode":
            os.chmod(bun, 0o755)
        else:
            os.link(bun, os.path.join(cell.path, "second-name"))
        with pytest.raises(smoke.HarnessRefused, match="hashes to|not root's 0711 with one"):
            cell.check()
    finally:
        smoke.unstage(cell)


def test_run_refuses_root(files):
    inv = _inv(*files)
    cell = smoke.stage(smoke.preflight(inv), inv.plugin)
    try:
        with pytest.raises(smoke.HarnessRefused, match="never run as root"):
            smoke.run(cell, types.SimpleNamespace(), "x", [], pwd.getpwnam("root"), 5)
    finally:
        smoke.unstage(cell)


SUCCESS = types.SimpleNamespace(last_line=r"^PASS \d+/\d+ checks ", result_file=r"^smoke-result-\d{3}\.json$",
                                results_per_run=1)


def _run(output=b"ok  a\nPASS 9/9 checks (smoke-result-001.json)\n", files=None, home=None, **ended):
    e = userunit.Ended("pty-acceptance-plugin-smoke-0.service", ("bun",), 60.0,
                       **{"exit_status": 0, "duration_s": 2.5, "traced": killtrace.Verdict(), **ended})
    e.output, e.output_bytes = output, len(output)
    return smoke.Run("1/10", e, files if files is not None else {"smoke-result-001.json": b"{}"}, home or {})


def test_a_run_passes_only_on_exit_0_with_the_harness_s_own_success_report():
    assert smoke.judge(_run(), SUCCESS) == []
    # the planted preload of issue 29: exit 0 in 10 ms, no output, no result file
    why = smoke.judge(_run(output=b"", files={}, duration_s=0.01), SUCCESS)
    assert len(why) == 2, why
    assert why[0].startswith("its last line '' is not the harness's success report (plugin.success.last_line")
    assert "0 bytes of output in 0.01 s" in why[0]
    assert why[1].startswith("it left 0 result files matching plugin.success.result_file")
    two = {"smoke-result-001.json": b"{}", "smoke-result-002.json": b"{}"}
    assert "it left 2 result files" in smoke.judge(_run(files=two), SUCCESS)[0]
    unread = {"smoke-result-001.json": "not read: a hard link (more than one link to this file)"}
    why = smoke.judge(_run(files=unread), SUCCESS)
    assert "could not be read: smoke-result-001.json: not read: a hard link" in why[0]


def test_a_run_fails_on_how_it_ended_and_on_what_it_left():
    failed = _run(output=b"FAIL permissions (1 ms): mode 0775\nFAIL 1/9 checks: permissions (smoke-result-001.json)\n",
                  exit_status=1)
    # the harness's own last line says which of its checks failed (the operator's first clue)
    assert smoke.judge(failed, SUCCESS) == [
        "ended with exit 1 after 2.5 s; its last line 'FAIL 1/9 checks: permissions (smoke-result-001.json)'"]
    assert smoke.judge(_run(output=b"", exit_status=None, signal=9), SUCCESS) == [
        "ended with killed by signal 9 after 2.5 s; its last line ''"]
    why = smoke.judge(_run(exit_status=None, still_running=["pid 7 bun"]), SUCCESS)
    assert why == ["did not finish within its 60 s deadline; still running then: pid 7 bun"]
    why = smoke.judge(_run(left_behind=["pid 8 sleep"]), SUCCESS)
    assert why == ["left processes running after it exited (killed with its cgroup): pid 8 sleep"]
    assert "held open by a process outside its unit" in smoke.judge(_run(held_open=True), SUCCESS)[0]
    # the trace (host/killtrace.py): a run not traced, or one its trace finds a fault in, fails
    assert smoke.judge(_run(traced=None), SUCCESS) == ["it was not traced"]
    outside = killtrace.Verdict(from_outside=["pid 9 (/bin/sleep) was killed by SIGKILL, which no process of "
                                              "the run sent"])
    assert smoke.judge(_run(traced=outside), SUCCESS) == [
        "from outside the run: pid 9 (/bin/sleep) was killed by SIGKILL, which no process of the run sent"]
    planted = smoke.judge(_run(files={"smoke-result-001.json": b"{}", "bunfig.toml": b"", "p.ts": b""},
                               home={".bunfig.toml": b"", ".env.local": b""}), SUCCESS)
    assert planted == ["files bun would read as configuration were there after the run: HOME/.bunfig.toml, "
                       "HOME/.env.local, working directory/bunfig.toml"]


def test_results_are_read_by_descriptor_and_a_hard_link_is_not_read(tmp_path):
    (tmp_path / "r.json").write_text("{}")
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_text("root only")
    os.link(secret, tmp_path / "linked.json")
    os.mkfifo(tmp_path / "f")
    os.symlink("/etc/shadow", tmp_path / "s")
    got = smoke.read_results(str(tmp_path))
    assert got["r.json"] == b"{}"
    assert got["linked.json"].startswith("not read: ") and "is a hard link (a regular file with 2 links" in \
        got["linked.json"]
    assert got["f"].startswith("not read") and got["s"].startswith("not read")


def test_fill_and_inside():
    assert smoke.fill(["--helper", "{helper}", "--dir={workdir}/x"], "/h", "/w") == ["--helper", "/h", "--dir=/w/x"]
    assert smoke.inside("/p/plugins/x", "/p/plugins") and smoke.inside("/p/plugins", "/p/plugins/")
    assert not smoke.inside("/p/plugins-x", "/p/plugins")


def test_a_directory_the_user_fills_is_listed_within_a_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "NAMES_LISTED", 5)
    for i in range(8):
        (tmp_path / f"f{i}").write_text("x")
    assert "holds more than 5 names" in smoke.listing(str(tmp_path))
    assert len(smoke.read_results(str(tmp_path))) <= 5
