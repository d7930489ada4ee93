"""A blind red team's fifteenth pass against the clean start and the marker's removal
(issue 38): each test fails when its attack works. Broke, fixed since: seccomp filters put on
the run by its starter (a user-notification supervisor answering the marker's unlink as done
and its lookups ENOENT; a plain filter answering the first look ENOENT): a run with more
seccomp filters than PID 1 is refused; argv[0] (`exec -a`) naming the program the clean
start exec's: a run whose sys.executable is not the program it runs is refused. Not fixed, a
stated limit (xfail, strict): a virtualenv of root's choosing whose code runs before the
suite and erases itself."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gateproject import ONE_FAILING, PYTEST, SEPARATE_DEADLINE_S, earlier_ready, for_separate_processes, said


# A starter of the operator's: a seccomp user-notification filter installed in the
# child before it execs `pytest ...` (it survives every execve, the clean start's
# too); the starter answers, for the filtered process tree, an unlink of the marker's
# name as done (nothing done) and every later stat of that name as ENOENT.
SECCOMP_STARTER = r'''
import ctypes, os, socket, struct, sys, select

libc = ctypes.CDLL(None, use_errno=True)
NAME = sys.argv[1].encode()
argv = sys.argv[2:]
SYS_seccomp = 317
NR = {"unlinkat": 263, "unlink": 87, "newfstatat": 262, "statx": 332, "stat": 4, "lstat": 6,
      "faccessat": 269, "faccessat2": 439, "access": 21}
PATH_ARG = {263: 1, 87: 0, 262: 1, 332: 1, 4: 0, 6: 0, 269: 1, 439: 1, 21: 0}
ALLOW, NOTIF = 0x7fff0000, 0x7fc00000


def bpf(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


nrs = list(NR.values())
prog = bpf(0x20, 0, 0, 4) + bpf(0x15, 0, len(nrs) + 1, 0xc000003e) + bpf(0x20, 0, 0, 0)
for i, nr in enumerate(nrs):
    prog += bpf(0x15, len(nrs) - i, 0, nr)
prog += bpf(0x06, 0, 0, ALLOW) + bpf(0x06, 0, 0, NOTIF)
nins = len(prog) // 8
buf = ctypes.create_string_buffer(prog)


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    a.close()
    fp = Fprog(nins, ctypes.addressof(buf))
    fd = libc.syscall(SYS_seccomp, 1, 1 << 3, ctypes.byref(fp))
    if fd < 0:
        os.write(2, b"seccomp failed %d\n" % ctypes.get_errno())
        os._exit(99)
    socket.send_fds(b, [b"x"], [fd])
    os.close(fd)
    b.close()
    os.execv(argv[0], argv)

b.close()
_, fds, _, _ = socket.recv_fds(a, 1, 1)
lfd = fds[0]
RECV, SEND = 0xC0502100, 0xC0182101
hidden = set()
req = ctypes.create_string_buffer(80)
resp = ctypes.create_string_buffer(24)


def read_path(p, addr):
    try:
        with open(f"/proc/{p}/mem", "rb", buffering=0) as m:
            out = b""
            while len(out) < 4096:
                m.seek(addr + len(out))
                chunk = m.read(64)
                if not chunk:
                    break
                out += chunk
                if b"\0" in chunk:
                    break
            return out.split(b"\0", 1)[0]
    except OSError:
        return b""


while True:
    r, _, _ = select.select([lfd], [], [], 0.2)
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
    if not r:
        continue
    ctypes.memset(req, 0, 80)
    if libc.ioctl(lfd, RECV, req) < 0:
        continue
    nid, npid, _flags, nr, _arch, _ip = struct.unpack_from("QIIiIQ", req, 0)
    args = struct.unpack_from("6Q", req, 32)
    path = read_path(npid, args[PATH_ARG.get(nr, 0)])
    base = path.rsplit(b"/", 1)[-1]
    val, err, flags = 0, 0, 1  # continue
    if base == NAME:
        if nr in (263, 87):
            hidden.add(base)
            flags = 0  # "done"
            os.write(2, b"[starter] unlink of the marker answered as done\n")
        elif base in hidden:
            err, flags = -2, 0
    struct.pack_into("QqiI", resp, 0, nid, val, err, flags)
    libc.ioctl(lfd, SEND, resp)
'''


def _gone_or_refused(done, marker, text) -> None:
    """The earlier marker is gone, or the run was refused before pytest started (exit 4) for the
    starter's filter: more seccomp filters than PID 1, or /proc it cannot read through the filter.
    A filter that makes the process's own lookups lie keeps what it hides, as root's would; the
    run says NOT READY and why."""
    if os.path.lexists(marker):
        assert done.returncode == 4 and "ERROR: NOT READY: SUITE-3" in text, \
            f"the earlier READY marker survived a failing run\n{text}"
        assert "seccomp filters" in text or "cannot be read" in text, text


def _failing_run_under_a_starter(project, target, tmp_path, code: str, leading) -> None:
    """The failing project's run started by `code` (a starter of the operator's, which puts its
    filter on itself and execs `leading(marker) + pytest ...`), after an earlier READY run: the
    earlier marker gone, or the run refused at start-up for the filter."""
    marker = earlier_ready(project, target)
    (project.path / "acceptance/test_all.py").write_text(ONE_FAILING)
    for_separate_processes(project)
    starter = tmp_path / "starter.py"
    starter.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(["/usr/bin/python3", str(starter), *leading(marker), PYTEST, "-p", "no:cacheprovider",
                           "acceptance/", "--inventory", str(target.inventory)],
                          cwd=project.path, env=env, capture_output=True, text=True,
                          timeout=SEPARATE_DEADLINE_S * 3, stdin=subprocess.DEVNULL)
    text = said(done)
    assert "seccomp failed" not in done.stderr, text
    assert done.returncode != 0, text
    _gone_or_refused(done, marker, text)


def test_seccomp_user_notification_keeps_the_earlier_marker(project, target, tmp_path):
    """HOLD expected: a failing run started under an operator's seccomp user-notification
    filter (it survives the clean start's execve) must not leave the earlier READY marker."""
    _failing_run_under_a_starter(project, target, tmp_path, SECCOMP_STARTER, lambda marker: [marker.name])


# ------------------------------------------------------------------ argv[0]
# The clean start execs sys.executable (launch.clean_start), and CPython takes sys.executable
# from argv[0] when it holds a slash: `exec -a /elsewhere/bin/python .venv/bin/python -m pytest`
# (argv[0] is the starter's choice). With a pyvenv.cfg beside it and its site-packages a link
# to the virtualenv's, the early guard loads and runs in that first process, finds the
# checkout, and execs /elsewhere/bin/python: a program of the operator's, run as the gate.
WRAPPER = """#!/bin/sh
# argv: -I -u -m pytest ARGS, the clean environment: the real clean start, its verdict rewritten
env -u PWD {python} "$@" > {out} 2>&1
sed '$ s|^NOT READY: .*|READY: marker written {marker}|' {out}
exit 0
"""


def test_argv0_chooses_the_program_the_clean_start_execs(project, target, tmp_path):
    """HOLD expected: a failing run never ends READY, exit 0."""
    (project.path / "acceptance/test_all.py").write_text(ONE_FAILING)
    for_separate_processes(project)
    venv = Path(PYTEST).parent.parent
    evil = tmp_path / "evil"
    (evil / "bin").mkdir(parents=True)
    (evil / "lib/python3.11").mkdir(parents=True)
    (evil / "lib/python3.11/site-packages").symlink_to(venv / "lib/python3.11/site-packages")
    (evil / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    fake = evil / "bin/python"
    fake.write_text(WRAPPER.format(python=venv / "bin/python", out=tmp_path / "real.out", marker=target.marker))
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(["bash", "-c", f'exec -a {fake} {venv}/bin/python -m pytest "$@"', "x",
                           "-p", "no:cacheprovider", "acceptance/", "--inventory", str(target.inventory)],
                          cwd=project.path, env=env, capture_output=True, text=True,
                          timeout=SEPARATE_DEADLINE_S, stdin=subprocess.DEVNULL)
    text = said(done) + "\n--- real\n" + \
        ((tmp_path / "real.out").read_text()[-1500:] if (tmp_path / "real.out").exists() else "(none)")
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    assert not (done.returncode == 0 and lines and lines[-1].startswith("READY")), text
    assert done.returncode != 0, text


# ------------------------------------------ a plain seccomp filter: no supervisor at all
# stat() relative to a directory descriptor without following links (remove()'s look:
# os.stat(name, dir_fd=dfd, follow_symlinks=False)) fails ENOENT; everything else allowed.
# The marker is never unlinked: the gate is told there is none.
PLAIN_FILTER = r'''
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)


def bpf(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


prog = b"".join([
    bpf(0x20, 0, 0, 4), bpf(0x15, 0, 11, 0xc000003e),
    bpf(0x20, 0, 0, 0), bpf(0x15, 0, 4, 262),
    bpf(0x20, 0, 0, 16), bpf(0x15, 7, 0, 0xffffff9c),
    bpf(0x20, 0, 0, 40), bpf(0x45, 6, 5, 0x100),
    bpf(0x15, 0, 4, 332),
    bpf(0x20, 0, 0, 16), bpf(0x15, 2, 0, 0xffffff9c),
    bpf(0x20, 0, 0, 32), bpf(0x45, 1, 0, 0x100),
    bpf(0x06, 0, 0, 0x7fff0000), bpf(0x06, 0, 0, 0x00050000 | 2),
])
buf = ctypes.create_string_buffer(prog)


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


fp = Fprog(len(prog) // 8, ctypes.addressof(buf))
if libc.syscall(317, 1, 0, ctypes.byref(fp)) != 0:
    os.write(2, b"seccomp failed %d\n" % ctypes.get_errno())
    sys.exit(99)
os.execv(sys.argv[1], sys.argv[1:])
'''


def test_plain_seccomp_filter_hides_the_marker_from_the_first_look(project, target, tmp_path):
    """HOLD expected: a failing run under the starter's seccomp filter must not keep the marker."""
    _failing_run_under_a_starter(project, target, tmp_path, PLAIN_FILTER, lambda marker: [])


# ---------------------------------------- what else survives the execve (expected to hold)
LANDLOCK = r'''
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
attr = struct.pack("Q", 1 << 5)  # LANDLOCK_ACCESS_FS_REMOVE_FILE handled, no rule: unlink denied everywhere
fd = libc.syscall(444, attr, len(attr), 0)
if fd < 0 or libc.syscall(446, fd, 0) != 0:
    os.write(2, b"landlock failed %d\n" % ctypes.get_errno())
    sys.exit(99)
os.execv(sys.argv[1], sys.argv[1:])
'''


@pytest.mark.parametrize("how", ["landlock-no-unlink", "read-implies-exec"])
def test_process_state_carried_through_the_execve(project, target, tmp_path, how):
    """HOLD expected: the earlier marker goes, or the run says loudly that it stands."""
    marker = earlier_ready(project, target)
    (project.path / "acceptance/test_all.py").write_text(ONE_FAILING)
    for_separate_processes(project)
    argv = [PYTEST, "-p", "no:cacheprovider", "acceptance/", "--inventory", str(target.inventory)]
    if how == "landlock-no-unlink":
        starter = tmp_path / "starter.py"
        starter.write_text(LANDLOCK)
        argv = ["/usr/bin/python3", str(starter), *argv]
    else:
        argv = ["setarch", "x86_64", "--read-implies-exec", *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(argv, cwd=project.path, env=env, capture_output=True, text=True,
                          timeout=SEPARATE_DEADLINE_S * 3, stdin=subprocess.DEVNULL)
    text = said(done)
    assert "failed 99" not in done.stderr and "landlock failed" not in done.stderr, text
    assert done.returncode != 0, text
    if os.path.lexists(marker):
        assert "could not remove" in text or "still there" in text or "not removed" in text, text


# ------------------------------- argv[0] again: the judged clean start's own "virtualenv"
# A clean start crafted by hand, exactly `python -I -u -m pytest ARGS` with the suite's
# environment, but argv[0] naming a directory of the operator's: CPython takes sys.prefix from
# the pyvenv.cfg beside argv[0], so the "virtualenv" judged is a copy of the real one with a
# sitecustomize.py that patches pytest from a string and erases itself (the root-owned .venv
# untouched: the accepted limit is about code written into it).
SITECUSTOMIZE = '''
import importlib.util, os, sys
exec(compile({quiet!r}, "<string>", "exec"), {{}})
for f in (__file__, importlib.util.cache_from_source(__file__)):
    try:
        os.unlink(f)
    except OSError:
        pass
sys.modules.pop("sitecustomize", None)
'''


LIMIT = ("a stated limit (issue 38): code root put into a virtualenv it starts the suite in, run before the "
         "suite and erased, as for the suite's own virtualenv; which virtualenv is the suite's is not pinned")


@pytest.mark.parametrize("planted,own", [
    pytest.param(True, False, marks=pytest.mark.xfail(strict=True, reason=LIMIT)), (False, False),
    pytest.param(True, True, marks=pytest.mark.xfail(strict=True, reason=LIMIT))],
                         ids=["sitecustomize", "control-copy-only", "sitecustomize-own-venv-no-argv0"])
def test_argv0_chooses_the_virtualenv_the_clean_start_judges(project, target, planted, own):
    """HOLD expected: a failing run never ends READY, and never writes a marker (the control,
    the copy without the sitecustomize, shows the copy itself judges the failure)."""
    import shutil
    from gateproject import QUIET
    from pty_acceptance.decision import launch
    (project.path / "acceptance/test_all.py").write_text(ONE_FAILING)
    for_separate_processes(project)
    venv = Path(PYTEST).parent.parent
    evil = Path(target.base) / "evil"
    (evil / "bin").mkdir(parents=True)
    (evil / "lib/python3.11").mkdir(parents=True)
    shutil.copytree(venv / "lib/python3.11/site-packages", evil / "lib/python3.11/site-packages", symlinks=True)
    (evil / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    if own:  # a second virtualenv of its own (its python a link to the same interpreter), no argv[0] trick
        (evil / "bin/python").symlink_to(os.path.realpath(venv / "bin/python"))
    if planted:
        (evil / "lib/python3.11/site-packages/sitecustomize.py").write_text(SITECUSTOMIZE.format(quiet=QUIET))
    env = launch.clean_environment(os.environ)
    done = subprocess.run([str(evil / "bin/python"), "-I", "-u", "-m", "pytest", "-p", "no:cacheprovider",
                           "acceptance/", "--inventory", str(target.inventory)],
                          executable=None if own else str(venv / "bin/python"), cwd=project.path, env=env,
                          capture_output=True, text=True, timeout=SEPARATE_DEADLINE_S * 3, stdin=subprocess.DEVNULL)
    text = said(done)
    assert not (evil / "lib/python3.11/site-packages/sitecustomize.py").exists()
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    assert not os.path.lexists(target.marker), f"a failing run wrote a marker\n{text}"
    assert not (lines and lines[-1].startswith("READY")), text
    assert done.returncode != 0, text
