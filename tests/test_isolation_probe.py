"""The ISO-1 probe and the isolation layer's parsing, on this machine.

The probe runs as nobody against a throwaway target: one of nobody's own
(every vector works: same uid, no Yama) and one of root's (every vector is
refused). Both directions, so neither outcome is hard-wired."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "acceptance"))
from pty_acceptance import isolation  # noqa: E402

PROBE = pathlib.Path(isolation.__file__).with_name("isoprobe.py")
PYTHON = "/usr/bin/python3"
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
ALL_VECTORS = {"ptrace", "proc-fd-list", "proc-fd-open", "proc-environ", "proc-fdinfo",
               "proc-mem", "process_vm_readv", "pidfd_getfd", "pidfd_send_signal", "kill"}

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(PYTHON),
                                reason="needs root and /usr/bin/python3")


def _target(as_nobody: bool):
    # a descriptor (3) the probe could try to take, held open by a sleeping child
    argv = [PYTHON, "-I", "-c", "import os, time; fd = os.open('/dev/null', os.O_RDONLY); "
            "os.set_inheritable(fd, False); time.sleep(30)"]
    return subprocess.Popen((AS_NOBODY if as_nobody else []) + argv)


@pytest.fixture
def stage():
    """A directory nobody can read (pytest's tmp_path is root-only)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="isoprobe-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _probe(stage, pid):
    script = stage / "isoprobe.py"
    script.write_bytes(PROBE.read_bytes())
    os.chmod(script, 0o644)
    deadline = time.monotonic() + 5
    while True:  # until the child has exec'd python (its stat names it)
        with open(f"/proc/{pid}/stat", "rb") as f:
            if b"(python3)" in f.read(200):
                break
        assert time.monotonic() < deadline, "target did not start"
        time.sleep(0.02)
    ticks = isolation.start_ticks(pid)
    out = subprocess.run(AS_NOBODY + [PYTHON, "-I", str(script), str(pid), str(ticks)],
                         capture_output=True, timeout=20, check=True).stdout
    report = isolation.parse_report(out)
    assert not report.get("error"), report
    return {r["vector"]: r for r in report["results"]}


@needs_root
@pytest.mark.parametrize("as_nobody, outcome", [(True, "worked"), (False, "refused")])
def test_probe_against_same_uid_and_root_targets(stage, as_nobody, outcome):
    t = _target(as_nobody)
    try:
        got = _probe(stage, t.pid)
    finally:
        t.kill()
        t.wait()
    assert set(got) == ALL_VECTORS
    wrong = {v: r for v, r in got.items() if r["outcome"] != outcome}
    assert not wrong, wrong


def test_parse_report_refuses_hostile_output():
    good = b'noise ISOPROBE-BEGIN\n{"results": [{"vector": "kill", "outcome": "worked", "detail": "x"}]}\nISOPROBE-END'
    assert isolation.parse_report(good)["results"][0]["vector"] == "kill"
    for bad in (b"", b"ISOPROBE-BEGIN {not json} ISOPROBE-END",
                b'ISOPROBE-BEGIN {"results": [{"vector": 1}]} ISOPROBE-END',
                b'ISOPROBE-BEGIN {"results": [{"vector": "kill", "outcome": "maybe", "detail": ""}]} ISOPROBE-END',
                b"ISOPROBE-BEGIN [] ISOPROBE-END", b"ISOPROBE-BEGIN " + b"\xff" * 10):
        with pytest.raises(isolation.IsolationError):
            isolation.parse_report(bad)


def test_fd_flags():
    assert isolation.fd_flags("pos:\t0\nflags:\t02000002\nmnt_id:\t25\n") == 0o2000002
    assert isolation.fd_flags("pos:\t0\n") is None
    assert isolation.fd_flags("flags:\tzz\n") is None


def test_inheritable_fds_of_this_process():
    r, w = os.pipe()  # os.pipe() descriptors are non-inheritable (O_CLOEXEC)
    os.set_inheritable(w, True)
    try:
        bad, seen = isolation.inheritable_fds(os.getpid())
    finally:
        os.close(r)
        os.close(w)
    assert seen >= 2
    assert any(b.startswith(f"fd {w} ") for b in bad) and not any(b.startswith(f"fd {r} ") for b in bad)
