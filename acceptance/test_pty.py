"""What a session does on its terminal (TARGET-CONTRACT sections 3-5).

Sessions are short commands that end by themselves (or on end of input), so
no test waits for script(1)'s two-second stop. Output is the PTY's: lines end
in \\r\\n and the terminal echoes input.

PTY-1  while a session's command runs, the unit's MainPID is /usr/bin/script
       with exactly `-q -e -f -c "/bin/sh -i -c 'exec /proc/self/fd/3
       --exec'" /dev/null`; every process between it and the command is
       /bin/sh running that fixed inner shell (whose `/bin/sh -i` process
       is the one exec'd into the launcher and then the command; dash's
       `exec` undoes the job control, so -i leaves no trace to read).
PTY-2  arguments with spaces, quotes, $, backticks, ;|&<>, newlines, empty
       strings and non-ASCII UTF-8 reach the command as exactly the argv
       sent, through the raw protocol and through the fixed helper.
PTY-3  the command's stdio is a terminal in canonical mode with echo;
       terminal input is echoed and line-edited; the window size is the one
       START sent and follows RESIZE; interleaved stdout/stderr lines arrive
       in order; end of input reaches the command; script -e hands the
       command's status to EXIT.
PTY-4  exit 0, exit 3 and signal deaths are reported exactly, in EXIT and as
       the helper's exit status. A command killed by signal N is what
       script -e makes of it, exit status 128+N: EXIT (128+N, 0). The
       session's main process (script) killed by signal N: EXIT (0, N). The
       helper exits with the code, or 128+N for a signal.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest

from pty_acceptance.host import proc
from pty_acceptance.host.cgroupkill import kill_inside
from pty_acceptance.supervisor import session_inspect as live
from pty_acceptance.supervisor import unit_vouch
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.host.bus import SERVICE_IFACE, BusError
from pty_acceptance.gate.checks import collect, expect, expect_none, reading
from pty_acceptance.supervisor.peer import PeerError
from pty_acceptance.supervisor.session_clients import HelperSession, RawSession, SessionError

INNER = b"/bin/sh -i -c 'exec /proc/self/fd/3 --exec'"
SCRIPT_ARGV = [b"script", b"-q", b"-e", b"-f", b"-c", INNER, b"/dev/null"]
SCRIPT = "/usr/bin/script"
SESSION_S = 10          # every session here ends well within this
ARGS = ["two words", "it's", 'say "hi"', "$HOME", "${PATH}", "`id`", "$(id -u)", "a;b|c&d<e>f",
        "line1\nline2", "", "  lead and trail  ", "\\back\\slash\\", "*", "~", "#not a comment",
        "'", '"', "-c", "--", "\t", "ünïcødé ✓ 日本語 🙂"]
PRINT_ARGV = ["python3", "-I", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"]



@pytest.fixture(scope="module")
def peer(module_peer):
    """The module's peer in place of conftest's per-test one (sessions here run
    one after another, each ending by itself)."""
    return module_peer


@contextlib.contextmanager
def raw(inv, peer, argv, rid, **kw):
    s = RawSession(peer, inv.socket)
    try:
        with reading(rid, f"the session {argv[:3]} did not start", SessionError, PeerError, TimeoutError, OSError):
            s.open()
            s.start(argv, runtime_s=60, **kw)
            s.wait_started(SESSION_S)
        yield s
    finally:
        s.close()


def run_raw(inv, peer, argv, rid, data=None, **kw):
    """Run argv to its end; `data` (then EOF) is its terminal input."""
    with raw(inv, peer, argv, rid, **kw) as s:
        if data is not None:
            s.send(p.encode(p.T.DATA, data))
            s.send(p.encode(p.T.EOF))
        with reading(rid, f"{argv[:3]} did not end", TimeoutError):
            return s.wait_end(SESSION_S)


def run_helper(inv, peer, argv, rid, data=b""):
    h = HelperSession(peer, inv.socket, inv.binaries.client.path, argv)
    try:
        with reading(rid, f"the helper session {argv[:3]} failed", SessionError, PeerError, TimeoutError, OSError):
            h.open()
            return h.run(data, SESSION_S)
    finally:
        h.close()


def lines(output: bytes) -> list[bytes]:
    return [ln for ln in output.split(b"\r\n") if ln]


def session_processes(bus, unit, rid):
    """(MainPID, ControlGroup) of a live session unit."""
    with reading(rid, f"cannot read {unit}", BusError):
        svc = bus.properties(unit, SERVICE_IFACE) or {}
    expect(svc.get("MainPID") and svc.get("ControlGroup"), rid,
           f"{unit} has MainPID={svc.get('MainPID')} ControlGroup={svc.get('ControlGroup')}")
    return svc["MainPID"], svc["ControlGroup"]


# ------------------------------------------------------------------ PTY-1
def _shell_problems(main_pid, chain):
    # /proc, not host.process: Testinfra splits `ps` lines on spaces (argv, and comm first)
    problems = []
    if proc.cmdline(main_pid) != SCRIPT_ARGV:
        problems.append(f"MainPID {main_pid} runs {proc.cmdline(main_pid)}, expected {SCRIPT_ARGV}")
    if proc.exe(main_pid) != os.path.realpath(SCRIPT):
        problems.append(f"MainPID {main_pid} executes {proc.exe(main_pid)}, not {SCRIPT}")
    middle = chain[1:-1]
    for pid in middle:
        argv = proc.cmdline(pid)
        if proc.exe(pid) != os.path.realpath("/bin/sh") or argv[1:] != [b"-c", INNER] \
                or argv[0] not in (b"sh", b"/bin/sh"):
            problems.append(f"pid {pid} between script and the command runs {argv} "
                            f"({proc.exe(pid)}), not /bin/sh -c {INNER!r}")
    return problems


@pytest.mark.requirement("PTY-1")
def test_inner_shell_is_the_fixed_interactive_sh(inv, bus, peer, evidence, packaged):
    packaged(SCRIPT)
    with raw(inv, peer, ["cat"], "PTY-1") as s:
        unit = s.outcome.unit
        main_pid, cg = session_processes(bus, unit, "PTY-1")
        with reading("PTY-1", f"cannot read the process tree of {unit}", TimeoutError, live.LiveError, OSError):
            cmd = live.wait_for_command(cg, [b"cat"], SESSION_S)
            chain = live.chain_to(cmd, main_pid)
            tree = {pid: b" ".join(proc.cmdline(pid)).decode("utf-8", "replace") for pid in chain}
            problems = _shell_problems(main_pid, chain)
        evidence("unit / MainPID", f"{unit} {main_pid}")
        evidence("command -> ... -> MainPID", tree)
        s.send(p.encode(p.T.EOF))
        with contextlib.suppress(TimeoutError):
            s.wait_end(SESSION_S)
    expect_none(problems, "PTY-1", unit)


# ------------------------------------------------------------------ PTY-2
def _argv_seen(output: bytes):
    try:
        return json.loads(output.strip().decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


@pytest.mark.requirement("PTY-2")
def test_argv_boundaries_survive_the_raw_protocol(inv, peer, evidence):
    out = run_raw(inv, peer, PRINT_ARGV + ARGS, "PTY-2")
    seen = _argv_seen(out.output)
    evidence("sent", ARGS)
    evidence("the command saw", seen if seen is not None else out.output[:2000])
    expect(seen == ARGS, "PTY-2",
           f"{out.unit}: the command saw {seen!r} (output {out.output[:300]!r}), expected exactly {ARGS!r}")
    expect(out.exit == (0, 0), "PTY-2", f"{out.unit}: EXIT {out.exit}, expected (0, 0): {out.describe()}")


@pytest.mark.requirement("PTY-2")
def test_argv_boundaries_survive_the_fixed_helper(inv, peer, evidence):
    output, status = run_helper(inv, peer, PRINT_ARGV + ARGS, "PTY-2")
    seen = _argv_seen(output)
    evidence("helper exit status", status)
    evidence("the command saw", seen if seen is not None else output[:2000])
    expect(seen == ARGS and status == 0, "PTY-2",
           f"through the helper the command saw {seen!r} (output {output[:300]!r}, "
           f"helper status {status}), expected exactly {ARGS!r} and status 0")


# ------------------------------------------------------------------ PTY-3
@pytest.mark.requirement("PTY-3")
def test_stdio_is_a_terminal_in_canonical_mode(inv, peer, evidence):
    argv = ["sh", "-c", "test -t 0 && test -t 1 && test -t 2 && tty && stty -a"]
    out = run_raw(inv, peer, argv, "PTY-3")
    evidence("output", out.output[:2000])
    words = set(out.output.replace(b";", b" ").split())
    with collect("PTY-3", out.unit) as problems:
        problems.when(out.exit != (0, 0) or not out.output.startswith(b"/dev/pts/"),
                      f"stdin/stdout/stderr are not all a terminal (EXIT {out.exit}, output {out.output[:200]!r})")
        for mode in (b"icanon", b"echo", b"isig", b"onlcr"):
            problems.when(mode not in words, f"stty -a does not show {mode.decode()}")


@pytest.mark.requirement("PTY-3")
def test_terminal_input_is_echoed_and_line_edited(inv, peer, evidence):
    # ^? erases the c: cat must read "abd"; the terminal echoes what was typed
    out = run_raw(inv, peer, ["cat"], "PTY-3", data=b"hello\nabc\x7fd\n")
    evidence("EXIT", out.exit)
    evidence("output", out.output[:500])
    with collect("PTY-3", out.unit) as problems:
        problems.when(out.output.count(b"hello\r\n") != 2,
                      f"'hello' was not echoed and printed once each: {out.output[:200]!r}")
        problems.when(b"\r\nabd\r\n" not in out.output,
                      f"cat did not read the edited line 'abd': {out.output[:200]!r}")
        problems.when(out.exit != (0, 0), f"cat did not end cleanly on end of input: EXIT {out.exit}")


@pytest.mark.requirement("PTY-3")
def test_window_size_follows_start_and_resize(inv, peer, evidence):
    argv = ["sh", "-c", "stty size; read x; stty size"]
    with raw(inv, peer, argv, "PTY-3", rows=33, cols=101) as s:
        with reading("PTY-3", "the window-size session did not end", TimeoutError, OSError):
            s.read(lambda o: b"\r\n" in o.output or o.exit or o.error or o.closed, SESSION_S)
            s.send(p.encode(p.T.RESIZE, p.resize_payload(50, 132)))
            s.send(p.encode(p.T.DATA, b"go\n"))
            s.send(p.encode(p.T.EOF))
            out = s.wait_end(SESSION_S)
    seen = lines(out.output)
    evidence("START 33x101, then RESIZE 50x132: stty size printed", seen)
    expect(seen[:1] == [b"33 101"] and seen[-1:] == [b"50 132"], "PTY-3",
           f"{out.unit}: stty size printed {seen}, expected '33 101' (from START) and then '50 132' (after RESIZE)")


@pytest.mark.requirement("PTY-3")
def test_stdout_and_stderr_keep_their_order(inv, peer, evidence):
    n = 200
    argv = ["sh", "-c", f'i=1; while [ $i -le {n} ]; do echo out$i; echo err$i >&2; i=$((i+1)); done']
    out = run_raw(inv, peer, argv, "PTY-3")
    seen = lines(out.output)
    want = [f"{k}{i}".encode() for i in range(1, n + 1) for k in ("out", "err")]
    evidence("lines / DATA frames", [len(seen), sum(f.type == p.T.OUTPUT for f in out.frames)])
    first = next((i for i, (a, b) in enumerate(zip(seen, want, strict=False)) if a != b), None)
    expect(seen == want, "PTY-3",
           f"{out.unit}: {len(seen)} lines, expected {len(want)} alternating out/err; first difference at "
           f"line {first}: {seen[first] if first is not None else None!r}")


@pytest.mark.requirement("PTY-3")
def test_end_of_input_reaches_the_command(inv, peer, evidence):
    argv = ["sh", "-c", "cat; echo after-eof"]
    out = run_raw(inv, peer, argv, "PTY-3", data=b"x\n")
    evidence("raw: EXIT / output", [out.exit, out.output[:200]])
    helper_out, status = run_helper(inv, peer, argv, "PTY-3", data=b"y\n")
    evidence("helper: status / output", [status, helper_out[:200]])
    with collect("PTY-3", "cat did not end on end of input") as problems:
        problems.when(out.exit != (0, 0) or not out.output.endswith(b"x\r\nafter-eof\r\n"),
                      f"EOF frame: EXIT {out.exit}, output {out.output[-80:]!r}")
        problems.when(status != 0 or not helper_out.endswith(b"y\r\nafter-eof\r\n"),
                      f"helper stdin closed: status {status}, output {helper_out[-80:]!r}")


@pytest.mark.requirement("PTY-3")
def test_script_e_propagates_the_exit_status(inv, peer, evidence):
    out = run_raw(inv, peer, ["sh", "-c", "echo before; exit 7"], "PTY-3")
    evidence("EXIT", out.exit)
    expect(out.exit == (7, 0) and lines(out.output) == [b"before"], "PTY-3",
           f"{out.unit}: 'exit 7' ended as EXIT {out.exit} with output {out.output[:100]!r}, "
           f"expected EXIT (7, 0) after 'before'")


# ------------------------------------------------------------------ PTY-4
EXITS = [  # (what, argv, EXIT, helper status)
    ("exit 0", ["sh", "-c", "exit 0"], (0, 0), 0),
    ("exit 3", ["sh", "-c", "exit 3"], (3, 0), 3),
    ("command killed by SIGTERM", ["sh", "-c", "kill -TERM $$"], (128 + 15, 0), 128 + 15),
    ("command killed by SIGKILL", ["sh", "-c", "kill -KILL $$"], (128 + 9, 0), 128 + 9),
]


@pytest.mark.requirement("PTY-4")
def test_command_exits_are_reported_exactly_in_exit(inv, peer, evidence):
    with collect("PTY-4") as problems:
        for what, argv, want, _ in EXITS:
            out = run_raw(inv, peer, argv, "PTY-4")
            evidence(what, f"EXIT {out.exit} ({out.unit})")
            problems.when(out.exit != want or out.error, f"{what}: EXIT {out.exit} error {out.error}, expected {want}")


@pytest.mark.requirement("PTY-4")
def test_command_exits_are_the_helpers_exit_status(inv, peer, evidence):
    with collect("PTY-4") as problems:
        for what, argv, _, want in EXITS:
            _, status = run_helper(inv, peer, argv, "PTY-4")
            evidence(what, f"helper status {status}")
            problems.when(status != want, f"{what}: the helper exited {status}, expected {want}")


def _kill_main(inv, bus, unit, rid):
    """SIGKILL the MainPID of the session STARTED named, once vouched for (SUITE-4)."""
    with reading(rid, f"cannot read {unit}", unit_vouch.NotLoaded, BusError):
        unit_vouch.vouch(bus, unit, unit_vouch.Owner.of(inv))
    main_pid, cg = session_processes(bus, unit, rid)
    try:
        live.wait_for_command(cg, [b"cat"], SESSION_S)
        why = kill_inside(main_pid, None, cg)  # only while it is in the vouched unit
    except (TimeoutError, OSError) as e:
        why = str(e)
    expect(not why, rid, f"cannot SIGKILL the main process {main_pid} of {unit}: {why}")
    return main_pid


@pytest.mark.requirement("PTY-4")
def test_session_killed_by_a_signal_is_reported_as_that_signal(inv, bus, peer, evidence):
    with raw(inv, peer, ["cat"], "PTY-4") as s:
        main_pid = _kill_main(inv, bus, s.outcome.unit, "PTY-4")
        with reading("PTY-4", f"the session did not end after SIGKILL of {main_pid}", TimeoutError):
            out = s.wait_end(SESSION_S)
    evidence("SIGKILL of MainPID (script): EXIT", f"{out.exit} ({out.unit})")
    h = HelperSession(peer, inv.socket, inv.binaries.client.path, ["cat"])
    try:
        with reading("PTY-4", "the helper session killed by SIGKILL failed",
                     SessionError, PeerError, TimeoutError, OSError, BusError):
            before = live.session_units(bus)
            h.open()
            _kill_main(inv, bus, live.wait_for_new_session_unit(bus, before, SESSION_S), "PTY-4")
            _, status = h.run(None, SESSION_S)
    finally:
        h.close()
    evidence("SIGKILL of MainPID (script): helper status", status)
    with collect("PTY-4", "the session's main process killed by SIGKILL") as problems:
        problems.when(out.exit != (0, signal.SIGKILL), f"EXIT {out.exit}, expected (0, 9)")
        problems.when(status != 128 + signal.SIGKILL, f"the helper exited {status}, expected 137")
