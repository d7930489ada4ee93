"""The fixed helper's invariant, observed in a real session.

One session runs through the installed helper under strace (see
pty_acceptance/supervisor/helpertrace.py for how it is started: exactly as the peer
starts it, fds 0-4, with strace as root in front and `-u` to the service
user). 65,536 bytes of input are queued before it starts; the session's
command reads them and says GOT-ALL. Its argv carries a path
(CALLER_PATH) the helper must never touch. The trace of every system call of
every helper thread, and /proc/<helper>/fd at a SIGSTOP right after its
first sendmsg (the START), are the evidence.

HELPER-1 no socket(), socketpair(), connect(), bind(), listen() or accept();
         no system call that takes a path names anything but the runtime
         metadata below (so no caller-supplied path, no application path).
HELPER-2 at START the helper holds exactly fds 0-4: 0-2 the stdio the peer
         gave, 3 the authenticated connection (the same socket: inode,
         AF_UNIX SOCK_STREAM, peer = the supervisor socket and a supervisor
         process), 4 the approved directory (same device and inode); over the
         whole run it creates no other descriptor.
HELPER-3 the bytes it wrote on fd 3 decode to exactly one START, first, within
         its bound, carrying the requested argv; exactly one system call
         carries ancillary data: one SCM_RIGHTS with exactly one descriptor,
         fd 4, on the START.
HELPER-4 the helper marks fd 3 close-on-exec before START, closes fd 4 after
         it, and never forks or execs; the supervisor holds the descriptor it
         received close-on-exec (seen while it waits for the rest of a START);
         no process of a live session holds a directory or any socket but the
         unit's own stdio socket, and the command holds exactly 0, 1, 2.
HELPER-5 the only paths the helper opens are RUNTIME_METADATA (observed on
         the exact build: the installed helper's SHA-256 is the inventory's
         claim), and those descriptors are closed again.

A failure names the system call(s) from the trace (decoded), the helper's
descriptor map or the session's processes.
"""

import os
import stat
import time

import pytest

from pty_acceptance.supervisor import helpertrace as ht
from pty_acceptance.host import hostfs, observe, proc, programs, scratch
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.host.polling import poll
from pty_acceptance.supervisor.session_clients import RawSession
from pty_acceptance.gate.checks import collect, expect, finding
from pty_acceptance.gate.failures import fail

CALLER_PATH = "/etc/pty-acceptance-caller-path"  # never created: only its absence from the trace matters
INPUT = ht.lines_of(1024)  # 65,536 bytes, 64-byte lines (the PTY is in canonical mode)
ARGV = ["/bin/sh", "-c", "head -n 1024 >/dev/null && echo GOT-ALL", CALLER_PATH]
RUNTIME_S = 60


@pytest.fixture(scope="module")
def traced(inv, module_peer):
    """The traced session, or the reason it could not be observed."""
    try:
        return ht.run_traced(module_peer, inv.socket, inv.binaries.client.path,
                             inv.service_user, ARGV, INPUT, runtime_s=RUNTIME_S)
    except (ht.TraceError, OSError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"


def _run(traced, ids, evidence, whole=True):
    """The traced run; with whole=True it must have run to its end, since the
    test claims something about everything the helper did."""
    if isinstance(traced, str):
        raise finding(ids, f"the helper could not be observed in a session: {traced}")
    evidence("helper exit status", traced.status)
    evidence("session output (tail)", traced.output[-120:])
    if traced.scope_left:
        fail(f"{ids}: SUITE-4: what the helper ran in could not be removed: {traced.scope_left}")
    if whole:
        expect(b"GOT-ALL" in traced.output and traced.status == 0, ids,
               f"the traced session did not run to its end (status {traced.status}, output tail "
               f"{traced.output[-200:]!r}; strace: {traced.strace_stderr!r}), so the trace does not "
               "cover a whole session")
    return traced


def _shown(calls, n=12):
    return "; ".join(c.show() for c in calls[:n]) + (f" (+{len(calls) - n} more)" if len(calls) > n else "")


# ------------------------------------------------------------------ HELPER-1
@pytest.mark.requirement("HELPER-1")
def test_helper_makes_no_socket_and_no_connection(traced, evidence, packaged):
    run = _run(traced, "HELPER-1", evidence)
    packaged(programs.path("strace"))
    calls = run.socket_calls()
    evidence("socket-family system calls", _shown(calls) or "none")
    expect(not calls, "HELPER-1", f"the helper created or connected a socket itself: {_shown(calls)}")


@pytest.mark.requirement("HELPER-1", "HELPER-5")
def test_helper_names_no_path_but_runtime_metadata(traced, evidence):
    run = _run(traced, "HELPER-1", evidence)
    evidence("paths named by the helper", run.opened_paths() or "none")
    evidence("allowed runtime metadata", sorted(ht.RUNTIME_METADATA))
    bad = run.forbidden_paths()
    expect(not bad, "HELPER-1", f"the helper resolved paths other than runtime metadata "
                                f"(argv carried {CALLER_PATH}, cwd {run.cwd.get('path')}): " + "; ".join(bad[:12]))


# ------------------------------------------------------------------ HELPER-2
@pytest.mark.requirement("HELPER-2")
def test_descriptors_at_start_are_stdio_connection_and_directory(traced, inv, bus, evidence):
    run = _run(traced, "HELPER-2", evidence, whole=False)  # about the moment of START
    if run.frozen is None:
        raise finding("HELPER-2", f"{run.frozen_problem}")
    evidence("helper fds at START", run.frozen)
    evidence("executable at START", run.frozen_exe)
    evidence("authenticated connection", run.sock)
    expect(sorted(run.frozen) == [0, 1, 2, 3, 4], "HELPER-2",
           f"at START the helper (pid {run.helper_pid}) holds fds {run.frozen}, expected exactly 0-4")
    with collect("HELPER-2") as problems:
        problems.when(run.frozen_exe != run.helper,
                      f"the process that sent START runs {run.frozen_exe}, not {run.helper}")
        problems.when(observe.socket_inode(run.frozen[3]) != run.sock["inode"],
                      f"fd 3 is {run.frozen[3]}, not the authenticated connection socket:[{run.sock['inode']}]")
        problems.when((run.sock["family"], run.sock["type"]) != ("AF_UNIX", "SOCK_STREAM"),
                      f"fd 3 is {run.sock['family']} {run.sock['type']}, expected AF_UNIX SOCK_STREAM")
        problems.when(run.sock["peername"] != inv.socket,
                      f"fd 3 is connected to {run.sock['peername']!r}, not {inv.socket}")
        sup_pids = {pr.pid for pr in observe.unit_procs(bus, inv.units.supervisor).procs}
        problems.when(run.sock["peer_pid"] not in sup_pids,
                      f"fd 3's peer is pid {run.sock['peer_pid']}, not a supervisor process {sorted(sup_pids)}")
        mode, dev, ino = run.frozen_stat.get(4, (0, 0, 0))
        problems.when(not stat.S_ISDIR(mode) or (dev, ino) != (run.cwd["dev"], run.cwd["ino"]),
                      f"fd 4 is {run.frozen[4]} (mode {mode:o}), not the approved directory {run.cwd}")
        for fd in (0, 1, 2):
            problems.when(observe.socket_inode(run.frozen[fd]) is None,
                          f"fd {fd} is {run.frozen[fd]}, not the stdio socket the peer gave")


@pytest.mark.requirement("HELPER-2")
def test_helper_creates_no_descriptor(traced, evidence):
    run = _run(traced, "HELPER-2", evidence)
    made = run.new_descriptors()
    evidence("descriptor-creating calls (runtime metadata excluded)", _shown(made) or "none")
    expect(not made, "HELPER-2", f"the helper created descriptors beyond fds 0-4: {_shown(made)}")


# ------------------------------------------------------------------ HELPER-3
@pytest.mark.requirement("HELPER-3")
def test_exactly_one_bounded_start_with_one_descriptor(traced, evidence):
    run = _run(traced, "HELPER-3", evidence, whole=False)  # about what it sent, however it ended
    frames, unframed = run.frames_to_supervisor()
    evidence("frames to the supervisor", [(f.name, len(f.payload)) for f in frames])
    starts = [f for f in frames if f.type == p.T.START]
    with collect("HELPER-3") as problems:
        problems += unframed
        problems.when(len(starts) != 1 or frames[0].type != p.T.START,
                      f"{len(starts)} START frames, first frame {frames[0].name if frames else None}")
        if starts:
            try:
                got = p.parse_start(starts[0].payload)
            except p.ProtocolError as e:
                problems.add(f"START does not parse: {e}")
            else:
                want = [a.encode() for a in ARGV]
                problems.when(got[0] != RUNTIME_S or got[3] != want,
                              f"START carries runtime {got[0]} argv {got[3]!r}, asked {RUNTIME_S} {want!r}")
        anc = run.rights()
        evidence("calls with ancillary data", [(c.show(100), lists, types) for c, lists, types in anc])
        if len(anc) != 1:
            problems.add(f"{len(anc)} system calls carried ancillary data, expected exactly 1: "
                         + "; ".join(c.show() for c, _, _ in anc))
        else:
            call, lists, types = anc[0]
            head = (call.strings() or [b""])[0][:5]
            problems.when(types != ["SCM_RIGHTS"] or lists != [[4]],
                          f"ancillary data {types} {lists}, expected one SCM_RIGHTS with fd 4")
            problems.when(len(head) < 5 or head[4] != p.T.START,
                          f"the descriptor went with {head!r}, not with the START header")


# ------------------------------------------------------------------ HELPER-4
@pytest.mark.requirement("HELPER-4")
def test_helper_keeps_received_descriptors_from_any_exec(traced, evidence):
    run = _run(traced, "HELPER-4", evidence)
    with collect("HELPER-4") as problems:
        if run.frozen is None:
            problems.add(run.frozen_problem)
        else:
            flags = run.frozen_flags.get(3)
            evidence("fd 3 flags at START", oct(flags) if flags is not None else None)
            problems.when(flags is None or not flags & observe.O_CLOEXEC,
                          f"fd 3 (the connection) is not close-on-exec at START (flags {flags and oct(flags)})")
        calls = run.later_calls()
        start_at = next((i for i, c in enumerate(calls) if c.name == "sendmsg"), None)
        closed = start_at is not None and any(c.name == "close" and c.first_int() == 4 and c.ret == 0
                                              for c in calls[start_at:])
        problems.when(not closed, "fd 4 (the directory) was not closed after START")
        spawned = run.process_calls()
        evidence("fork/exec calls", _shown(spawned) or "none")
        problems.when(spawned, f"the helper started a process or exec'd: {_shown(spawned)}")


@pytest.mark.requirement("HELPER-4")
def test_supervisor_holds_the_received_descriptor_close_on_exec(inv, bus, module_peer, evidence):
    supervisor = inv.units.supervisor
    baseline = observe.supervisor_descriptors(bus, supervisor)
    with scratch.directory("pty-acceptance-received-") as d:
        want = os.stat(d)
        raw = RawSession(module_peer, inv.socket).open()
        try:
            raw.sock.settimeout(10)
            dirfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:  # the header and part of a START: the supervisor holds the fd while it waits
                frame = p.encode(p.T.START, p.start_payload(["/bin/true"], 60))
                raw.send(frame[:12], [dirfd])
            finally:
                os.close(dirfd)
            held = _wait_held(bus, supervisor, (want.st_dev, want.st_ino))
        finally:
            raw.close()
        left = observe.wait_descriptors_back(bus, supervisor, baseline, 5)
    evidence("supervisor descriptor for the passed directory (pid, fd), flags",
             held and (held[0], oct(held[1])))
    evidence("supervisor descriptors left after close", left or "none")
    if not held:
        raise finding("HELPER-4", f"the supervisor never showed a descriptor for the directory passed with "
                                  f"a START within 5 s (processes {sorted({k[0] for k in baseline})})")
    (pid, fd), flags = held
    expect(flags & observe.O_CLOEXEC, "HELPER-4",
           f"supervisor pid {pid} holds the received directory as fd {fd} without close-on-exec (flags {oct(flags)})")


def _wait_held(bus, supervisor, key, deadline_s=5.0):
    end, delay = time.monotonic() + deadline_s, 0.005
    while time.monotonic() < end:
        for (pid, fd) in observe.supervisor_descriptors(bus, supervisor):
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) == key and stat.S_ISDIR(st.st_mode):
                    return (pid, fd), observe.fd_flags(pid, fd)
            except (OSError, ValueError):
                pass
        time.sleep(delay)  # poll interval, not a wait for an outcome
        delay = min(delay * 2, 0.05)
    return None


# A leaked descriptor is held for as long as its process lives; a clean
# command holds one only for an instant while it starts (the kernel closes the
# exec'ing launcher's close-on-exec descriptors after /proc/<pid>/exe already
# names the command; the dynamic loader opens and closes libc). So the tables
# are read until they are clean, and a failure shows them as they still were
# at the deadline.
STEADY_S = 3.0


def _foreign_descriptors(procs, cat: int) -> tuple[dict, list[str]]:
    """One reading of the session's descriptor tables, and what is wrong in it."""
    seen = {pr.pid: proc.fds(pr.pid) for pr in procs.procs}
    stdio = observe.socket_inode(seen.get(procs.main_pid, {}).get(0, ""))
    problems = []
    for pid, table in seen.items():
        for fd, target in table.items():
            try:
                mode = os.stat(f"/proc/{pid}/fd/{fd}").st_mode
            except FileNotFoundError:
                continue  # closed since the listing: not held
            if stat.S_ISDIR(mode):
                problems.append(f"pid {pid} fd {fd} is a directory ({target})")
            ino = observe.socket_inode(target)
            if ino is not None and ino != stdio:
                problems.append(f"pid {pid} fd {fd} is {target}, not the unit's stdio socket:[{stdio}]")
    if sorted(seen[cat]) != [0, 1, 2] or not all(t.startswith("/dev/pts/") for t in seen[cat].values()):
        problems.append(f"the command (pid {cat}) holds {seen[cat]}, expected exactly 0-2 on its PTY")
    return seen, problems


@pytest.mark.requirement("HELPER-4")
def test_session_processes_inherit_no_foreign_descriptor(inv, bus, module_peer, evidence):
    cat_exe = os.path.realpath("/bin/cat")
    with scratch.directory("pty-acceptance-cwd-", mode=0o755) as d:
        raw = RawSession(module_peer, inv.socket).open()
        try:
            raw.sock.settimeout(10)
            raw.start(["/bin/cat"], runtime_s=60, cwd=d)
            unit = raw.wait_started().unit
            procs = observe.wait_exec(bus, unit, cat_exe, 10)
            described = procs.describe()
            cat = next(pr.pid for pr in procs.procs if pr.exe() == cat_exe)
            readings = []  # (tables, problems) of every reading, the last one judged

            def clean():
                readings.append(_foreign_descriptors(procs, cat))
                return not readings[-1][1]

            try:
                poll(clean, STEADY_S, "clean descriptor tables")
            except TimeoutError:
                pass  # judged below on the last reading
            raw.send(p.encode(p.T.EOF))
            raw.wait_end(15)
        finally:
            raw.close()
    seen, problems = readings[-1]
    transient = next((found for _, found in readings if found), "none")
    evidence("session processes", described)
    evidence("their descriptors", seen)
    evidence("readings until clean", f"{len(readings)}; the first unclean one: {transient}")
    expect(not problems, "HELPER-4", f"{unit}: " + "; ".join(problems) + f" (still so after {STEADY_S} s)")


# ------------------------------------------------------------------ HELPER-5
@pytest.mark.requirement("HELPER-5")
def test_runtime_metadata_is_that_of_the_exact_build(traced, inv, evidence):
    run = _run(traced, "HELPER-5", evidence)
    helper = inv.binaries.client
    actual = hostfs.sha256_nofollow(helper.path)  # not host.file's sha256sum: Testinfra follows links
    evidence("helper sha256", f"{actual}  {helper.path}")
    evidence("opened paths", run.opened_paths())
    expect(actual == helper.sha256, "HELPER-5",
           f"the traced helper {helper.path} hashes to {actual}, not the claimed "
           f"{helper.sha256}: its runtime reads were not observed on the exact build")
    extra = [x for x in run.opened_paths() if x not in ht.RUNTIME_METADATA]
    expect(not extra, "HELPER-5", f"the helper opened paths outside the runtime metadata list: {extra}")
    unclosed = run.runtime_fds_closed()
    expect(not unclosed, "HELPER-5", f"runtime metadata descriptors were never closed: {unclosed}")
