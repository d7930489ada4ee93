"""The reference smoke harness's run counter (tests/reference/src/fault-count.py),
run here as its socket unit would start it: a caller outside the suite's
plugin smoke run units is refused and counts nothing, a unit's callers get one
number however often they ask, and a caller that never closes holds up no one.
On a reference host the fault catalogue's `plugin-user-floods-run-counter`
tries it as the service user."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time

import pytest

from conftest import REPO

SOURCE = (REPO / "tests/reference/src/fault-count.py").read_text()
START = ("import os, sys; os.dup2(int(sys.argv[1]), 3); os.environ.update(LISTEN_PID=str(os.getpid()), "
         "LISTEN_FDS='1'); os.execv('/usr/bin/python3', ['/usr/bin/python3', '-I', sys.argv[2]])")


def _own_unified_cgroup() -> str:
    for line in open("/proc/self/cgroup").read().splitlines():
        if line.startswith("0::"):
            return line[3:]
    pytest.skip("no cgroup2 line in /proc/self/cgroup")


@pytest.fixture
def counter(safe_dir, request):
    """The counter on a socket of its own; with `counted` its rule counts this
    test's own cgroup as if it were a plugin smoke run unit."""
    source = SOURCE
    if getattr(request, "param", "") == "counted":
        own = re.escape(_own_unified_cgroup())
        source = re.sub(r"^RUN_UNIT = .*$", f'RUN_UNIT = re.compile(r"^0::({own})$")', source, flags=re.M)
    script = safe_dir / "fault-count.py"
    script.write_text(source)
    path = str(safe_dir / "s.sock")  # not in /tmp, which others on this machine clean
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    try:  # the listening socket at fd 3 of the counter, as systemd passes it (moved there before the exec)
        proc = subprocess.Popen(["/usr/bin/python3", "-I", "-c", START, str(srv.fileno()), str(script)],
                                pass_fds=(srv.fileno(),), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    finally:
        srv.close()
    try:
        yield path
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()


def _ask(path: str) -> str:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(5)
    try:
        c.connect(path)
        got = b""
        while chunk := c.recv(300):
            got += chunk
        return got.decode()
    finally:
        c.close()


def test_a_caller_outside_a_plugin_smoke_run_is_refused(counter):
    for _ in range(20):
        answer = _ask(counter)
        assert answer.startswith(f"REFUSED pid {os.getpid()} uid {os.getuid()} is in "), answer
        assert answer.endswith(", not a plugin smoke run\n"), answer


@pytest.mark.parametrize("counter", ["counted"], indirect=True)
def test_a_unit_gets_one_number_however_often_it_asks(counter):
    assert {_ask(counter) for _ in range(20)} == {"RUN 1\n"}


def test_a_caller_that_never_closes_holds_up_no_one(counter):
    held = []
    for _ in range(5):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(counter)
        held.append(c)
    t0 = time.monotonic()
    assert _ask(counter).startswith("REFUSED ")
    assert time.monotonic() - t0 < 1.0
    for c in held:
        c.close()
