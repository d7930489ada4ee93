"""pty_acceptance.provenance.node_runtime: static identification of the Node runtime, the
listener lookup and the candidate unit's ExecStart, on small fake binaries."""

import hashlib
import os
import socket
import sys

import pytest

from pty_acceptance.provenance import node_runtime

S = node_runtime.SENTINEL
URL = b"https://nodejs.org/download/release/v26.4.0/"


def _write(tmp_path, data, name="bin"):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def _pad(n, byte=b"\x7f"):
    return byte * n


@pytest.mark.parametrize("chunk", [1, 7, 64, 128, 1000, 1 << 20])
def test_fused_sea_with_version_any_chunking(tmp_path, chunk):
    data = _pad(333) + S + b":1" + _pad(500) + URL + _pad(10) + URL + _pad(77)
    p = _write(tmp_path, data)
    ident = node_runtime.identify(p, chunk=chunk)
    assert ident.fuse == node_runtime.FUSED and ident.sea
    assert ident.version == "v26.4.0" and ident.version_count == 2 and ident.version_problem() is None
    assert ident.sha256 == hashlib.sha256(data).hexdigest() and ident.size == len(data)
    assert ident.fuse_offsets == (333,)


def test_sentinel_and_url_split_across_every_boundary(tmp_path):
    chunk = 4096
    for split in range(0, len(S) + 3):
        data = _pad(chunk - split) + S + b":1" + _pad(chunk - 20) + URL + _pad(5)
        ident = node_runtime.identify(_write(tmp_path, data), chunk=chunk)
        assert ident.fuse == node_runtime.FUSED, split
        assert ident.fuse_offsets == (chunk - split,)
        assert ident.version == "v26.4.0" and ident.version_count == 1, split
    for split in range(0, len(URL) + 1):
        data = _pad(chunk - split) + URL + _pad(300) + S + b":0"
        ident = node_runtime.identify(_write(tmp_path, data), chunk=chunk)
        assert ident.version == "v26.4.0" and ident.version_count == 1, split
        assert ident.fuse == node_runtime.PLAIN, split


def test_plain_node_binary(tmp_path):
    ident = node_runtime.identify(_write(tmp_path, S + b":0" + URL))
    assert ident.fuse == node_runtime.PLAIN and not ident.sea


def test_no_sentinel_is_not_node(tmp_path):
    ident = node_runtime.identify(_write(tmp_path, b"\x7fELF" + _pad(1000) + URL))
    assert ident.fuse == node_runtime.NOT_NODE and not ident.sea


def test_no_release_url(tmp_path):
    ident = node_runtime.identify(_write(tmp_path, S + b":1" + b"https://nodejs.org/download/release/latest/"))
    assert ident.version is None and "no embedded Node release URL" in ident.version_problem()


def test_two_versions_are_ambiguous(tmp_path):
    data = S + b":1" + URL + _pad(100) + b"https://nodejs.org/download/release/v24.11.1/"
    ident = node_runtime.identify(_write(tmp_path, data), chunk=50)
    assert ident.version is None
    assert ident.version_problem() == "ambiguous: several embedded Node versions ['v26.4.0', 'v24.11.1']"


def test_node24_major():
    assert node_runtime.major("v24.11.1") == 24 and node_runtime.major("v26.4.0") == 26
    assert node_runtime.major("") is None


def test_two_sentinels_and_unknown_fuse_states(tmp_path):
    ident = node_runtime.identify(_write(tmp_path, S + b":1" + _pad(10) + S + b":1"))
    assert ident.fuse.startswith("ambiguous: 2 fuse sentinels") and not ident.sea
    ident = node_runtime.identify(_write(tmp_path, S + b":7" + _pad(10)))
    assert ident.fuse == "unknown fuse state b':7' at 0"
    ident = node_runtime.identify(_write(tmp_path, _pad(10) + S))  # truncated at EOF
    assert ident.fuse == "unknown fuse state b'' at 10"
    ident = node_runtime.identify(_write(tmp_path, S + b":"), chunk=3)
    assert ident.fuse == "unknown fuse state b':' at 0"


def test_symlink_and_non_regular_refused(tmp_path):
    real = _write(tmp_path, S + b":1" + URL)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(node_runtime.RuntimeUnreadable, match="is a symlink"):
        node_runtime.identify(str(link))
    with pytest.raises(node_runtime.RuntimeUnreadable, match="not a regular file"):
        node_runtime.identify(str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(node_runtime.RuntimeUnreadable, match="not a regular file"):
        node_runtime.identify(str(fifo))
    with pytest.raises(node_runtime.RuntimeUnreadable, match="does not exist"):
        node_runtime.identify(str(tmp_path / "absent"))


def test_real_node_binaries():
    """The reference host's real runtimes (fetched and pinned by the harness)."""
    from tests.refhost import nodedist

    sea = node_runtime.identify(str(nodedist.ensure_sea()))
    assert sea.fuse == node_runtime.FUSED and sea.version == "v26.4.0"
    plain = node_runtime.identify(str(nodedist.CACHE_DIR / "v26.4.0/bin/node"))
    assert plain.fuse == node_runtime.PLAIN and plain.version == "v26.4.0"
    old = node_runtime.identify(str(nodedist.CACHE_DIR / "v24.16.0/bin/node"))
    assert old.fuse == node_runtime.PLAIN and node_runtime.major(old.version) == 24


# -- the listener --------------------------------------------------------------

def test_listener_is_this_process():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        found = node_runtime.listener(port)
    finally:
        s.close()
    assert found.problem is None, found.problem
    assert found.pid == os.getpid() and found.uids == (0, 0, 0) and found.create_time
    real = os.path.realpath(sys.executable)
    assert node_runtime.same_file(real, found.exe_dev_ino)[0]
    assert found.addresses == (f"127.0.0.1:{port}",)


def test_listener_symlink_path_never_matches(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        found = node_runtime.listener(s.getsockname()[1])
    finally:
        s.close()
    link = tmp_path / "python"
    link.symlink_to(os.path.realpath(sys.executable))
    same, why = node_runtime.same_file(str(link), found.exe_dev_ino)
    assert not same and "symlink" in why
    other = _write(tmp_path, b"x")
    same, why = node_runtime.same_file(other, found.exe_dev_ino)
    assert not same and "the process runs" in why


def test_nothing_listening():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert node_runtime.listener(port).problem == f"nothing listens on TCP port {port}"


# -- ExecStart -----------------------------------------------------------------

UNIT = """\
# comment
[Unit]
Description=x
ExecStart=/not/service/section

[Service]
Type=simple
ExecStart={value}
"""


@pytest.mark.parametrize("value,program", [
    ("/opt/bin/opencode2-node serve --port 14102", "/opt/bin/opencode2-node"),
    ("-/opt/bin/opencode2-node serve", "/opt/bin/opencode2-node"),
    ("@/opt/bin/opencode2-node opencode2 serve", "/opt/bin/opencode2-node"),
    ("-+!/opt/bin/opencode2-node", "/opt/bin/opencode2-node"),
    ('"/opt/my dir/node" serve', "/opt/my dir/node"),
    ("%h/bin/node", "%h/bin/node"),
])
def test_exec_start_program(value, program):
    assert node_runtime.exec_start_program(UNIT.format(value=value))[0] == program


def test_exec_start_continuation_reset_and_absence():
    text = "[Service]\nExecStart=/a/b \\\n  --flag\n"
    assert node_runtime.exec_start_program(text)[0] == "/a/b"
    text = "[Service]\nExecStart=/a\nExecStart=\nExecStart=/c\n"
    assert node_runtime.exec_start_program(text)[0] == "/c"
    prog, why = node_runtime.exec_start_program("[Service]\nExecStart=/a\nExecStart=/b\n")
    assert prog is None and "2 times" in why
    prog, why = node_runtime.exec_start_program("[Unit]\nExecStart=/a\n")
    assert prog is None and why == "no ExecStart= in [Service]"
    prog, why = node_runtime.exec_start_program("[Service]\n;ExecStart=/a\n#ExecStart=/b\n")
    assert prog is None
