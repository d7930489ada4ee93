"""Protocol limits and rejections, and the launcher's argument contract.

The suite speaks the wire format itself (RawSession: the disposable peer
authenticates, then hands its connected socket over), so it can send what the
helper never would. Around every rejection it watches systemd's UnitNew
signals (unitwatch.UnitWatch): a rejected START must create no session unit at
all, not even for a moment, and none may be left; every accepted START's unit
must have been announced to the watch, or the watch was blind and its "no
unit" proves nothing. Around every PROTO-3 case it reads what each process
of the supervisor unit holds (MainPID and its cgroup: the reference
supervisor is a Go wrapper with a Python child), by identity (the fd link's
description and fdinfo's mnt_id and ino), before and after: nothing may be
held after that was not held before (a count would miss a descriptor kept
while another was closed), and processes that cannot be read fail the case.

PROTO-1 each limit at the limit is accepted (STARTED) and one past it is
        ERROR LIMIT with no unit: command 4,096 bytes (a path that long cannot
        be exec'd, so the session then fails: accepted means STARTED), 128
        arguments, 16,384 bytes in one argument, 65,536 argument bytes in all,
        runtime 3,600 s (the unit's RuntimeMaxUSec is read back; 3,601 and 0
        are rejected); and every limit at once, a START exactly at its bound.
PROTO-2 a 65,536-byte write into the real helper's stdin reaches the
        supervisor as two DATA frames of 32,768 bytes. Observed as the bytes
        the helper wrote on its socket (strace of the helper, every write in
        full, see pty_acceptance/supervisor/helpertrace.py) decoded into frames; the
        session's command reading all 1,024 lines shows they arrived.
PROTO-3 each malformed message is ERROR PROTOCOL, then the connection is
        closed, no unit appears and no supervisor descriptor is left: bad
        UTF-8, NUL (inside an argument, last in the command, the first
        byte of the command and of an argument, an argument that is only
        NUL), START without a descriptor or with two, MSG_CTRUNC (provoked
        with 253 descriptors, the kernel's SCM_MAX_FD, more than any
        bounded receive buffer has room for), argc/length fields that
        disagree with the payload, frames in the wrong direction, unknown
        types, a length field over the type's bound (header only: a bound
        checked before the payload is read), DATA in place of START (a
        supervisor cannot tell DATA sent just before STARTED from DATA sent
        just after it; DATA before any START is the decidable case); after
        STARTED: a second START, an oversized DATA, a wrong-direction and an
        unknown frame (these also stop the unit: they run side by side).
PROTO-4 the installed launcher, run directly as the service user with fd 2 a
        directory (in a unit of its own, traced by root from its first
        instruction: a run another process interfered with is no answer), refuses arguments that are not canonical `a` +
        unpadded base64url (no `a`, padding, `+`/`/`, non-zero trailing bits,
        other characters) without exec'ing anything, and runs canonical ones
        in the directory of fd 2 with the caller's environment gone; a live
        session unit's ExecStart is the launcher with only canonical
        arguments that decode to the START argv, and its processes are
        script -q -e -f -c "/bin/sh -i -c 'exec /proc/self/fd/3 --exec'"
        /dev/null (stdout and stderr one socket, cwd the passed directory,
        at most one environment variable) running the command.

A failure names the case, the frames or error seen, the unit(s) created and
the descriptors the supervisor kept.
"""

from __future__ import annotations

import base64
import grp
import os
import pwd
import re
import secrets
from concurrent.futures import ThreadPoolExecutor

import pytest

from pty_acceptance.supervisor import helpertrace as ht
from pty_acceptance.host import observe, proc
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.host import scratch, userunit
from pty_acceptance.host.bus import SERVICE_IFACE
from pty_acceptance.supervisor.session_clients import RawSession, SessionError
from pty_acceptance.host.systemd import ANY_SESSION
from pty_acceptance.host.unitwatch import UnitWatch, watch_problems
from pty_acceptance.gate.checks import collect, expect, expect_none, finding, reading
from pty_acceptance.gate.failures import fail

L = p.LIMITS
TRUE = "/bin/true"
READ_DEADLINE_S = 10
SETTLE_S = 5  # bound for units to go and descriptors to come back
CANONICAL = re.compile(r"^a[A-Za-z0-9_-]*$")
INNER = "/bin/sh -i -c 'exec /proc/self/fd/3 --exec'"
SCRIPT_ARGV = ["-q", "-e", "-f", "-c", INNER, "/dev/null"]


def _open(peer, inv) -> RawSession:
    raw = RawSession(peer, inv.socket).open()
    raw.sock.settimeout(READ_DEADLINE_S)  # blocking sends of large frames, bounded
    return raw


def _to_end(raw: RawSession):
    """Read every frame until the supervisor closes the connection."""
    return raw.read(lambda o: False, READ_DEADLINE_S)


# ------------------------------------------------------------------ PROTO-1
def _cmd(n):  # a UTF-8 command of exactly n bytes
    return "/" + "c" * (n - 1)


LIMIT_CASES = {
    # name: ((argv, runtime) at the limit, [(argv, runtime) one past it, ...])
    "command bytes": ((["/" * (L.command_bytes - len("bin/true")) + "bin/true"], 60),
                      [([_cmd(L.command_bytes + 1)], 60)]),
    "argument count": (([TRUE] + ["x"] * L.args, 60), [([TRUE] + ["x"] * (L.args + 1), 60)]),
    "bytes in one argument": (([TRUE, "x" * L.arg_bytes], 60), [([TRUE, "x" * (L.arg_bytes + 1)], 60)]),
    "aggregate argument bytes": (([TRUE] + ["x" * L.arg_bytes] * 4, 60),
                                 [([TRUE] + ["x" * L.arg_bytes] * 4 + ["x"], 60)]),
    "runtime seconds": ((["/bin/cat"], L.runtime_max_s), [([TRUE], L.runtime_max_s + 1), ([TRUE], 0)]),
    "every limit at once": (([_cmd(L.command_bytes)] + ["y" * (L.aggregate_arg_bytes // L.args)] * L.args, 60),
                            []),
}


def _accepted(raw: RawSession, bus, runtime_s: int) -> dict:
    out = raw.wait_started(READ_DEADLINE_S)
    facts = {"unit": out.unit}
    if runtime_s == L.runtime_max_s:  # the session waits on cat: read the applied runtime, then EOF
        props = bus.properties(out.unit, SERVICE_IFACE) or {}
        facts["RuntimeMaxUSec"] = props.get("RuntimeMaxUSec")
        raw.send(p.encode(p.T.EOF))
    out = _to_end(raw)
    facts.update(exit=out.exit, error=out.error, closed=out.closed)
    return facts


def _rejected(raw: RawSession) -> dict:
    out = _to_end(raw)
    return {"unit": out.unit, "error": out.error, "closed": out.closed,
            "frames": [f.name for f in out.frames]}


@pytest.mark.requirement("PROTO-3")
def test_hello_is_answered_in_the_contracts_framing(wire_format, inv, evidence):
    """The first exchange of the run (conftest's wire_format): a supervisor
    that answers in another framing fails here, once, with what it sent; the
    session-driven tests then say "not run: wire format" instead of failing
    in their own words."""
    evidence("first HELLO", wire_format or f"answered in the contract's framing at {inv.socket}")
    if wire_format:
        raise finding("PROTO-3", wire_format.removeprefix('wire format: '))


@pytest.mark.requirement("PROTO-1")
@pytest.mark.parametrize("case", list(LIMIT_CASES))
def test_limit_accepted_at_and_rejected_past(case, inv, bus, module_peer, evidence):
    (at_argv, at_rt), past = LIMIT_CASES[case]
    payload = p.start_payload(at_argv, at_rt)
    evidence("START payload bytes at the limit", f"{len(payload)} (bound {p.START_BOUND})")
    with UnitWatch(ANY_SESSION, exclude={inv.units.supervisor}) as watch:
        sessions = [_open(module_peer, inv) for _ in range(1 + len(past))]
        try:
            for raw, (argv, rt) in zip(sessions, [(at_argv, at_rt)] + past, strict=True):
                raw.start(argv, runtime_s=rt)
            with ThreadPoolExecutor(len(sessions)) as pool:
                at = pool.submit(_accepted, sessions[0], bus, at_rt)
                over = [pool.submit(_rejected, s) for s in sessions[1:]]
                at_facts, over_facts = _result(at), [_result(f) for f in over]
        finally:
            for s in sessions:
                s.close()
        created, _ = watch.sync()
        left = watch.wait_gone(created, SETTLE_S)
    evidence("at the limit", at_facts)
    evidence("past the limit", over_facts)
    evidence("session units created", sorted(created) or "none")
    with collect("PROTO-1", case) as problems:
        if not isinstance(at_facts, dict) or not at_facts.get("unit"):
            problems.add(f"at the limit the START was not accepted: {at_facts}")
        elif at_rt == L.runtime_max_s and at_facts.get("RuntimeMaxUSec") != L.runtime_max_s * 1_000_000:
            problems.add(f"{at_facts['unit']} has RuntimeMaxUSec={at_facts.get('RuntimeMaxUSec')}, "
                         f"expected {L.runtime_max_s * 1_000_000}")
        for (argv, rt), facts in zip(past, over_facts, strict=True):
            what = f"one past the limit (argc {len(argv)}, runtime {rt})"
            if not isinstance(facts, dict):
                problems.add(f"{what}: {facts}")
                continue
            problems.when(facts["unit"] or not facts["error"] or facts["error"][0] != p.Code.LIMIT,
                          f"{what} was answered {facts['frames']} error {facts['error']}, "
                          f"expected ERROR {p.Code.LIMIT} (LIMIT) and no STARTED")
        accepted = {at_facts["unit"]} if isinstance(at_facts, dict) and at_facts.get("unit") else set()
        problems += watch_problems(created, accepted)
        problems.when(left, f"session units still loaded after {SETTLE_S} s: {sorted(left)}")


def _result(future):
    try:
        return future.result(READ_DEADLINE_S * 2)
    except (TimeoutError, SessionError, OSError, p.ProtocolError) as e:
        return f"{type(e).__name__}: {e}"


# ------------------------------------------------------------------ PROTO-2
@pytest.fixture(scope="module")
def traced(inv, module_peer):
    argv = ["/bin/sh", "-c", "head -n 1024 >/dev/null && echo GOT-ALL"]
    try:
        return ht.run_traced(module_peer, inv.socket, inv.binaries.client.path,
                             inv.service_user, argv, ht.lines_of(1024))
    except (ht.TraceError, OSError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"


@pytest.mark.requirement("PROTO-2")
def test_a_65536_byte_write_becomes_two_32768_byte_frames(traced, evidence):
    if isinstance(traced, str):
        raise finding("PROTO-2", f"the helper could not be observed in a session: {traced}")
    if traced.scope_left:
        fail(f"PROTO-2: SUITE-4: what the helper ran in could not be removed: {traced.scope_left}")
    frames, unframed = traced.frames_to_supervisor()
    data = [f for f in frames if f.type == p.T.DATA]
    evidence("helper reads of its stdin (bytes)", traced.stdin_reads())
    evidence("frames the helper wrote", [(f.name, len(f.payload)) for f in frames])
    evidence("session output (tail)", traced.output[-80:])
    sizes = [len(f.payload) for f in data]
    with collect("PROTO-2") as problems:
        problems += unframed
        problems.when(sizes != [L.data_bytes, L.data_bytes],
                      f"65,536 input bytes went out as DATA frames of {sizes}, expected two of {L.data_bytes}")
        problems.when(b"".join(f.payload for f in data) != traced.stdin,
                      "the DATA payloads are not the bytes written to the helper's stdin")
        problems.when(b"GOT-ALL" not in traced.output or traced.status != 0,
                      f"the session did not read all 1,024 lines (status {traced.status}, "
                      f"output tail {traced.output[-120:]!r})")


# ------------------------------------------------------------------ PROTO-3
def _start(argv):
    return lambda raw: raw.start(list(argv))


def _frame(type_, payload=b""):
    return lambda raw: raw.send(p.encode(type_, payload, check=False))


def _header(type_, length):
    return lambda raw: raw.send(p.HEADER.pack(length, type_))


def _start_payload(payload, n_fds=1):
    def send(raw):
        dirs = [_dir() for _ in range(n_fds)]
        try:
            raw.send(p.encode(p.T.START, payload, check=False), dirs)
        finally:
            p.close_all(dirs)
    return send


def _dir():
    return os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _with_dirs(n):
    def send(raw):
        one = _dir()
        try:
            raw.start([TRUE], fds=[one] * n)
        finally:
            os.close(one)
    return send


PRE_START = {
    "malformed UTF-8 in an argument": _start([TRUE, b"\xc3\x28"]),
    "malformed UTF-8 in the command": _start([b"/bin/tru\xff"]),
    "NUL in an argument": _start([TRUE, b"a\x00b"]),
    "NUL in the command": _start([b"/bin/true\x00"]),
    "NUL as the first byte of the command": _start([b"\x00/bin/true"]),
    "NUL as the first byte of an argument": _start([TRUE, b"\x00a"]),
    "an argument that is only NUL": _start([TRUE, b"\x00"]),
    "START without a descriptor": _with_dirs(0),
    "START with two descriptors": _with_dirs(2),
    "MSG_CTRUNC (253 descriptors)": _with_dirs(253),
    "argc larger than the arguments": _start_payload(p.start_fields(3, [TRUE.encode(), b"x"])),
    "argument length past the payload": _start_payload(p.start_fields(1, [], p.u32(64) + TRUE.encode())),
    "bytes after the last argument": _start_payload(p.start_fields(1, [TRUE.encode()], b"zz")),
    "HELLO_OK (0x81) sent to the supervisor": _frame(p.T.HELLO_OK, bytes(16)),
    "EXIT (0x84) sent to the supervisor": _frame(p.T.EXIT, bytes(8)),
    "unknown frame type 0x07": _frame(0x07),
    "unknown frame type 0x7f": _frame(0x7F, b"x"),
    "START length over its bound (header only)": _header(p.T.START, p.START_BOUND + 1),
    "DATA length over its bound (header only)": _header(p.T.DATA, L.data_bytes + 1),
    "DATA before STARTED (in place of START)": _frame(p.T.DATA, b"echo\n"),
}

AFTER_STARTED = {
    "a second START": _start(["/bin/cat"]),
    "DATA length over its bound (header only)": _header(p.T.DATA, L.data_bytes + 1),
    "STARTED (0x82) sent to the supervisor": _frame(p.T.STARTED, b"opencode-pty-x.service"),
    "unknown frame type 0x42": _frame(0x42),
}


def _protocol_problems(what: str, facts) -> list[str]:
    if not isinstance(facts, dict):
        return [f"{what}: {facts}"]
    out = []
    if not facts["error"] or facts["error"][0] != p.Code.PROTOCOL:
        out.append(f"{what}: answered {facts['frames']} error {facts['error']}, expected ERROR "
                   f"{p.Code.PROTOCOL} (PROTOCOL)")
    if not facts["closed"]:
        out.append(f"{what}: the connection stayed open")
    return out


def _baseline(inv, bus) -> dict:
    """Every descriptor of every supervisor process, before a case; fails the
    test when they cannot be read (an empty table would match anything)."""
    with reading("PROTO-3", "the supervisor's descriptors cannot be read, so none left behind could be seen",
                 observe.DescriptorError):
        return observe.supervisor_descriptors(bus, inv.units.supervisor)


def _per_process(table: dict) -> dict[int, int]:
    out: dict[int, int] = {}
    for pid, _ in table:
        out[pid] = out.get(pid, 0) + 1
    return out


def _settle(inv, bus, watch, baseline, started: set[str]) -> list[str]:
    created, _ = watch.sync()
    problems = watch_problems(created, started)
    left = watch.wait_gone(created, SETTLE_S)
    if left:
        problems.append(f"session units still loaded after {SETTLE_S} s: {sorted(left)}")
    try:
        kept = observe.wait_descriptors_back(bus, inv.units.supervisor, baseline, SETTLE_S)
    except observe.DescriptorError as e:
        return problems + [f"the supervisor's descriptors cannot be read after the case: {e}"]
    if kept:
        problems.append(f"the supervisor holds {len(kept)} descriptors after {SETTLE_S} s that it did "
                        f"not hold before: {dict(list(kept.items())[:8])}")
    return problems


@pytest.mark.requirement("PROTO-3")
@pytest.mark.parametrize("case", list(PRE_START))
def test_malformed_message_is_rejected(case, inv, bus, module_peer, evidence):
    baseline = _baseline(inv, bus)
    with UnitWatch(ANY_SESSION, exclude={inv.units.supervisor}) as watch:
        raw = _open(module_peer, inv)
        try:
            try:
                PRE_START[case](raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the supervisor may close before the whole message is sent; read its answer
            facts = _result_of(lambda: _rejected(raw))
        finally:
            raw.close()
        problems = _protocol_problems(case, facts)
        if isinstance(facts, dict) and facts["unit"]:
            problems.append(f"STARTED {facts['unit']}")
        problems += _settle(inv, bus, watch, baseline, set())
    evidence("answer", facts)
    evidence("supervisor descriptors before (pid: count)", _per_process(baseline))
    expect_none(problems, "PROTO-3")


def _result_of(fn):
    try:
        return fn()
    except (TimeoutError, SessionError, OSError, p.ProtocolError) as e:
        return f"{type(e).__name__}: {e}"


def _after_started(raw: RawSession, send) -> dict:
    out = raw.wait_started(READ_DEADLINE_S)
    unit = out.unit
    send(raw)
    facts = _rejected(raw)
    facts["unit"] = unit
    return facts


@pytest.mark.requirement("PROTO-3")
def test_malformed_message_after_started_is_rejected_and_stops_the_unit(inv, bus, module_peer, evidence):
    baseline = _baseline(inv, bus)
    with UnitWatch(ANY_SESSION, exclude={inv.units.supervisor}) as watch:
        sessions = {case: _open(module_peer, inv) for case in AFTER_STARTED}
        try:
            for raw in sessions.values():
                raw.start(["/bin/cat"])
            with ThreadPoolExecutor(len(sessions)) as pool:
                futures = {c: pool.submit(_after_started, raw, AFTER_STARTED[c]) for c, raw in sessions.items()}
                results = {c: _result(f) for c, f in futures.items()}
        finally:
            for raw in sessions.values():
                raw.close()
        problems = [x for c, facts in results.items() for x in _protocol_problems(c, facts)]
        started = {f["unit"] for f in results.values() if isinstance(f, dict) and f["unit"]}
        if len(started) != len(AFTER_STARTED):
            problems.append(f"only {len(started)} of {len(AFTER_STARTED)} sessions started: {results}")
        problems += _settle(inv, bus, watch, baseline, started)
    evidence("answers", results)
    evidence("supervisor descriptors before (pid: count)", _per_process(baseline))
    expect_none(problems, "PROTO-3", "after STARTED")


# ------------------------------------------------------------------ PROTO-4
def enc(arg: bytes | str) -> str:
    raw = arg.encode() if isinstance(arg, str) else arg
    return "a" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def dec(arg: str) -> bytes | None:
    """The canonical decoding, or None if `arg` is not canonical."""
    if not CANONICAL.match(arg):
        return None
    body = arg[1:]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except ValueError:
        return None
    return raw if enc(raw) == arg else None


TOKEN = "RAN-" + secrets.token_hex(4)
# the third element is the defect; the first two are canonical, so a launcher that
# tolerated it would exec echo and print TOKEN
NON_CANONICAL = {
    "no leading a": "eA",
    "padding": enc("x") + "==",
    "standard alphabet + and /": "a+/+/",
    "non-zero trailing bits": enc("x")[:-1] + "B",
    "a character outside the alphabet": "ae.A",
    "a newline": enc("x") + "\n",
}


def _launch(inv, args: list[str], workdir: str, env: dict) -> tuple[int, bytes]:
    """The installed launcher as the service user, in a unit of its own behind the gate and
    traced by root from its first instruction (userunit.run_gated): stdin /dev/null, stdout a
    pipe, fd 2 a directory. The launcher is an ordinary dumpable program of the user's: a
    process of the user's could attach to it and make it exit as it likes; a run the trace
    shows interfered with is no answer."""
    try:
        acct = pwd.getpwnam(inv.service_user)
        group = grp.getgrnam(inv.service_group)
    except KeyError as e:
        raise finding("PROTO-4", f"the service account does not exist: {e}") from None
    job = userunit.Job(purpose="PROTO-4 launcher", argv=(inv.binaries.launcher.path, *args),
                       account=pwd.struct_passwd((*acct[:3], group.gr_gid, *acct[4:])), cwd="/", env=env,
                       stderr_dir=workdir)
    with reading("PROTO-4", "the launcher could not be run", userunit.UnitError):
        ended = userunit.run_gated(job, READ_DEADLINE_S, "launch")
    if ended.traced is not None and not ended.traced.passed:
        raise finding("PROTO-4", "the launcher's run cannot be taken for an answer: "
                                 + "; ".join(ended.traced.problems()))
    expect(not ended.timed_out, "PROTO-4", f"the launcher {ended.ending()}")
    return (ended.exit_status if ended.exit_status is not None else 128 + (ended.signal or 0)), ended.output[:65536]


@pytest.fixture(scope="module")
def workdir():
    with scratch.directory("pty-acceptance-launch-", mode=0o755) as d:
        yield d


@pytest.mark.requirement("PROTO-4")
@pytest.mark.parametrize("defect", list(NON_CANONICAL))
def test_launcher_refuses_non_canonical_arguments(defect, inv, workdir, evidence):
    bad = NON_CANONICAL[defect]
    args = [enc("/bin/echo"), enc(TOKEN), bad]
    if dec(bad) is not None:
        fail(f"test error: {bad!r} is canonical")
    status, out = _launch(inv, args, workdir, {"PATH": "/usr/bin:/bin"})
    evidence("argv", args)
    evidence("status / output", f"{status} {out[:300]!r}")
    expect(status != 0 and TOKEN.encode() not in out, "PROTO-4",
           f"the launcher accepted a non-canonical argument ({defect}: {bad!r}): exit {status}, "
           f"output {out[:200]!r}")


@pytest.mark.requirement("PROTO-4")
def test_launcher_runs_canonical_arguments_in_the_passed_directory(inv, workdir, evidence):
    canary = "LEAK_" + secrets.token_hex(4)
    argv = ["/bin/sh", "-c", 'pwd; env; echo "$1"', "sh", TOKEN]
    status, out = _launch(inv, [enc(a) for a in argv], workdir, {"PATH": "/usr/bin:/bin", canary: "1"})
    evidence("status / output", f"{status} {out[:600]!r}")
    lines = out.replace(b"\r\n", b"\n").split(b"\n")
    with collect("PROTO-4") as problems:
        problems.when(status != 0 or TOKEN.encode() not in lines, f"canonical arguments did not run: exit {status}")
        problems.when(os.path.realpath(workdir).encode() not in lines,
                      f"the command did not run in the directory of fd 2 ({workdir})")
        problems.when(canary.encode() in out, f"the caller's environment reached the command ({canary})")
        problems.when(problems, f"output {out[:300]!r}")  # what it printed, after what it got wrong


@pytest.fixture(scope="module")
def live(inv, bus, module_peer):
    """A live session running cat: its ExecStart, processes and descriptors."""
    argv = ["/bin/sh", "-c", "exec cat", "with space", "quote'\"$x", "new\nline", ""]
    with scratch.directory("pty-acceptance-live-", mode=0o755) as d:
        raw = _open(module_peer, inv)
        try:
            raw.start(argv, cwd=d)
            unit = raw.wait_started(READ_DEADLINE_S).unit
            procs = observe.wait_exec(bus, unit, os.path.realpath("/bin/cat"), READ_DEADLINE_S)
            facts = {"argv": argv, "cwd": os.path.realpath(d), "unit": unit,
                     "exec_start": (bus.properties(unit, SERVICE_IFACE) or {}).get("ExecStart"),
                     "tree": [], "main_pid": procs.main_pid}
            for pr in procs.procs:
                facts["tree"].append({"pid": pr.pid, "ppid": pr.ppid(), "exe": pr.exe(),
                                      "argv": pr.cmdline(), "cwd": pr.cwd(),
                                      "fds": proc.fds(pr.pid), "environ": _environ(pr.pid)})
            raw.send(p.encode(p.T.EOF))
            _result_of(lambda: _to_end(raw))
        except (TimeoutError, SessionError, OSError) as e:
            facts = f"{type(e).__name__}: {e}"
        finally:
            raw.close()
    return facts


def _environ(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return [e for e in f.read().split(b"\0") if e]


def _live(live):
    if isinstance(live, str):
        raise finding("PROTO-4", f"no live session to inspect: {live}")
    return live


@pytest.mark.requirement("PROTO-4")
def test_session_execstart_is_the_launcher_with_canonical_arguments(live, inv, evidence):
    facts = _live(live)
    launcher = inv.binaries.launcher.path
    evidence("ExecStart", facts["exec_start"])
    entries = facts["exec_start"] or []
    expect(len(entries) == 1, "PROTO-4", f"{facts['unit']} has {len(entries)} ExecStart entries: {entries}")
    path, argv = entries[0][0], list(entries[0][1])
    decoded = [dec(a) for a in argv[1:]]
    bad = [a for a, d in zip(argv[1:], decoded, strict=True) if d is None]
    with collect("PROTO-4", facts["unit"]) as problems:
        problems.when(path != launcher or argv[:1] != [launcher],
                      f"ExecStart runs {path} with argv[0] {argv[:1]}, expected {launcher}")
        if bad:
            problems.add(f"non-canonical launcher arguments {bad[:4]}")
        elif decoded != [a.encode() for a in facts["argv"]]:
            problems.add(f"the launcher arguments decode to {decoded}, the START argv was {facts['argv']}")


@pytest.mark.requirement("PROTO-4")
def test_session_runs_script_with_the_fixed_inner_shell(live, evidence):
    facts = _live(live)
    tree = facts["tree"]
    evidence("processes", [{k: v for k, v in t.items() if k != "environ"} for t in tree])
    evidence("MainPID environment", tree[0]["environ"] if tree else None)
    main = tree[0] if tree else {}
    script = os.path.realpath("/usr/bin/script")
    fds = main.get("fds", {})
    sh, cat = os.path.realpath("/bin/sh"), os.path.realpath("/bin/cat")
    rest = tree[1:]
    chain = [t["pid"] for t in tree]
    with collect("PROTO-4", facts["unit"]) as problems:
        problems.when(main.get("exe") != script or os.path.basename(main.get("argv", [""])[0]) != "script"
                      or main.get("argv", [])[1:] != SCRIPT_ARGV,
                      f"MainPID {main.get('pid')} runs {main.get('exe')} {main.get('argv')}, expected "
                      f"{script} {SCRIPT_ARGV}")
        problems.when(not (fds.get(1) and fds.get(1) == fds.get(2) and observe.socket_inode(fds[1]) is not None),
                      f"MainPID's stderr is not its stdout socket: fds {fds}")
        problems.when(main.get("cwd") != facts["cwd"],
                      f"MainPID's cwd is {main.get('cwd')}, not the passed directory {facts['cwd']}")
        if len(main.get("environ", [])) > 1:
            problems.add(f"MainPID's environment was not cleared: {len(main['environ'])} variables")
        problems.when(not rest or rest[-1]["exe"] != cat or rest[-1]["argv"] != ["cat"],
                      f"the command is not the last process: {[(t['exe'], t['argv']) for t in rest]}")
        for t in rest[:-1]:
            problems.when(t["exe"] != sh or INNER not in " ".join(t["argv"]),
                          f"unexpected process between script and the command: {t['exe']} {t['argv']}")
        problems.when(any(t["ppid"] != chain[i] for i, t in enumerate(rest)),
                      f"the processes are not one chain: {[(t['pid'], t['ppid']) for t in tree]}")
