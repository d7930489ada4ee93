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
