"""PLUGIN-1's runner (pty_acceptance/candidate/smoke.py) on this machine, as root:
refusals before any run (bun root-controlled and pinned, the harness pinned),
the root-owned copy bun runs, the deadline, and how the working directory is read."""
import hashlib
import os
import pwd
import shutil
import tempfile
import types

import pytest

from pty_acceptance.candidate import smoke
from pty_acceptance.host import hostfs
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
    with pytest.raises(smoke.Refused, match=why):
        smoke.preflight(_inv(*files))


def test_preflight_refuses_root_and_missing_files(tmp_path, files):
    with pytest.raises(smoke.Refused, match="never run as root"):
        smoke.preflight(_inv(*files, user="root"))
    with pytest.raises(smoke.Refused, match="bun .* does not exist"):
        smoke.preflight(_inv(tmp_path / "nope", files[1]))
    with pytest.raises(smoke.Refused, match="the harness .* does not exist"):
        smoke.preflight(_inv(files[0], tmp_path / "nope.ts"))
    os.symlink(files[0], files[0].parent / "link")
    with pytest.raises(smoke.Refused, match="symlink"):
        smoke.preflight(_inv(files[0].parent / "link", files[1]))


def test_a_bun_that_is_not_root_controlled_is_refused(files, tmp_path):
    """bun is run by path after it is hashed: only a file no one but root can
    change stays what was hashed (OWN-1's chain check)."""
    bun = files[0]
    os.chown(bun, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(smoke.Refused, match=f"bun {bun} is not root-controlled.*owned by uid {NOBODY.pw_uid}"):
        smoke.preflight(_inv(*files))
    os.chown(bun, 0, 0)
    bun.chmod(0o775)
    with pytest.raises(smoke.Refused, match="writable by group"):
        smoke.preflight(_inv(*files))
    in_tmp = tmp_path / "bun"  # /tmp is writable by everyone: whoever could rename it away
    shutil.copyfile("/bin/sh", in_tmp)
    in_tmp.chmod(0o755)
    with pytest.raises(smoke.Refused, match="/tmp is writable by group and other"):
        smoke.preflight(_inv(in_tmp, files[1]))


def test_a_bun_or_harness_that_is_not_the_pinned_one_is_refused(files):
    """A harness replaced by `process.exit(0)` passed PLUGIN-1 (issue 21 item 3)."""
    other = "12" * 32
    with pytest.raises(smoke.Refused, match=f"bun {files[0]} hashes to {_sha(files[0])}, the inventory "
                                            f"pins {other} \\(plugin.bun_sha256\\)"):
        smoke.preflight(_inv(*files, bun_sha256=other))
    files[1].write_bytes(b"process.exit(0)\n")
    with pytest.raises(smoke.Refused, match=f"harness {files[1]} \\(uid {NOBODY.pw_uid} .*hashes to "
                                            f"{_sha(files[1])}, the inventory pins "
                                            f"{hashlib.sha256(PINNED).hexdigest()} \\(plugin.harness_sha256"):
        smoke.preflight(_inv(*files, harness_sha256=hashlib.sha256(PINNED).hexdigest()))


def test_a_harness_that_is_a_link_or_a_fifo_is_not_opened(files, tmp_path):
    link = tmp_path / "link.ts"
    os.symlink(files[1], link)
    with pytest.raises(smoke.Refused, match="symlink, not a regular file \\(not followed\\)"):
        smoke.preflight(_inv(files[0], link, harness_sha256=_sha(files[1])))
    fifo = tmp_path / "fifo.ts"
    os.mkfifo(fifo)
    with pytest.raises(smoke.Refused, match="FIFO, not a regular file"):  # and it does not hang
        smoke.preflight(_inv(files[0], fifo, harness_sha256=_sha(files[1])))


def test_bun_runs_a_root_owned_copy_of_the_pinned_harness(files, tmp_path):
    """The user owns the original: replaced after the check, the run is still
    the pinned bytes' (here: exit 7, never the user's exit 0)."""
    inv = _inv(*files)
    checked = smoke.preflight(inv)
    d = smoke.stage_harness(checked.harness_bytes, files[1].name)
    copy = os.path.join(d, files[1].name)
    try:
        dst, fst = os.lstat(d), os.lstat(copy)
        assert (dst.st_uid, dst.st_mode & 0o7777) == (0, 0o755)
        assert (fst.st_uid, fst.st_gid, fst.st_mode & 0o7777) == (0, 0, 0o444)
        files[1].write_bytes(b"#!/bin/sh\nexit 0\n")  # the user's swap, after the check
        assert smoke.before_run(inv.plugin, copy).startswith(f"bun {_sha(files[0])}  ")
        work = _workdir()
        r = smoke.run("1/10", str(files[0]), copy, [], NOBODY, work, 20)
        assert r.exit_status == 7 and not r.passed, (r.exit_status, r.last_line)
    finally:
        smoke.unstage(d, files[1].name)
    assert not os.path.lexists(d)


def test_before_every_run_bun_and_the_copy_are_hashed_again(files):
    inv = _inv(*files)
    checked = smoke.preflight(inv)
    d = smoke.stage_harness(checked.harness_bytes, files[1].name)
    copy = os.path.join(d, files[1].name)
    try:
        with open(files[0], "ab") as f:  # another build in bun's place after the preflight
            f.write(b"x")
        with pytest.raises(smoke.Refused, match="bun .* hashes to .*, the inventory pins"):
            smoke.before_run(inv.plugin, copy)
    finally:
        smoke.unstage(d, files[1].name)


def test_run_refuses_root():
    with pytest.raises(smoke.Refused):
        smoke.run("x", "/bin/sh", "-c", ["true"], pwd.getpwnam("root"), "/", 5)


def _workdir():
    d = tempfile.mkdtemp()
    os.chown(d, NOBODY.pw_uid, NOBODY.pw_gid)
    return d


def test_deadline_kills_the_group_and_names_what_ran():
    d = _workdir()
    r = smoke.run("1/10", "/bin/sh", "-c", ["echo started; /bin/sleep 30 & /bin/sleep 31"], NOBODY, d, 1)
    assert r.exit_status is None and not r.passed
    assert any("sleep" in p for p in r.still_running), r.still_running
    assert r.duration_s < 10 and r.last_line == b"started"


def test_exit_status_last_line_leftovers_and_files():
    d = _workdir()
    r = smoke.run("2/10", "/bin/sh", "-c",
                  ["printf 'x\\033]0;t\\007\\nlast\\n'; echo '{}' > r-001.json; mkfifo f; ln -s /etc/shadow s;"
                   " /bin/sleep 30 & exit 0"], NOBODY, d, 20)
    assert r.exit_status == 0 and r.last_line == b"last"
    assert r.left_behind and not r.passed  # the backgrounded sleep outlived the harness
    assert r.files["r-001.json"] == b"{}\n"
    assert r.files["f"].startswith("not read") and r.files["s"].startswith("not read")
    assert r.output_bytes > 0


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
