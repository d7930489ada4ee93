"""SUITE-4 in hostfs: removal by descriptor (a FIFO swapped in where a
directory was is unlinked, never opened; a link is unlinked, never followed;
every bound stops it and says what is left) and bounded reads (a sparse
8 TiB file is refused by its size, at once, naming the limit).

Whatever could hang runs in a child process with a deadline: a regression
hangs a child, not the suite."""

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from pty_acceptance.host import hostfs

from childrun import TIB, in_child, sparse


def remove(parent: Path, name: str, **kw) -> hostfs.Removal:
    fd = hostfs.open_dir(str(parent))
    try:
        return hostfs.remove_tree_at(fd, name, str(parent / name), **kw)
    finally:
        os.close(fd)


# ------------------------------------------------------------ bounded reads
def test_a_sparse_8_tib_file_is_refused_by_its_size_before_a_byte_is_read(safe_dir):
    big = sparse(safe_dir / "big")
    limit = hostfs.Limit(32 << 20, "limits.file_bytes")
    t0 = time.monotonic()
    for read in (lambda: hostfs.sha256_file(str(big), limit), lambda: hostfs.read_file(str(big), limit)):
        with pytest.raises(hostfs.TooLarge) as e:
            read()
        assert str(e.value) == f"{big} is {8 * TIB} bytes, over limits.file_bytes = 33554432 bytes: not read"
    assert time.monotonic() - t0 < 1


def test_a_file_that_grows_past_its_limit_while_read_is_refused(safe_dir, monkeypatch):
    f = safe_dir / "f"
    f.write_bytes(b"x" * 100)
    real = os.read
    monkeypatch.setattr(hostfs.os, "read", lambda fd, n: real(fd, n) + b"y" * 100)  # it grows
    with pytest.raises(hostfs.TooLarge, match="grew past limits.x = 150 bytes"):
        hostfs.sha256_file(str(f), hostfs.Limit(150, "limits.x"))


def test_the_default_limit_keeps_existing_callers_bounded(safe_dir):
    big = sparse(safe_dir / "big")
    with pytest.raises(hostfs.TooLarge, match=f"over the suite's built-in limit = {hostfs.DEFAULT_LIMIT} bytes"):
        hostfs.sha256_nofollow(str(big))


# ------------------------------------------------------------ removal
def test_a_fifo_where_a_directory_was_is_unlinked_never_opened(safe_dir):
    """A FIFO with no writer blocks whoever opens it for reading: the removal
    must unlink it, at the top and inside."""
    (safe_dir / "top/sub").mkdir(parents=True)
    os.mkfifo(safe_dir / "top/sub/inner-fifo")
    os.mkfifo(safe_dir / "fifo-at-top")
    r = in_child(f"""
from pty_acceptance.host import hostfs
import os
fd = hostfs.open_dir({str(safe_dir)!r})
for name in ("top", "fifo-at-top"):
    r = hostfs.remove_tree_at(fd, name, name)
    print(name, r.complete, r.removed, r.left)
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["top True 3 []", "fifo-at-top True 1 []"]
    assert not os.path.lexists(safe_dir / "top") and not os.path.lexists(safe_dir / "fifo-at-top")


def test_directories_swapped_for_fifos_while_the_removal_runs_never_hang_it(safe_dir):
    """What the user can do inside its own workspace while root removes it:
    every directory in it renamed and a FIFO put in its place, over and over."""
    r = in_child(f"""
import os, threading
from pty_acceptance.host import hostfs
base = {str(safe_dir)!r}
top = os.path.join(base, "top")
for i in range(40):
    os.makedirs(os.path.join(top, f"d{{i}}", "deeper"))
    open(os.path.join(top, f"d{{i}}", "deeper", "f"), "w").close()
stop, swaps = threading.Event(), [0]

def swapper():
    while not stop.is_set():
        for i in range(40):
            d = os.path.join(top, f"d{{i}}")
            try:
                os.rename(d, d + f".{{swaps[0]}}")
                os.mkfifo(d)
                swaps[0] += 1
            except OSError:
                pass

t = threading.Thread(target=swapper, daemon=True)
t.start()
fd = hostfs.open_dir(base)
rounds = 0
while True:
    rounds += 1
    r = hostfs.remove_tree_at(fd, "top", top)
    if rounds == 3:
        stop.set()
        t.join()
    if r.complete and rounds >= 3:
        break
print("SWAPS", swaps[0], "ROUNDS", rounds, "GONE", not os.path.lexists(top))
""")
    assert r.returncode == 0, r.stderr
    words = r.stdout.split()
    assert words[0] == "SWAPS" and int(words[1]) > 0, r.stdout
    assert words[-1] == "True", r.stdout


def test_a_link_inside_to_a_directory_outside_is_unlinked_and_never_followed(safe_dir):
    outside = safe_dir / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep/file").write_text("keep me\n")
    top = safe_dir / "top"
    (top / "a").mkdir(parents=True)
    (top / "a/link-dir").symlink_to(outside)
    (top / "link-file").symlink_to(outside / "keep/file")
    r = remove(safe_dir, "top")
    assert r.complete and r.removed == 4, r.left
    assert not os.path.lexists(top)
    assert (outside / "keep/file").read_text() == "keep me\n"


def test_the_depth_bound_stops_it_and_says_what_is_left(safe_dir):
    deep = safe_dir / "top"
    path = deep
    for i in range(12):
        path = path / f"l{i}"
    path.mkdir(parents=True)
    r = remove(safe_dir, "top", depth=5)
    assert not r.complete and "past the depth bound of the removal, not entered" in r.describe()
    assert str(deep / "l0/l1/l2/l3/l4/l5") in r.describe()
    assert deep.is_dir()


def test_the_entry_bound_stops_it_and_says_so(safe_dir):
    top = safe_dir / "top"
    top.mkdir()
    for i in range(50):
        (top / f"f{i}").write_text("x")
    r = remove(safe_dir, "top", entries=10)
    assert not r.complete and r.removed == 10
    assert "the bound of" in r.describe() and len(os.listdir(top)) == 40


def test_a_directory_the_user_keeps_filling_stops_after_its_passes(safe_dir, monkeypatch):
    top = safe_dir / "top"
    top.mkdir()
    real_rmdir, added = os.rmdir, []

    def refilled(name, dir_fd=None):  # the user adds an entry just before each rmdir
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
        try:
            os.close(os.open(f"new{len(added)}", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        finally:
            os.close(fd)
        added.append(name)
        raise OSError(errno.ENOTEMPTY, "Directory not empty")

    monkeypatch.setattr(hostfs.os, "rmdir", refilled)
    r = remove(safe_dir, "top", passes=3)
    monkeypatch.setattr(hostfs.os, "rmdir", real_rmdir)
    assert not r.complete
    assert r.left == [f"{top}: still not empty after 3 passes (something keeps adding entries)"]


def test_with_an_identity_only_that_very_directory_is_removed(safe_dir):
    (safe_dir / "d").mkdir()
    st = os.lstat(safe_dir / "d")
    (safe_dir / "d").rename(safe_dir / "made")
    (safe_dir / "d").mkdir()  # another directory at that name now
    r = remove(safe_dir, "d", ident=(st.st_dev, st.st_ino))
    assert not r.complete and "left alone" in r.left[0]
    assert (safe_dir / "d").is_dir()


def test_a_mount_point_inside_is_not_entered(safe_dir):
    top = safe_dir / "top"
    (top / "mnt").mkdir(parents=True)
    (top / "file").write_text("x")
    subprocess.run(["/bin/mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(top / "mnt")], check=True)
    try:
        (top / "mnt/theirs").write_text("on another filesystem\n")
        r = remove(safe_dir, "top")
        assert not r.complete and f"{top}/mnt: another filesystem is mounted there, not entered" in r.left
        assert (top / "mnt/theirs").read_text() == "on another filesystem\n"
    finally:
        subprocess.run(["/bin/umount", str(top / "mnt")], check=True)
