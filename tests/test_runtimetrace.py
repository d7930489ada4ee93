"""pty_acceptance.candidate.runtimetrace's reading of the strace lines of the
helper hand-off (RUNTIME-2), without a host."""

from pty_acceptance.candidate import runtimetrace
from pty_acceptance.host import attached_trace

TRACE = """\
700 execve("/usr/local/libexec/opencode-pty-client", ["/u"..., "--"...], 0x7ff /* 2 vars */) = 0
700 sendmsg(3<UNIX-STREAM:[24033->24034]>, {msg_name=NULL, msg_namelen=0, msg_iov=[{iov_base="\\0\\0"..., iov_len=60}], msg_iovlen=1, msg_control=[{cmsg_len=20, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, cmsg_data=[4</tmp/pty-acceptance-rt2-x>]}], msg_controllen=24, msg_flags=0}, 0) = 60
700 sendmsg(3<UNIX-STREAM:[24033->24034]>, {msg_name=NULL, msg_namelen=0, msg_iov=[{iov_base="\\0\\0"..., iov_len=5}], msg_iovlen=1, msg_controllen=0, msg_flags=0}, 0) = 5
701 sendmsg(5<UNIX-STREAM:[1->2]>, {msg_control=[{cmsg_len=20, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, cmsg_data=[4</a>]}]}, 0) = 1
702 execve("/bin/sleep", ["/b"...], 0x7ff /* 2 vars */) = 0
702 sendmsg(3<UNIX-STREAM:[7->8]>, {msg_control=[{cmsg_len=28, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, cmsg_data=[4</a>, 5</b>, ...]}]}, 0) = 1
703 execve("/bin/false", ["/b"...], 0x7ff /* 2 vars */) = -1 ENOENT (No such file or directory)
"""


def test_the_trace_gives_each_exec_and_what_it_sent():
    trace = runtimetrace.parse(TRACE)
    assert trace.execs == {700: "/usr/local/libexec/opencode-pty-client", 702: "/bin/sleep"}
    assert trace.of({700}) == (["/usr/local/libexec/opencode-pty-client"],
                               [(3, 24033, 24034, [(4, "/tmp/pty-acceptance-rt2-x")]),
                                (3, 24033, 24034, None)])
    assert trace.of({702})[1] == [(3, 7, 8, [(4, "/a"), (5, "/b"), (-1, "...")])]
    assert trace.of({701})[1] == [(5, 1, 2, [(4, "/a")])]


def test_a_go_helper_sends_from_a_thread_and_strace_pads_the_tid():
    trace = runtimetrace.parse(
        '809   execve("/usr/local/libexec/opencode-pty-client", ["/u"..., "--"..., ...], 0x3 /* 2 vars */) = 0\n'
        '811   sendmsg(3<UNIX-STREAM:[70840->71757]>, {msg_name=NULL, msg_iov=[{iov_base="\\0\\0"..., '
        'iov_len=50}], msg_control=[{cmsg_len=20, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, '
        'cmsg_data=[4</tmp/w>]}], msg_controllen=24, msg_flags=0}, 0) = 50\n')
    assert trace.of({809, 811}) == (["/usr/local/libexec/opencode-pty-client"],
                                    [(3, 70840, 71757, [(4, "/tmp/w")])])


def test_a_call_printed_in_two_halves_counts_joined():
    """Another thread's line between the halves of a call (more likely the more
    calls are traced): the call is read joined, as strace printed it."""
    trace = runtimetrace.parse(
        '700 sendmsg(3<UNIX-STREAM:[1->2]>, {msg_control=[{cmsg_type=SCM_RIGHTS, cmsg_data=[4</a>]}]}, 0 '
        '<unfinished ...>\n'
        '701 execve("/bin/sleep", ["/b"...], 0x7ff /* 2 vars */ <unfinished ...>\n'
        '702 close(3</x>)                    = 0\n'
        '700 <... sendmsg resumed>)              = 1\n'
        '701 <... execve resumed>)              = 0\n')
    assert trace.execs == {701: "/bin/sleep"} and trace.sends == {700: [(3, 1, 2, [(4, "/a")])]}


def test_a_call_that_failed_or_never_returned_does_not_count():
    trace = runtimetrace.parse(
        '700 execve("/bin/sleep", ["/b"...], 0x7ff /* 2 vars */) = ?\n'
        '701 execve("/bin/cat", ["/b"...], 0x7ff /* 2 vars */) = -1 ENOENT (No such file or directory)\n'
        '702 sendmsg(3<UNIX-STREAM:[1->2]>, {msg_control=[{cmsg_type=SCM_RIGHTS, cmsg_data=[4</a>]}]}, 0 '
        '<unfinished ...>\n')
    assert trace.execs == {} and trace.sends == {}


def test_a_process_that_ended_and_waits_to_be_reaped_is_not_untraced():
    """A zombie of the runtime's tree (the fixed helper killed at the session's
    end, not yet reaped: seen under load on the reference host) runs nothing
    more: it is not a thread strace fails to trace. A live one is."""
    import subprocess
    import time

    class Tracer:  # strace's own pid: none of these is traced by it
        pid = 1
    zombie = subprocess.Popen(["/bin/true"])
    live = subprocess.Popen(["/bin/sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while open(f"/proc/{zombie.pid}/stat").read().split(") ", 1)[1][0] != "Z":
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.01)
        t = attached_trace.Tracer(Tracer(), "", "", "")
        assert t.untraced({zombie.pid}) == []
        assert t.untraced({live.pid}) == [f"pid {live.pid} thread {live.pid} (traced by nobody)"]
    finally:
        live.kill()
        live.wait()
        zombie.wait()
