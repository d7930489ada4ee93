"""SUITE-4 for UNIT-7's stand-in listeners: made as root in a directory the
service user may write (/run/user/<uid>), they never change ownership or mode
by path. Here the "user" swaps the socket for a link to a root file right
after bind, or plants a link in the directory chain: the file it points to
keeps its owner and mode, and nothing is made behind the link."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from pty_acceptance.host import standin_listener


def _mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_makes_directories_and_socket_by_descriptor_and_removes_them(tmp_path):
    path = tmp_path / "user" / "run" / "bus"
    with standin_listener.standin_listener(str(path), uid=os.getuid(), gid=os.getgid(), mode=0o600,
                                  dir_uid=os.getuid(), dir_gid=os.getgid(), dir_mode=0o700) as (p, made):
        assert made and p == str(path)
        assert stat.S_ISSOCK(os.lstat(path).st_mode) and _mode(path) == 0o600
        assert _mode(tmp_path / "user") == 0o700 and _mode(tmp_path / "user" / "run") == 0o700
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(str(path))
        c.close()
    assert not os.path.lexists(tmp_path / "user")


def test_existing_socket_is_left_alone(tmp_path):
    path = tmp_path / "bus"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    try:
        before = os.lstat(path)
        with standin_listener.standin_listener(str(path), mode=0o600) as (_, made):
            assert not made
        after = os.lstat(path)
        assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    finally:
        s.close()


def test_socket_swapped_for_a_link_after_bind_is_refused_and_not_followed(tmp_path, monkeypatch):
    """The race of issue 11 item 2: bind, then the user replaces the socket by a
    link to a root file before root's chown/chmod. The old code (os.chown and
    os.chmod by path) handed the file over; now its mode stays 0644."""
    victim = tmp_path / "shadow"
    victim.write_text("root's secret\n")
    os.chmod(victim, 0o644)
    user_dir = tmp_path / "run-user"
    user_dir.mkdir()
    real_socket = socket.socket

    class Swapping(real_socket):
        def bind(self, address):
            super().bind(address)
            os.unlink(address)
            os.symlink(victim, address)

    monkeypatch.setattr(socket, "socket", Swapping)
    with pytest.raises(standin_listener.StandinError, match="swapped for a symlink"):
        with standin_listener.standin_listener(str(user_dir / "bus"), uid=os.getuid(), gid=os.getgid(),
                                      mode=0o600):
            pass
    assert _mode(victim) == 0o644
    assert victim.read_text() == "root's secret\n"
    assert os.path.islink(user_dir / "bus")  # the user's link is left where it is, untouched


def test_link_in_the_directory_chain_is_refused(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    os.chmod(real, 0o755)
    (tmp_path / "user").symlink_to(real)
    with pytest.raises(standin_listener.StandinError, match="symlink"):
        with standin_listener.standin_listener(str(tmp_path / "user" / "sub" / "bus"), mode=0o600,
                                      dir_mode=0o700):
            pass
    assert os.listdir(real) == [] and _mode(real) == 0o755
