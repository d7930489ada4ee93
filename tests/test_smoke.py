"""PLUGIN-1's runner (pty_acceptance/smoke.py) on this machine, as root:
refusals before any run, the deadline, and how the working directory is read."""
import os
import pwd
import tempfile
import types

import pytest

from pty_acceptance import smoke

NOBODY = pwd.getpwnam("nobody")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs programs as nobody: needs root")


def _inv(tmp_path, bun, harness, user="nobody"):
    return types.SimpleNamespace(service_user=user, plugin={"bun": str(bun), "harness": str(harness)})


@pytest.fixture
def files(tmp_path):
    bun, harness = tmp_path / "bun", tmp_path / "smoke.ts"
    bun.write_bytes(b"#!/bin/sh\n")
    bun.chmod(0o755)
    harness.write_text("//\n")
    return bun, harness


def test_preflight_accepts_a_plain_bun(tmp_path, files):
    assert smoke.preflight(_inv(tmp_path, *files)).pw_uid == NOBODY.pw_uid


@pytest.mark.parametrize("mode,why", [(0o4755, "set-user-ID"), (0o2755, "set-group-ID")])
def test_preflight_refuses_a_set_id_bun(tmp_path, files, mode, why):
    files[0].chmod(mode)
    with pytest.raises(smoke.Refused, match=why):
        smoke.preflight(_inv(tmp_path, *files))


def test_preflight_refuses_root_and_missing_files(tmp_path, files):
    with pytest.raises(smoke.Refused, match="never run as root"):
        smoke.preflight(_inv(tmp_path, *files, user="root"))
    with pytest.raises(smoke.Refused, match="bun .* does not exist"):
        smoke.preflight(_inv(tmp_path, tmp_path / "nope", files[1]))
    with pytest.raises(smoke.Refused, match="the harness .* does not exist"):
        smoke.preflight(_inv(tmp_path, files[0], tmp_path / "nope.ts"))
    os.symlink(files[0], tmp_path / "link")
    with pytest.raises(smoke.Refused, match="symlink"):
        smoke.preflight(_inv(tmp_path, tmp_path / "link", files[1]))


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
