"""pty_acceptance.candidate.runtimeunit's readings (RUNTIME-2) without a host: the
candidate unit's command line, its environment file and the runtime file hashed."""

import hashlib
import os
import pwd
import subprocess

import pytest

from pty_acceptance.candidate import runtimeunit
from pty_acceptance.host import hostfs

LIMIT = hostfs.Limit(1 << 30, "limits.runtime_bytes")

NOBODY = pwd.getpwnam("nobody")
ALLOWED = ("OPENCODE_PASSWORD",)  # cutover.environment as the reference inventories list it

UNIT = """[Unit]
Description=candidate
[Service]
User=byk
WorkingDirectory=/home/byk
EnvironmentFile=-/etc/opt/a.env
EnvironmentFile=/home/byk/server.env
ExecStart=/opt/bin/opencode2-node serve --port 4096 --hostname 127.0.0.1
"""


def test_the_port_is_replaced_and_everything_else_kept():
    cmd = runtimeunit.candidate_command(UNIT, 5555)
    assert cmd.argv == ["/opt/bin/opencode2-node", "serve", "--port", "5555", "--hostname", "127.0.0.1"]
    assert cmd.working_directory == "/home/byk"
    assert cmd.environment_files == [("/etc/opt/a.env", True), ("/home/byk/server.env", False)]
    eq = runtimeunit.candidate_command(UNIT.replace("--port 4096", "--port=4096"), 6000)
    assert eq.argv[2:4] == ["--port", "6000"]


@pytest.mark.parametrize("change, why", [
    (("--port 4096", ""), "--port N or --port=N"),
    (("--port 4096", "--port 1 --port 2"), "--port N or --port=N"),
    (("127.0.0.1", "127.0.0.1 --port"), "--port N or --port=N"),
    (("serve", "%h/serve"), "specifiers"),
    (("ExecStart=/opt", "ExecStart=/opt/x\nExecStart=/opt"), "2 ExecStart= lines"),
    (("WorkingDirectory=/home/byk", "WorkingDirectory=home"), "not an absolute path or ~"),
    (("EnvironmentFile=/home", "EnvironmentFile=home"), "not an absolute path"),
])
def test_commands_the_suite_cannot_run_as_written_are_refused(change, why):
    with pytest.raises(runtimeunit.HandoffError, match=why):
        runtimeunit.candidate_command(UNIT.replace(*change), 5555)


# ------------------------------------------------------------------ the runtime's environment
SERVER_ENV = "/home/byk/server.env"
ROOT_SECRET = "pty-acceptance-handoff-root-only-7f3e"


def test_every_environment_file_must_be_server_env():
    """Issue 21 item 9: only cutover.server_env gives the runtime its
    environment; anything else fails naming the path, escaped and bounded."""
    runtimeunit.environment_only_from([(SERVER_ENV, False)], SERVER_ENV)
    runtimeunit.environment_only_from([(SERVER_ENV, True)], SERVER_ENV)  # "-" or not
    with pytest.raises(runtimeunit.HandoffError) as e:
        runtimeunit.environment_only_from([(SERVER_ENV, False), ("/root/vault/secret", False),
                                       ("/home/byk/x\x1b[2J" + "y" * 300, True)], SERVER_ENV)
    msg = str(e.value)
    assert "'/root/vault/secret'" in msg and "\\x1b[2J" in msg and "\x1b" not in msg
    assert "y" * 185 in msg and "y" * 186 not in msg and "nothing was read" in msg  # 200 characters
    with pytest.raises(runtimeunit.HandoffError, match="no EnvironmentFile=: expected exactly"):
        runtimeunit.environment_only_from([], SERVER_ENV)


@pytest.fixture
def envdir(safe_dir, monkeypatch):
    """A root-only file beside a server.env the service user (nobody) owns, and
    the run directory the root-only copy goes to."""
    from pty_acceptance.host import rundir
    monkeypatch.setattr(rundir, "_current", str(safe_dir / "run"))
    secret = safe_dir / "secret"
    secret.write_text(f"ROOT_ONLY={ROOT_SECRET}\n")
    secret.chmod(0o600)
    env = safe_dir / "server.env"
    env.write_text("OPENCODE_PASSWORD=pw-of-the-runtime\n")
    env.chmod(0o600)
    os.chown(env, NOBODY.pw_uid, NOBODY.pw_gid)
    return secret, env


def test_a_root_only_environment_file_is_never_read(envdir, monkeypatch):
    secret, env = envdir
    read = []
    monkeypatch.setattr(runtimeunit.serverenv, "read", lambda p: read.append(p))
    with pytest.raises(runtimeunit.HandoffError) as e:
        runtimeunit.private_environment([(str(secret), False), (str(env), False)], "0badc0de",
                                    server_env=str(env), owner=(NOBODY.pw_uid, NOBODY.pw_gid), allowed=ALLOWED)
    assert str(secret) in str(e.value) and ROOT_SECRET not in str(e.value)
    assert read == []


def test_server_env_is_copied_only_after_cut3s_checks(envdir, safe_dir):
    secret, env = envdir
    owner = (NOBODY.pw_uid, NOBODY.pw_gid)
    copy = runtimeunit.private_environment([(str(env), True)], "0badc0de", server_env=str(env), owner=owner,
                                                allowed=ALLOWED)
    try:
        st = os.lstat(copy)
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o600)
        assert open(copy).read() == "OPENCODE_PASSWORD=pw-of-the-runtime\n"
    finally:
        os.unlink(copy)
    for change, why in [(lambda: os.chown(env, 0, 0), f"owned by uid 0, expected {NOBODY.pw_uid}"),
                        (lambda: os.chown(env, NOBODY.pw_uid, 0), f"group gid 0, expected {NOBODY.pw_gid}"),
                        (lambda: env.chmod(0o644), "mode 0644, expected exactly 0600"),
                        (lambda: env.write_text("OTHER=1\n"), "no OPENCODE_PASSWORD= line"),
                        # the user's preload in the runtime's only environment: never started (issue 37 item 2)
                        (lambda: env.write_text("OPENCODE_PASSWORD=pw\nNODE_OPTIONS=--require=/home/u/p.js\n"),
                         r"sets NODE_OPTIONS \(line 2: .*never allowed.*the runtime is not started with it"),
                        (lambda: env.write_text("OPENCODE_PASSWORD=pw\nOPENCODE_LOG=1\n"),
                         r"sets OPENCODE_LOG \(line 2\): not in cutover.environment")]:
        env.write_text("OPENCODE_PASSWORD=pw-of-the-runtime\n")
        env.chmod(0o600)
        os.chown(env, *owner)
        change()
        with pytest.raises(runtimeunit.HandoffError, match=why):
            runtimeunit.private_environment([(str(env), False)], "0badc0de", server_env=str(env), owner=owner,
                                                allowed=ALLOWED)
    # a directory of its path made a link is not followed (the whole chain is walked, not only the file)
    os.chown(env, *owner)
    env.chmod(0o600)
    env.write_text("OPENCODE_PASSWORD=pw-of-the-runtime\n")
    (safe_dir / "link").symlink_to(safe_dir)
    linked = str(safe_dir / "link" / "server.env")
    with pytest.raises(runtimeunit.HandoffError, match="link is a symlink, not a directory"):
        runtimeunit.private_environment([(linked, False)], "0badc0de", server_env=linked, owner=owner, allowed=ALLOWED)


# ------------------------------------------------------------------ the runtime it runs
@pytest.fixture
def sleeper(safe_dir):
    """A stand-in runtime (a root-owned copy of sleep) and its SHA-256."""
    path = safe_dir / "opencode2-node"
    path.write_bytes(open("/bin/sleep", "rb").read())
    path.chmod(0o755)
    return str(path), hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_runtime_is_hashed_by_descriptor_before_the_start(sleeper, safe_dir):
    path, pin = sleeper
    hashed = runtimeunit.open_runtime(path, pin, LIMIT)
    os.close(hashed.fd)
    assert hashed.before == pin and hashed.dev_ino == (os.stat(path).st_dev, os.stat(path).st_ino)
    with pytest.raises(runtimeunit.HandoffError, match=f"hashes to {pin} before the start, the pin "
                                                   f"runtime.sha256 .* is {'ab' * 32}: not started"):
        runtimeunit.open_runtime(path, "ab" * 32, LIMIT)
    (safe_dir / "bin").symlink_to(safe_dir)
    with pytest.raises(runtimeunit.HandoffError, match="without following a link"):
        runtimeunit.open_runtime(str(safe_dir / "bin" / "opencode2-node"), pin, LIMIT)


def test_what_runs_is_judged_by_the_kept_descriptor_not_the_path(sleeper):
    """Issue 21 item 4: the user owns the runtime's directory and can rename
    another file into its place between RUNTIME-1's read and RUNTIME-2's
    start; the process must execute the very file that was hashed."""
    path, pin = sleeper
    hashed = runtimeunit.open_runtime(path, pin, LIMIT)
    procs = []
    try:
        procs.append(subprocess.Popen([path, "30"]))
        assert runtimeunit.runs_hashed(procs[0].pid, hashed) is None
        assert runtimeunit.hash_again(procs[0].pid, hashed, pin, LIMIT) is None and hashed.after == pin
        other = path + ".other"  # a working runtime, one byte longer, renamed into place
        with open(other, "wb") as f:
            f.write(open(path, "rb").read() + b"x")
        os.chmod(other, 0o755)
        os.rename(other, path)
        procs.append(subprocess.Popen([path, "30"]))
        why = runtimeunit.runs_hashed(procs[1].pid, hashed)
        assert why and f"not {path} as hashed before the start" in why, why
        assert "not " + path in runtimeunit.hash_again(procs[1].pid, hashed, pin, LIMIT)
        assert runtimeunit.runs_hashed(procs[0].pid, hashed) is None  # the old process runs the hashed file
    finally:
        os.close(hashed.fd)
        for p in procs:
            p.kill()
            p.wait()


def test_runtime_2_reads_the_candidate_unit_scope_1_copied_not_the_users():
    """RUNTIME-2 (a red team's round five): the candidate unit in the service
    user's tree may be rewritten after SCOPE-1 read it; where the manifest
    holds it, the run reads the root-owned copy SCOPE-1 hashed."""
    from types import SimpleNamespace
    from pty_acceptance.candidate import handoff
    from pty_acceptance.provenance.source_copy import SourceCopy
    unit = "/home/byk/.local/share/opencode-v2-pilot/opencode-v2.service"
    inv = SimpleNamespace(units=SimpleNamespace(candidate_file=unit))
    copy = SourceCopy(top="/run/pty-acceptance-source-x", files=((unit, "0" * 64),), listing="", digest="",
                      roots=("/home/byk/.local/share/opencode-v2-pilot",))
    assert handoff.unit_file(inv, copy) == "/run/pty-acceptance-source-x" + unit
    assert handoff.unit_file(inv, None) == unit
    elsewhere = SimpleNamespace(units=SimpleNamespace(candidate_file="/etc/systemd/system/opencode-v2.service"))
    assert handoff.unit_file(elsewhere, copy) == "/etc/systemd/system/opencode-v2.service"


def test_what_stood_at_the_runtimes_path_when_it_started_is_the_hashed_file(tmp_path):
    """RUNTIME-2 (a blind red team's round seven): the runtime's bin/ in the
    service user's tree exchanged for a wrapper's while the unit started, and
    exchanged back by the wrapper: the path, read once the runtime runs, must
    be the hashed file, with nothing on it the user could relink changed since
    the process started."""
    import subprocess
    import time

    from pty_acceptance.candidate.runtimeunit import Hashed, exec_path_problem
    from pty_acceptance.host import proc
    os.chmod(tmp_path, 0o755)
    bindir = tmp_path / "tree" / "bin"
    bindir.mkdir(parents=True)
    binary = bindir / "opencode2-node"
    binary.write_bytes(b"\x7fELF")
    for d in (tmp_path / "tree", bindir):
        os.chown(d, 1000, 1000)
    st = os.stat(binary)
    newest = max(os.stat(p).st_ctime_ns for p in (binary, bindir, tmp_path / "tree"))
    while time.time_ns() < newest + int(0.2e9):  # the runtime starts after its tree was made
        time.sleep(0.01)  # poll interval
    runtime = subprocess.Popen(["/bin/sleep", "30"])
    try:
        hashed = Hashed(str(binary), -1, (st.st_dev, st.st_ino), "0" * 64)
        assert exec_path_problem(runtime.pid, hashed) is None
        os.rename(bindir, tmp_path / "tree" / "bin.w")  # exchanged, and back
        os.rename(tmp_path / "tree" / "bin.w", bindir)
        why = exec_path_problem(runtime.pid, hashed)
        assert why and f"{bindir} changed (ctime)" in why and "a wrapper" in why, why
        binary.rename(bindir / "real")
        binary.write_bytes(b"#!/bin/sh\n")  # a wrapper left at the path
        why = exec_path_problem(runtime.pid, hashed)
        assert why and "not the file hashed before the start" in why, why
        assert proc.start_realtime_ns(runtime.pid) > newest
    finally:
        runtime.kill()
        runtime.wait()
