"""pty_acceptance.candidate.serverenv: safe reading of server.env; the password never
leaks into evidence, reprs or messages."""

import os
import pickle

import pytest

from pty_acceptance.candidate import serverenv

PW = "hunter2-Ünïcode-9f8e7d"


def _env(tmp_path, text, mode=0o600, name="server.env"):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    os.chmod(p, mode)
    return str(p)


def _leaks(env):
    return [t for t in (env.describe(), repr(env), str(env), repr(env.password), str(env.password))
            if PW in t]


def test_password_found_and_never_shown(tmp_path):
    env = serverenv.read(_env(tmp_path, f"# pilot\nOTHER=1\nOPENCODE_PASSWORD={PW}\n"))
    assert env.kind == "regular file" and env.mode == 0o600 and env.uid == 0
    assert env.has_password and env.assignments == 1 and env.problem is None
    assert env.password.reveal() == PW
    assert not _leaks(env)
    assert "<redacted>" == repr(env.password) == f"{env.password}"
    with pytest.raises(TypeError):
        pickle.dumps(env.password)


@pytest.mark.parametrize("line,value", [
    (f'OPENCODE_PASSWORD="{PW}"', PW), (f"OPENCODE_PASSWORD='{PW}'", PW),
    (f"  OPENCODE_PASSWORD={PW}  \r", PW), ("OPENCODE_PASSWORD=a=b", "a=b"),
])
def test_value_forms(tmp_path, line, value):
    env = serverenv.read(_env(tmp_path, line + "\n"))
    assert env.has_password and env.password.reveal() == value


@pytest.mark.parametrize("text,count", [
    ("OPENCODE_PASSWORD=\n", 1), ('OPENCODE_PASSWORD=""\n', 1), ("OTHER=x\n", 0),
    ("# OPENCODE_PASSWORD=x\n", 0), ("XOPENCODE_PASSWORD=x\n", 0), ("OPENCODE_PASSWORD\n", 0),
    ("OPENCODE_PASSWORD=x\nOPENCODE_PASSWORD=\n", 2),  # the last one wins
])
def test_empty_or_absent(tmp_path, text, count):
    env = serverenv.read(_env(tmp_path, text))
    assert not env.has_password and env.password is None and env.assignments == count


def test_mode_and_kind_reported(tmp_path):
    env = serverenv.read(_env(tmp_path, f"OPENCODE_PASSWORD={PW}\n", mode=0o644))
    assert env.mode == 0o644 and env.has_password
    real = _env(tmp_path, f"OPENCODE_PASSWORD={PW}\n", name="real.env")
    link = tmp_path / "link.env"
    link.symlink_to(real)
    env = serverenv.read(str(link))
    assert env.kind == "symlink" and env.password is None and not env.has_password
    assert serverenv.read(str(tmp_path / "absent")).kind == "absent"
    assert serverenv.read(str(tmp_path)).kind == "directory"


def test_a_directory_of_the_path_made_a_link_is_not_followed(tmp_path):
    """The whole path is walked from / without following a link (issue 21
    item 9): not only the file's own name is judged."""
    real = tmp_path / "real"
    real.mkdir()
    _env(real, f"OPENCODE_PASSWORD={PW}\n")
    (tmp_path / "pilot").symlink_to(real)
    env = serverenv.read(str(tmp_path / "pilot" / "server.env"))
    assert env.kind == "unreadable" and env.password is None and env.content is None
    assert "pilot is a symlink, not a directory (not followed)" in env.problem
    assert serverenv.problems(env, 0) == [f"it is unreadable ({env.problem}), expected a regular file"]
    assert serverenv.read(str(tmp_path / "absent-dir" / "server.env")).kind == "absent"


def test_fifo_is_not_opened(tmp_path):
    fifo = tmp_path / "server.env"
    os.mkfifo(fifo)
    env = serverenv.read(str(fifo))  # must not block
    assert env.kind == "special file" and env.password is None


def test_size_bound(tmp_path):
    big = "#" * (serverenv.MAX_SIZE + 1) + f"\nOPENCODE_PASSWORD={PW}\n"
    env = serverenv.read(_env(tmp_path, big))
    assert env.password is None and "larger than" in env.problem and not _leaks(env)


def test_not_utf8_value(tmp_path):
    env = serverenv.read(_env(tmp_path, b"OPENCODE_PASSWORD=\xff\xfe\n"))
    assert env.password is None and "not UTF-8" in env.problem
    assert "\\xff" not in env.describe()


# ------------------------------------------------------------------ its variables (issue 37 item 2)
ALLOWED = ("OPENCODE_PASSWORD",)


@pytest.mark.parametrize("text,names", [
    (b"OPENCODE_PASSWORD=x\n", [(1, "OPENCODE_PASSWORD")]),
    (b"# c\n; c\n\n   \n\tOPENCODE_PASSWORD = x\n", [(5, "OPENCODE_PASSWORD")]),
    # systemd ends a line at "\r" too: an assignment after one is an assignment
    (b"OPENCODE_PASSWORD=x\rNODE_OPTIONS=--require=/p.js\n", [(1, "OPENCODE_PASSWORD"), (2, "NODE_OPTIONS")]),
    (b"OPENCODE_PASSWORD=x\r\nNODE_OPTIONS=--require=/p.js", [(1, "OPENCODE_PASSWORD"), (2, "NODE_OPTIONS")]),
    # a continuation or a multi-line value: systemd joins it, the suite judges every line (stricter)
    (b'OPENCODE_PASSWORD="a\nNODE_OPTIONS=--require=/p.js"\n', [(1, "OPENCODE_PASSWORD"), (2, "NODE_OPTIONS")]),
    (b"OPENCODE_PASSWORD=a\\\nb\n", [(1, "OPENCODE_PASSWORD"), (2, None)]),
    (b"export NODE_OPTIONS=x\n", [(1, "export NODE_OPTIONS")]),
])
def test_every_line_systemd_could_assign_is_named(text, names):
    assert list(serverenv.variables(text)) == names


def test_a_preload_is_a_cut3_finding_naming_it_never_its_value(tmp_path):
    """server.env passed CUT-3 with NODE_OPTIONS=--require=<user's js> appended (issue 37 item 2)."""
    preload = "/home/byk/.cache/p-9c1e.js"
    env = serverenv.read(_env(tmp_path, f"OPENCODE_PASSWORD={PW}\nNODE_OPTIONS=--require={preload}\n"))
    found = serverenv.problems(env, 0, allowed=ALLOWED)
    assert len(found) == 1 and found[0].startswith("sets NODE_OPTIONS (line 2: "), found
    assert "never allowed" in found[0]
    text = " ".join(found) + env.describe()
    assert preload not in text and PW not in text


@pytest.mark.parametrize("name", ["NODE_OPTIONS", "NODE_PATH", "NODE_EXTRA_CA_CERTS", "NODE_REPL_EXTERNAL_MODULE",
                                  "NODE_V8_COVERAGE", "NODE_COMPILE_CACHE", "LD_PRELOAD", "LD_LIBRARY_PATH",
                                  "LD_AUDIT", "GLIBC_TUNABLES", "GCONV_PATH", "MALLOC_CHECK_", "LOCPATH",
                                  "OPENSSL_CONF", "SSL_CERT_FILE", "BUN_OPTIONS", "UV_USE_IO_URING"])
def test_the_floor_refuses_it_even_listed(tmp_path, name):
    env = serverenv.read(_env(tmp_path, f"OPENCODE_PASSWORD={PW}\n{name}=x\n"))
    found = serverenv.problems(env, 0, allowed=(*ALLOWED, name))
    assert len(found) == 1 and found[0].startswith(f"sets {name} (line 2: ") and "never allowed" in found[0]


def test_what_the_inventory_does_not_list_is_a_finding(tmp_path):
    env = serverenv.read(_env(tmp_path, f"OPENCODE_PASSWORD={PW}\nOPENCODE_LOG_LEVEL=debug\nPATH=/x\n"))
    assert serverenv.problems(env, 0, allowed=(*ALLOWED, "PATH")) == [
        "sets OPENCODE_LOG_LEVEL (line 2): not in cutover.environment ['OPENCODE_PASSWORD', 'PATH']"]
    assert serverenv.problems(env, 0, allowed=(*ALLOWED, "PATH", "OPENCODE_LOG_LEVEL")) == []


def test_a_name_is_shown_bounded_and_escaped_and_a_bare_line_by_number(tmp_path):
    hostile = "\x1b]0;owned\x07" + "A" * 500
    env = serverenv.read(_env(tmp_path, f"OPENCODE_PASSWORD={PW}\n{hostile}=v\nrm -rf ~\n"))
    found = serverenv.problems(env, 0, allowed=ALLOWED)
    text = " ".join(found)
    assert "\x1b" not in text and "\x07" not in text and "A" * 100 not in text and "rm -rf" not in text
    assert "(510 characters)" in text and "line 3: neither blank, a comment nor a NAME=value assignment" in text


def test_many_names_are_counted_past_a_few(tmp_path):
    env = serverenv.read(_env(tmp_path, f"OPENCODE_PASSWORD={PW}\n" + "".join(f"V{i}=1\n" for i in range(20))))
    (found,) = serverenv.problems(env, 0, allowed=ALLOWED)
    assert found.count("(line") == serverenv.NAMES_SHOWN and "and 12 more" in found


def test_the_live_environment_is_read_from_that_very_process():
    """CUT-2 reads /proc/<pid>/environ of the identified listener: its names, never
    a value; another process at that pid (another start time) is refused."""
    import subprocess
    import psutil
    child = subprocess.Popen(["/bin/sleep", "30"], env={"NODE_OPTIONS": "--require=/home/u/p.js", "PATH": "/bin",
                                                        "OPENCODE_PASSWORD": PW})
    try:
        created = psutil.Process(child.pid).create_time()
        names = serverenv.live_environment(child.pid, created)
        assert sorted(names) == ["NODE_OPTIONS", "OPENCODE_PASSWORD", "PATH"]
        (refused,) = serverenv.refused_in(names)
        assert refused.startswith("NODE_OPTIONS (") and "p.js" not in refused
        with pytest.raises(serverenv.EnvironUnreadable, match="no longer the process identified"):
            serverenv.live_environment(child.pid, created - 5)
    finally:
        child.kill()
        child.wait()
    with pytest.raises(serverenv.EnvironUnreadable):
        serverenv.live_environment(child.pid, created)
    assert serverenv.refused_in(("PATH", "HOME", "INVOCATION_ID", "OPENCODE_PASSWORD")) == []


def test_a_server_env_changed_after_the_process_started_is_named(tmp_path):
    """CUT-2 (issue 37 round five): the candidate's environment is the file CUT-3
    judges only when the file, and every directory above it whose name anyone
    but root could relink, has not changed since before the process started; a
    rename in a directory of the path counts, a name only root can relink does
    not (the service user's home in a root-owned directory: entries made in it
    since are not a change of the path)."""
    import time
    from pty_acceptance.host import proc
    home = tmp_path / "home"
    pilot = home / "pilot"
    pilot.mkdir(parents=True)
    env = pilot / "server.env"
    env.write_text(f"OPENCODE_PASSWORD={PW}\n")
    os.chmod(tmp_path, 0o755)
    os.chown(home, 1000, 1000)  # the service user's home, in a directory root's alone
    os.chown(pilot, 1000, 1000)  # the service user's directory, in the user's home
    later = time.time_ns() + int(5e9)
    assert serverenv.changed_since(str(env), later) == []
    now = time.time_ns()
    changed = serverenv.changed_since(str(env), now)
    assert any(c.startswith(f"{env} changed (ctime)") for c in changed)
    assert any(c.startswith(f"{pilot} changed") for c in changed)
    assert not any(c.startswith(f"{home} ") for c in changed), changed  # only root can relink it
    assert not any(c.startswith("/ ") for c in changed)  # root's alone
    (home / "notes.txt").write_text("the user's own work after the start\n")
    assert serverenv.changed_since(str(env), later) == []
    os.rename(pilot, home / "elsewhere")  # a directory of the path renamed away: absent
    assert serverenv.changed_since(str(env), later) == [f"{pilot}: absent"]
    os.symlink(home / "elsewhere", pilot)  # and a link put in its place is not followed
    (why,) = serverenv.changed_since(str(env), later)
    assert "not followed" in why
    os.unlink(pilot)
    os.rename(home / "elsewhere", pilot)  # put back: its own ctime says so
    started_before = time.time_ns() - int(2e9)  # the candidate started before the put-back
    assert any(c.startswith(f"{pilot} changed") for c in serverenv.changed_since(str(env), started_before))
    os.chmod(tmp_path, 0o775)  # a directory others may write: the home's name is judged again
    assert any(c.startswith(f"{home} changed") for c in serverenv.changed_since(str(env), started_before))
    os.chmod(tmp_path, 0o755)
    import psutil
    started = proc.start_realtime_ns(os.getpid())  # psutil reads the same fact, to boot's second
    assert abs(started / 1e9 - psutil.Process().create_time()) < 1.1


@pytest.mark.parametrize("text", [
    b"OPENCODE_PASSWORD=\\\nZq7-wV3k-user-secret-tail=\n",        # systemd joins the lines
    b"OPENCODE_PASSWORD='ab'Zq7-wV3k-user-secret-tail\n",          # quoted text joined to more
    b"OPENCODE_PASSWORD='Zq7-wV3k\nuser-secret-tail='\n",         # a quoted value over lines
    b'OPENCODE_PASSWORD="Zq7-wV3k\\"user-secret-tail"\n',          # an escape
])
def test_a_server_env_systemd_reads_otherwise_is_not_judged_and_nothing_of_it_shown(tmp_path, text):
    """CUT-3 (a blind red team's round seven): where systemd's EnvironmentFile=
    parser and a line-by-line reading disagree, the password systemd gives the
    candidate is not the one this suite would redact, and a piece of it could be
    shown as a variable's name: the file is a finding, and nothing of it is shown."""
    env = tmp_path / "server.env"
    env.write_bytes(text)
    os.chmod(env, 0o600)
    read = serverenv.read(str(env))
    assert read.problem and "a backslash or a quote" in read.problem
    found = serverenv.problems(read, os.getuid())
    said = " ".join(found) + read.describe()
    assert "Zq7" not in said and "secret-tail" not in said and "user-secret" not in said, said
    assert any("content not read" in f for f in found), found


def test_a_plain_or_wholly_quoted_value_is_read_as_systemd_reads_it(tmp_path):
    env = tmp_path / "server.env"
    env.write_bytes(b"# it's the pilot's\nOPENCODE_PASSWORD='a b'\n")
    os.chmod(env, 0o600)
    read = serverenv.read(str(env))
    assert read.problem is None and read.password.reveal() == "a b"
