"""The ISO-1 probe and the isolation layer, on this machine.

The probe runs as nobody against throwaway targets: a dumpable one of
nobody's own (every vector works: same uid, no Yama here), a copy of sleep
that nobody may execute but not read (the kernel marks it not dumpable: only
the signals work, as expected on the reference host) and one of root's
(everything is refused). Both directions, so no outcome is hard-wired. Then the pure parts:
/proc stat and fdinfo parsing, the probe's output as hostile bytes, the
orchestration of run_probe against a stand-in bus, and the supervisor
connection census on a real UNIX socket.
"""

import grp
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pty_acceptance.host import observe, proc
from pty_acceptance.supervisor import isolation
from pty_acceptance.supervisor.peer import TAG_PREFIX

PROBE = Path(isolation.__file__).parents[1] / "probes" / "isoprobe.py"
PYTHON = "/usr/bin/python3"
NOBODY = 65534
# setuid to nobody, then exec: unlike setpriv, which keeps every capability
# until execve (so the kernel finds any binary readable and keeps it dumpable)
DROP = ("import os, sys; uid, gid = int(sys.argv[1]), int(sys.argv[2]); os.setgroups([]); "
        "os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid); os.execv(sys.argv[3], sys.argv[3:])")
AS_NOBODY = [PYTHON, "-I", "-c", DROP, str(NOBODY), str(NOBODY)]
SIGNALS = {"kill", "pidfd_send_signal"}
DEADLINE_S = 5
LISTENER = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); time.sleep(60)")


def _poll(cond, what):
    end = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < end, f"still not true after {DEADLINE_S} s: {what}"
        time.sleep(0.01)  # poll interval, not a wait for an outcome


def _comm(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read(512)
    except OSError:
        return None
    return data[data.index(b"(") + 1:data.rindex(b")")].decode()


def _status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)


@pytest.fixture
def stage():
    """A directory nobody can enter (pytest's tmp_path is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="isoprobe-test-"))
    os.chmod(d, 0o755)
    shutil.copyfile(PROBE, d / "isoprobe.py")
    os.chmod(d / "isoprobe.py", 0o644)
    for name, mode in (("sleep-r", 0o755), ("sleep-x", 0o711)):
        shutil.copyfile("/bin/sleep", d / name)
        os.chmod(d / name, mode)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def spawn():
    """spawn(argv, as_nobody, comm) -> Popen, once it runs `comm` (None: the
    caller knows when it has exec'd); all killed afterwards."""
    made = []

    def start(argv, as_nobody, comm, **kw):
        p = subprocess.Popen((AS_NOBODY if as_nobody else []) + argv, **kw)
        made.append(p)
        if comm is not None:
            _poll(lambda: _comm(p.pid) == comm or p.poll() is not None, f"{argv} exec'd {comm}")
            assert p.poll() is None, f"{argv} exited with {p.returncode}"
        return p

    yield start
    for p in made:
        p.kill()
        p.wait()
        if p.stdout:
            p.stdout.close()


def _run_probe(stage, pid, ticks=None, secret=None):
    ticks = isolation.start_ticks(pid) if ticks is None else ticks
    out = subprocess.run(AS_NOBODY + [PYTHON, "-I", str(stage / "isoprobe.py"), str(pid), str(ticks)],
                         capture_output=True, timeout=DEADLINE_S, check=True).stdout
    assert secret is None or secret.encode() not in out, "the probe reported what it read"
    return isolation.parse_report(out)


def _outcomes(report):
    assert not report.get("error"), report
    return {r["vector"]: r["outcome"] for r in report["results"]}


def _untouched(p):
    st = _status(p.pid)
    assert p.poll() is None and st["TracerPid"] == "0" and st["State"][0] in "SR", st


# ------------------------------------------------------------------ the probe, live
def test_dumpable_same_uid_target_every_vector_works(stage, spawn):
    secret = "ISO1-SECRET-" + os.urandom(8).hex()
    t = spawn([PYTHON, "-I", "-c", LISTENER], True, None, stdout=subprocess.PIPE,
              env={"TOKEN": secret})
    port = int(t.stdout.readline())  # printed once it has exec'd and listens
    target = isolation.find_target(port)
    assert (target.pid, target.uids, target.fd_owner, target.dumpable) == \
        (t.pid, (NOBODY,) * 3, NOBODY, True)
    report = _run_probe(stage, t.pid, secret=secret)
    assert (report["uid"], report["gid"], report["cap_eff"]) == (NOBODY, NOBODY, 0)
    assert report["seccomp"].startswith("Seccomp 0")
    assert _outcomes(report) == {v: "worked" for v in isolation.VECTORS}
    details = {r["vector"]: r["detail"] for r in report["results"]}
    assert "obtained a copy of descriptor 3" in details["pidfd_getfd"]
    assert "TracerPid now 0" in details["ptrace"]
    _untouched(t)


def test_non_dumpable_same_uid_target_only_signals_work(stage, spawn):
    fd = os.open("/dev/null", os.O_RDONLY)  # a descriptor for pidfd_getfd to try
    try:
        t = spawn([str(stage / "sleep-x"), "60"], True, "sleep-x", pass_fds=(fd,))
    finally:
        os.close(fd)
    assert os.lstat(f"/proc/{t.pid}/fd").st_uid == 0, "an unreadable binary left it dumpable"
    got = _outcomes(_run_probe(stage, t.pid))
    assert {v for v, o in got.items() if o == "worked"} == SIGNALS, got
    _untouched(t)
    bad, seen = isolation.inheritable_fds(t.pid)  # the inherited one has no O_CLOEXEC
    assert seen == 1 and len(bad) == 1 and bad[0].startswith(f"fd {fd} -> /dev/null:"), bad


def test_root_target_every_vector_is_refused(stage, spawn):
    t = spawn([str(stage / "sleep-r"), "60"], False, "sleep-r")
    assert _outcomes(_run_probe(stage, t.pid)) == {v: "refused" for v in isolation.VECTORS}
    _untouched(t)


def test_probe_refuses_a_replaced_target(stage, spawn):
    t = spawn([str(stage / "sleep-r"), "60"], True, "sleep-r")
    report = _run_probe(stage, t.pid, ticks=isolation.start_ticks(t.pid) + 1)
    assert "replaced before the probe ran" in report["error"] and report["results"] == []


# ------------------------------------------------------------------ run_probe's unit
class StandInBus:
    """Runs the transient unit's ExecStart as User=/Group=, stdout to the fd."""

    def __init__(self):
        self.units, self.calls = {}, []

    def start_transient(self, name, props):
        p = dict(props)
        self.calls.append(("start", name, p))
        (path, argv, _), = p["ExecStart"][1]
        uid, gid = pwd.getpwnam(p["User"][1]).pw_uid, grp.getgrnam(p["Group"][1]).gr_gid
        drop = [PYTHON, "-I", "-c", DROP, str(uid), str(gid)]
        self.units[name] = subprocess.Popen(drop + argv, stdin=subprocess.DEVNULL,
                                            stdout=p["StandardOutputFileDescriptor"][1])
        return "/job/1"

    def unit_path(self, name):
        u = self.units.get(name)
        return None if u is None or u.poll() is not None else f"/unit/{name}"

    def stop(self, name):
        self.calls.append(("stop", name))
        self.units[name].kill()
        self.units[name].wait()

    def wait_for(self, name, predicate, deadline_s, what):
        self.units[name].wait(deadline_s)

    def reset_failed(self, name):
        self.calls.append(("reset-failed", name))

    def properties(self, name, iface=None):
        return None


def test_run_probe_starts_a_tagged_unit_and_cleans_up(spawn):
    t = spawn([PYTHON, "-I", "-c", LISTENER], True, None, stdout=subprocess.PIPE)
    target = isolation.find_target(int(t.stdout.readline()))
    bus = StandInBus()
    report = isolation.run_probe(bus, user="nobody", group="nogroup", tag="0123abcd",
                                 target=target, python=PYTHON)
    assert _outcomes(report)["kill"] == "worked"
    (_, name, props), = [c for c in bus.calls if c[0] == "start"]
    assert name == "pty-acceptance-iso-0123abcd.service"
    assert props["Description"][1].startswith(f"{TAG_PREFIX} 0123abcd: ")
    assert (props["User"][1], props["Group"][1], props["Type"][1], props["CollectMode"][1]) == \
        ("nobody", "nogroup", "exec", "inactive-or-failed")
    script = props["ExecStart"][1][0][1][2]
    assert not os.path.exists(os.path.dirname(script)), "the staged probe was left behind"
    assert bus.unit_path(name) is None


# ------------------------------------------------------------------ parsing
GOOD_RESULTS = [{"vector": v, "outcome": "refused", "detail": "EPERM"} for v in isolation.VECTORS]


def _wrap(obj) -> bytes:
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return b"noise\r\nISOPROBE-BEGIN\n" + body + b"\nISOPROBE-END\n"


def _report(**kw):
    return {"uid": 1, "euid": 1, "gid": 1, "egid": 1, "cap_eff": 0, "results": GOOD_RESULTS, **kw}


def test_parse_report_accepts_a_complete_report_and_truncates_details():
    long = [dict(r, detail="x" * 10000) for r in GOOD_RESULTS]
    got = isolation.parse_report(_wrap(_report(results=long)))
    assert all(len(r["detail"]) == isolation.MAX_DETAIL for r in got["results"])
    err = isolation.parse_report(_wrap(_report(results=[], error="OSError: boom\x1b[2J")))
    assert err["error"] == "OSError: boom?[2J"
    escapes = [dict(r, detail="EPERM\r\n\x1b]0;pwned\x07") for r in GOOD_RESULTS]
    got = isolation.parse_report(_wrap(_report(results=escapes)))
    assert {r["detail"] for r in got["results"]} == {"EPERM???]0;pwned?"}


@pytest.mark.parametrize("output", [
    b"", b"ISOPROBE-BEGIN only", b"ISOPROBE-END ISOPROBE-BEGIN {}",
    _wrap(b"{not json"), _wrap(b"\xff\xfe" * 40), _wrap([]), _wrap({"results": "x"}),
    _wrap(_report(results=GOOD_RESULTS[:-1])),                                   # a vector missing
    _wrap(_report(results=GOOD_RESULTS + GOOD_RESULTS[:1])),                    # repeated
    _wrap(_report(results=GOOD_RESULTS[1:] + [{"vector": "ptrace", "outcome": "maybe",
                                               "detail": ""}])),
    _wrap(_report(results=GOOD_RESULTS[1:] + [{"vector": "ptrace", "outcome": "worked",
                                               "detail": 7}])),
    _wrap(_report(results=GOOD_RESULTS + [{"vector": "rm -rf", "outcome": "worked",
                                           "detail": ""}])),
    _wrap(_report(uid=True)), _wrap(_report(euid="0")), _wrap(_report(error=["x"])),
    _wrap(_report(cap_eff=None)), _wrap(_report(seccomp=2)),
])
def test_parse_report_refuses_hostile_output(output):
    with pytest.raises(isolation.IsolationError) as e:
        isolation.parse_report(output)
    assert len(str(e.value)) < 1000


def test_read_report_bytes_is_bounded_and_has_a_deadline():
    r, w = os.pipe()
    try:
        os.write(w, b"x" * 1000)
        with pytest.raises(isolation.IsolationError, match="did not report within"):
            isolation.read_report_bytes(r, 0.2)
        os.write(w, b"ISOPROBE-END\n")
        assert isolation.read_report_bytes(r, 1).endswith(b"ISOPROBE-END\n")
    finally:
        os.close(r)
        os.close(w)
    r, w = os.pipe()
    child = subprocess.Popen(["head", "-c", str(isolation.MAX_OUTPUT + 100000), "/dev/zero"],
                             stdout=w)
    os.close(w)
    try:
        with pytest.raises(isolation.IsolationError, match="more than"):
            isolation.read_report_bytes(r, DEADLINE_S)
    finally:
        os.close(r)
        child.wait()


def test_stat_start_ticks_survives_a_hostile_comm():
    fields = " ".join(["S"] + [str(n) for n in range(4, 22)] + ["987654"] + ["0"] * 30)
    assert isolation.stat_start_ticks(f"42 (a) b) (c )) {fields}".encode()) == 987654
    with pytest.raises(isolation.IsolationError):
        isolation.stat_start_ticks(b"42 (no close paren")


def test_fd_flags():
    assert observe.parse_fd_flags(b"pos:\t0\nflags:\t02000002\nmnt_id:\t25\n") == 0o2000002
    assert observe.parse_fd_flags(b"pos:\t0\n") is None
    assert observe.parse_fd_flags(b"flags:\tzz\n") is None
    assert observe.parse_fd_flags(b"xflags:\t0\nflags:\t0100000\n") == 0o100000


def test_inheritable_fds_of_this_process():
    r, w = os.pipe()  # both O_CLOEXEC; w made inheritable
    os.set_inheritable(w, True)
    try:
        bad, seen = isolation.inheritable_fds(os.getpid())
    finally:
        os.close(r)
        os.close(w)
    assert seen >= 2
    assert any(b.startswith(f"fd {w} -> pipe:") for b in bad)
    assert not any(b.startswith(f"fd {r} ") for b in bad)


# ------------------------------------------------------------------ supervisor connections
def test_connections_to_a_real_socket_and_their_holders(stage, monkeypatch):
    # the walk is over this process: a lab machine's PID 1 may refuse root its descriptors
    # (EACCES), and an unreadable process fails the walk (the test below)
    monkeypatch.setattr(proc, "pids", lambda: [os.getpid()])
    path = str(stage / "sup.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(1)
        client.connect(path)
        server, _ = listener.accept()
        with server:
            file_id = isolation.socket_file_id(path)
            socks = isolation.unix_sockets()
            want = [(os.fstat(server.fileno()).st_ino, os.fstat(client.fileno()).st_ino)]
            assert isolation.connections_to(socks, path, file_id) == want
            # the bound file alone (sock_diag's kernel dev_t decoded) finds it too
            assert isolation.connections_to(socks, "/elsewhere", file_id) == want
            holders = isolation.socket_holders()
            me = os.getpid()
            assert all(holders[ino] == {me} for ino in want[0])
            nobody_ok = lambda pid: (False, "python3")  # noqa: E731
            findings, rows = isolation.judge_holders(want, holders, supervisor=set(),
                                                     is_helper=nobody_ok, own=set())
            assert len(findings) == 2 and len(rows) == 2
            assert isolation.judge_holders(want, holders, supervisor={me}, is_helper=nobody_ok,
                                           own={me})[0] == []
    finally:
        client.close()
        listener.close()


def test_a_process_whose_descriptors_cannot_be_read_fails_the_walk(monkeypatch):
    """Not taken for one that holds nothing (it may hold the connection): only a
    process gone between the listing and its read is left out."""
    me = os.getpid()

    def fds(pid):
        if pid == 1:
            raise PermissionError(13, "Permission denied")
        if pid == 2:
            raise FileNotFoundError(2, "No such file or directory")
        return {0: "socket:[77]"}

    monkeypatch.setattr(proc, "pids", lambda: [2, me])
    monkeypatch.setattr(proc, "fds", fds)
    assert isolation.socket_holders() == {77: {me}}
    monkeypatch.setattr(proc, "pids", lambda: [1, 2, me])
    with pytest.raises(proc.ProcUnreadable, match="/proc/1: cannot read the descriptors"):
        isolation.socket_holders()


def test_judge_holders_accepts_the_supervisor_and_the_helper():
    pairs = [(10, 11), (20, None)]
    holders = {10: {1}, 11: {2}, 20: {1}}
    helper = lambda pid: (pid == 2, "/usr/local/libexec/opencode-pty-client")  # noqa: E731
    assert isolation.judge_holders(pairs, holders, supervisor={1}, is_helper=helper,
                                   own=set())[0] == []
    findings, _ = isolation.judge_holders(pairs, {**holders, 11: {2, 3}}, supervisor={1},
                                          is_helper=helper, own=set())
    assert findings and "pid 3" in findings[0]


def test_yama_and_target_facts():
    state = isolation.yama()
    assert state == "absent" or state.startswith("ptrace_scope ")
    t = isolation.Target(7, 1, "/bin/x", (1000,) * 3, (1000,) * 3, 0)
    assert t.facts("absent") == "Yama absent, /proc/7/fd owned by uid 0 (not dumpable)"
    assert t.describe() == "pid 7 (/bin/x, uid 1000)"


def test_a_runtime_the_service_user_can_read_is_named(tmp_path):
    """ISO-1: the kernel marks a process not dumpable at exec only when its user
    cannot read the executable; read as root, whatever the process says now."""
    from pty_acceptance.supervisor import isolation
    os.chmod(tmp_path, 0o755)
    binary = tmp_path / "opencode2-node"
    binary.write_bytes(b"\x7fELF")
    os.chmod(binary, 0o711)
    seen, problems = isolation.readable_to(str(binary), 1000, {1000})
    assert problems == [] and "mode=0711" in seen
    os.chmod(binary, 0o755)
    (why,) = isolation.readable_to(str(binary), 1000, {1000})[1]
    assert "readable by others" in why
    os.chmod(binary, 0o750)
    os.chown(binary, 0, 1000)
    (why,) = isolation.readable_to(str(binary), 1000, {1000})[1]
    assert "group 1000" in why
    assert isolation.readable_to(str(binary), 1000, {1001})[1] == []
    os.chown(binary, 1000, 1000)
    os.chmod(binary, 0o311)
    assert len(isolation.readable_to(str(binary), 1000, {1000})[1]) == 1  # owned: it may chmod
    os.chmod(binary, 0o711)
    assert len(isolation.readable_to(str(binary), 1000, {1000})[1]) == 2
    link = tmp_path / "link"
    link.symlink_to(binary)
    assert "not a regular file" in isolation.readable_to(str(link), 1000, {1000})[1][0]


def test_a_runtime_changed_since_the_candidate_started_is_named(tmp_path):
    """ISO-1 (a blind red team's round six): 0755 while the candidate started,
    0711 again afterwards; the mode read now says nothing of the mode at exec."""
    import time
    from pty_acceptance.supervisor import isolation
    os.chmod(tmp_path, 0o755)
    binary = tmp_path / "opencode2-node"
    binary.write_bytes(b"\x7fELF")
    os.chmod(binary, 0o711)
    assert isolation.readable_to(str(binary), 1000, {1000}, time.time_ns() + int(5e9))[1] == []
    (why,) = isolation.readable_to(str(binary), 1000, {1000}, time.time_ns())[1]
    assert "changed (ctime)" in why


def test_a_runtime_directory_the_user_relinked_since_the_candidate_started_is_named(tmp_path):
    """ISO-1 (a blind red team's round seven): the runtime's bin/ in the service
    user's tree exchanged for one holding a wrapper while systemd restarted the
    candidate, put back since: the binary's own ctime is old, its directory's
    is not. A directory only root can relink is not judged."""
    import time
    from pty_acceptance.supervisor import isolation
    os.chmod(tmp_path, 0o755)
    tree = tmp_path / "Code"
    bindir = tree / "dist" / "bin"
    bindir.mkdir(parents=True)
    binary = bindir / "opencode2-node"
    binary.write_bytes(b"\x7fELF")
    os.chmod(binary, 0o711)
    for d in (tree, tree / "dist", bindir):
        os.chown(d, 1000, 1000)  # the service user's tree (tmp_path: root's alone)
    old = os.stat(binary).st_ctime_ns
    started = time.time_ns() + int(5e9)
    assert isolation.readable_to(str(binary), 1000, {1000}, started)[1] == []
    probe = tmp_path / "tick"
    while True:  # until the kernel's coarse clock for ctime has moved past the binary's
        probe.write_bytes(b"")
        if os.stat(probe).st_ctime_ns > old:
            break
    os.rename(bindir, tree / "dist" / "bin.real")  # the user's exchange, and back
    os.rename(tree / "dist" / "bin.real", bindir)
    assert os.stat(binary).st_ctime_ns == old
    started = old + 1  # the candidate started after the binary was made, before the put-back
    problems = isolation.readable_to(str(binary), 1000, {1000}, started, steady_s=0)[1]
    assert any(p.startswith(f"{bindir} changed (ctime)") and "could relink" in p for p in problems), problems
    assert not any(str(binary) + " changed" in p for p in problems)
    assert not any(p.startswith(f"{tree} ") for p in problems)  # in root's directory: not judged


def test_a_handler_for_sigusr1_is_read_from_that_very_process():
    """ISO-1 (a blind red team's round six): Node opens its inspector on SIGUSR1."""
    import signal
    import psutil
    from pty_acceptance.supervisor import isolation
    catching = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                 "signal.signal(signal.SIGUSR1, lambda *a: None)\nprint('ok', flush=True)\n"
                                 "time.sleep(30)"], stdout=subprocess.PIPE)
    plain = subprocess.Popen(["/bin/sleep", "30"])
    try:
        assert catching.stdout.readline() == b"ok\n"
        for p, want in ((catching, True), (plain, False)):
            created = psutil.Process(p.pid).create_time()
            assert isolation.catches(p.pid, created, signal.SIGUSR1) is want
        with pytest.raises(isolation.IsolationError, match="no longer the process"):
            isolation.catches(plain.pid, created - 5, signal.SIGUSR1)
    finally:
        for p in (catching, plain):
            p.kill()
            p.wait()
