"""The strace reader (host/strace.py) and helpertrace's readings on their own:
lines shaped as strace 6.1 prints them with -f -v -xx (taken from a
reference-host run)."""

from pty_acceptance.host import strace
from pty_acceptance.supervisor import helpertrace as ht
from pty_acceptance.supervisor import protocol as p


def hx(b: bytes) -> str:
    return '"' + "".join(f"\\x{c:02x}" for c in b) + '"'


HELPER = b"/usr/local/libexec/opencode-pty-client"
START = p.encode(p.T.START, p.start_payload(["/bin/true"], 60))
DATA = p.encode(p.T.DATA, b"x" * 8)
RUNTIME = b"/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"


def trace(*extra: str) -> str:
    lines = [
        f'743   execve({hx(HELPER)}, [{hx(HELPER)}], ["\\x50"]) = 0',
        f"743   openat(AT_FDCWD, {hx(RUNTIME)}, O_RDONLY) = 5",
        "743   close(5)                          = 0",
        "743   clone(child_stack=0xc000044000, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|"
        "CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS, tls=0xc000034090) = 744",
        "743   fcntl(3, F_SETFD, FD_CLOEXEC)     = 0",
        f"745   sendmsg(3, {{msg_name=NULL, msg_namelen=0, msg_iov=[{{iov_base={hx(START)}, "
        f"iov_len={len(START)}}}], msg_iovlen=1, msg_control=[{{cmsg_len=20, cmsg_level=SOL_SOCKET, "
        f"cmsg_type=SCM_RIGHTS, cmsg_data=[4]}}], msg_controllen=24, msg_flags=0}}, 0) = {len(START)}",
        "745   --- SIGSTOP {si_signo=SIGSTOP, si_code=SI_KERNEL} ---",
        "745   --- stopped by SIGSTOP ---",
        "745   close(4)                          = 0",
        f"746   write(3, {hx(DATA)}, {len(DATA)} <unfinished ...>",
        "745   read(3, 0xc000107dc3, 5) = -1 EAGAIN (Resource temporarily unavailable)",
        f"746   <... write resumed>)              = {len(DATA)}",
        "745   exit_group(0)                     = ?",
        "745   +++ exited with 0 +++",
    ]
    return "\n".join(lines + list(extra)) + "\n"


def run_of(text: str) -> ht.TracedRun:
    run = ht.TracedRun(helper=HELPER.decode(), argv=["/bin/true"], runtime_s=60, stdin=b"")
    run.calls, run.other = strace.parse(text)
    return run


def test_calls_results_and_resumed_lines():
    run = run_of(trace())
    names = [c.name for c in run.calls]
    assert names == ["execve", "openat", "close", "clone", "fcntl", "sendmsg", "close", "read",
                     "write", "exit_group"]
    read = next(c for c in run.calls if c.name == "read")
    assert (read.ret, read.err) == (-1, "EAGAIN")
    assert run.calls[-1].ret is None
    write = next(c for c in run.calls if c.name == "write")
    assert not write.whole and write.result.endswith(f"= {len(DATA)}") and read.whole
    assert any("stopped by SIGSTOP" in o for o in run.other)


def test_a_clean_helper_has_nothing_to_report():
    run = run_of(trace())
    assert run.opened_paths() == [RUNTIME.decode()]
    assert run.forbidden_paths() == []
    assert run.socket_calls() == [] and run.new_descriptors() == [] and run.process_calls() == []
    assert run.runtime_fds_closed() == []
    frames, problems = run.frames_to_supervisor()
    assert problems == [] and [(f.type, len(f.payload)) for f in frames] == [(p.T.START, len(START) - 5),
                                                                            (p.T.DATA, 8)]
    (call, lists, types), = run.rights()
    assert call.name == "sendmsg" and lists == [[4]] and types == ["SCM_RIGHTS"]


def test_what_a_wrapper_or_a_connecting_helper_leaves_in_the_trace():
    run = run_of(trace(
        f"747   openat(AT_FDCWD, {hx(b'/etc/hostname')}, O_RDONLY|O_CLOEXEC) = 6",
        "747   socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0) = 7",
        f"747   connect(7, {{sa_family=AF_UNIX, sun_path={hx(b'/run/x')}}}, 9) = 0",
        f"747   execve({hx(b'/bin/sh')}, [{hx(b'sh')}], []) = 0",
        "747   clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD) = 750",
    ))
    assert "/etc/hostname" in run.opened_paths()
    assert len(run.forbidden_paths()) == 2  # the open and the second execve
    assert [c.name for c in run.socket_calls()] == ["socket", "connect"]
    assert [c.name for c in run.new_descriptors()] == ["openat", "socket"]
    assert [c.name for c in run.process_calls()] == ["execve", "clone"]


def test_oversized_frames_and_truncated_strings_are_reported():
    big = p.HEADER.pack(p.LIMITS.data_bytes + 1, p.T.DATA) + b"y" * 4
    run = run_of(trace(f"746   write(3, {hx(big)}..., {len(big) + 100}) = {len(big) + 100}"))
    frames, problems = run.frames_to_supervisor()
    assert frames == [] and any("forbids" in x for x in problems)
    assert any("shorter than the bytes written" in x for x in problems)
