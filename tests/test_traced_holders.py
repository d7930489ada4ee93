"""RUNTIME-2 over the whole session: candidate/tracedholders.py replays the
trace of the runtime's tree into who held the supervisor connection or the
session's directory at any time, and says when the trace cannot say. The
traces here are strace -f -q -yy -s 2 lines in the form the reference
candidate (Node 26.4, libuv's fork, dup2 and exec) gave on this machine."""
import pytest

from pty_acceptance.candidate import tracedholders as th
from pty_acceptance.host import strace

SOCK = "/run/opencode-pty/supervisor.sock"
WS = "/tmp/pty-acceptance-run-x/pty-acceptance-rt2-y"
HELPER = "/usr/local/libexec/opencode-pty-client"
MAIN = 100
TIDS = {100: 100, 101: 100}  # the runtime and one thread of it, followed from the attach

OPENS = f"""\
100   openat(AT_FDCWD</home/byk>, "/t"..., O_RDONLY|O_CLOEXEC|O_DIRECTORY) = 23<{WS}>
101   io_uring_enter(16<anon_inode:[io_uring]>, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) = 1
100   socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0) = 24<UNIX-STREAM:[500]>
100   connect(24<UNIX-STREAM:[500]>, {{sa_family=AF_UNIX, sun_path="{SOCK}"}}, 110) = 0
100   socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0, [25<UNIX-STREAM:[601->602]>, 26<UNIX-STREAM:[602->601]>]) = 0
"""
SPAWN_HELPER = f"""\
100   clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>
200   close(5<pipe:[700]> <unfinished ...>
100   <... clone resumed>, child_tidptr=0x7fb4) = 200
200   <... close resumed>)              = 0
200   dup2(26<UNIX-STREAM:[602->601]>, 0</dev/null<char 1:3>>) = 0<UNIX-STREAM:[602->601]>
200   dup2(24<UNIX-STREAM:[500->400]>, 3<anon_inode:[eventpoll]>) = 3<UNIX-STREAM:[500->400]>
200   dup2(23<{WS}>, 4<anon_inode:[io_uring]>) = 4<{WS}>
200   execve("{HELPER}", ["/u"..., "--"..., ...], 0x1633 /* 2 vars */ <unfinished ...>
100   close(26<UNIX-STREAM:[602->601]>) = 0
200   <... execve resumed>)             = 0
200   clone(child_stack=0xc000, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_SYSVSEM|CLONE_THREAD) = 201
""" + ("201   sendmsg(3<UNIX-STREAM:[500->400]>, {msg_name=NULL, msg_namelen=0, msg_iov=[{iov_base=\"\\0\\0\"..., "
       "iov_len=6}], msg_iovlen=1, msg_control=[{cmsg_len=20, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, "
       f"cmsg_data=[4<{WS}>]}}], msg_controllen=24, msg_flags=0}}, 0) = 6\n")
SLEEPER = """\
100   clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7fb4) = 300
300   close(0</dev/null<char 1:3>>)     = 0
300   openat(AT_FDCWD</home/byk>, "/d"..., O_RDONLY) = 0</dev/null<char 1:3>>
300   dup2(24<UNIX-STREAM:[500->400]>, 3<anon_inode:[eventpoll]>) = 3<UNIX-STREAM:[500->400]>
300   execve("/bin/sleep", ["/b"..., "36"...], 0x1 /* 2 vars */) = 0
300   +++ killed by SIGKILL +++
100   --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_KILLED, si_pid=300, si_uid=1000, si_status=SIGKILL} ---
"""
CLOSE_DIR = f"100   close(23<{WS}>) = 0\n"


def judge(text, **kw):
    args = dict(main=MAIN, tids=TIDS, socket_path=SOCK, workspace=WS, connections=set(), helper_path=HELPER)
    args.update(kw)
    return th.judge(text, **args)


# ------------------------------------------------------------------ a clean session
def test_the_runtime_and_the_helper_alone_hold_them():
    j = judge(OPENS + SPAWN_HELPER + CLOSE_DIR)
    assert j.cannot_say == [] and j.findings == []
    assert j.holdings(th.CONNECTION) == [
        f"pid 200 ({HELPER}) held the supervisor connection socket:[500] as fd 3: kept it across its exec of {HELPER}"]
    assert j.holdings(th.DIRECTORY) == [
        f"pid 200 ({HELPER}) held the session's directory {WS} as fd 4: kept it across its exec of {HELPER}"]
    assert j.sent == [f"pid 200 ({HELPER}) sent the session's directory {WS} (its fd 4) by SCM_RIGHTS on fd 3 "
                      "(UNIX-STREAM:[500->400])"]
    assert j.processes == {100: "the runtime; alive at the end of the trace",
                           200: f"{HELPER}; alive at the end of the trace"}
    assert any("socket:[500] as fd 24 (close-on-exec)" in h for h in j.runtime_held)


def test_what_the_live_sample_saw_is_in_the_trace():
    sampled = [th.Sampled(100, 24, th.CONNECTION, "500"), th.Sampled(200, 3, th.CONNECTION, "500"),
               th.Sampled(200, 4, th.DIRECTORY, WS)]
    j = judge(OPENS + SPAWN_HELPER + CLOSE_DIR, sampled=sampled, tree_at_sample={100, 200})
    assert j.cannot_say == [] and j.findings == []


def test_close_on_exec_copies_go_with_the_exec():
    """The child holds every descriptor of the runtime between its fork and its
    exec; only what the exec keeps (no close-on-exec) is a holding."""
    j = judge(OPENS + SPAWN_HELPER)
    assert [h.fd for h in j.held] == [3, 4]


# ------------------------------------------------------------------ holders the sample never sees
def test_a_child_that_got_the_connection_and_was_killed_at_once_is_found():
    j = judge(OPENS + SPAWN_HELPER + SLEEPER + CLOSE_DIR)
    assert j.cannot_say == []
    assert j.findings_of(th.CONNECTION) == [
        "pid 300 (/bin/sleep) held the supervisor connection socket:[500] as fd 3: kept it across its exec of "
        "/bin/sleep: only the runtime and the fixed helper may hold it"]
    assert j.findings_of(th.DIRECTORY) == []
    assert j.processes[300] == "/bin/sleep; killed by SIGKILL"


def test_a_child_killed_inside_its_exec_is_judged_by_what_the_exec_kept():
    """The watcher saw /bin/sleep 3600 in /proc (the new image in place) and killed
    it before the exec returned: strace printed `= ?` (seen on the reference host)."""
    sleeper = SLEEPER.replace('0x1 /* 2 vars */) = 0', '0x1 /* 2 vars */) = ?')
    j = judge(OPENS + SPAWN_HELPER + sleeper)
    assert j.findings_of(th.CONNECTION) == [
        "pid 300 (/bin/sleep) held the supervisor connection socket:[500] as fd 3: kept it across its exec of "
        "/bin/sleep (killed inside that exec): only the runtime and the fixed helper may hold it"]
    assert j.findings_of(th.DIRECTORY) == [] and j.cannot_say == []


def test_a_child_given_the_directory_is_found():
    sleeper = SLEEPER.replace("dup2(24<UNIX-STREAM:[500->400]>, 3<anon_inode:[eventpoll]>) = 3<UNIX-STREAM:[500->400]>",
                              f"dup2(23<{WS}>, 3<anon_inode:[eventpoll]>) = 3<{WS}>")
    j = judge(OPENS + SPAWN_HELPER + sleeper + CLOSE_DIR)
    assert j.findings_of(th.CONNECTION) == [] and len(j.findings_of(th.DIRECTORY)) == 1
    assert "pid 300 (/bin/sleep) held the session's directory" in j.findings_of(th.DIRECTORY)[0]


def test_a_connection_the_sample_found_counts_without_its_connect():
    """The client end the live sample found is tracked even when the trace shows
    its connect() to another path (here: none at all, a socketpair end)."""
    text = OPENS.replace(f'sun_path="{SOCK}"', 'sun_path="/tmp/elsewhere"') + SPAWN_HELPER + SLEEPER
    assert judge(text).findings == []
    assert len(judge(text, connections={500}).findings_of(th.CONNECTION)) == 1


def test_a_child_that_never_execd_holds_what_it_has_when_it_ends():
    text = OPENS + """\
100   clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 400
400   +++ exited with 0 +++
"""
    j = judge(text)
    how = "held it when it ended (exited with 0) without having exec'd"
    assert [str(h).split(": ", 1)[1] for h in j.held] == [how] * 2
    assert len(j.findings) == 2


def test_a_shared_table_child_holds_the_runtimes_descriptors():
    text = OPENS + "100   clone(child_stack=0x1, flags=CLONE_VM|CLONE_FILES|SIGCHLD) = 400\n"
    j = judge(text)
    assert {h.fd for h in j.held if h.pid == 400} == {23, 24} and j.findings


def test_close_on_exec_cleared_by_fcntl_or_dup_keeps_it_across_exec():
    for step in ("400   fcntl(24<UNIX-STREAM:[500->400]>, F_SETFD, 0) = 0\n",
                 "400   ioctl(24<UNIX-STREAM:[500->400]>, FIONCLEX) = 0\n",
                 "400   fcntl(24<UNIX-STREAM:[500->400]>, F_DUPFD, 10) = 10<UNIX-STREAM:[500->400]>\n"):
        text = OPENS + ("100   clone(child_stack=NULL, flags=SIGCHLD) = 400\n" + step
                        + '400   execve("/bin/cat", ["/b"...], 0x1 /* 2 vars */) = 0\n')
        held = judge(text).held
        assert [(h.pid, h.obj.kind) for h in held] == [(400, th.CONNECTION)], step


def test_what_the_exec_closes_or_close_range_closes_is_not_held():
    for step in ("400   fcntl(24<UNIX-STREAM:[500->400]>, F_DUPFD_CLOEXEC, 10) = 10<UNIX-STREAM:[500->400]>\n",
                 "400   dup3(24<UNIX-STREAM:[500->400]>, 3, O_CLOEXEC) = 3<UNIX-STREAM:[500->400]>\n",
                 "400   dup2(24<UNIX-STREAM:[500->400]>, 3) = 3<UNIX-STREAM:[500->400]>\n"
                 "400   close_range(3, 4294967295, 0) = 0\n",
                 "400   dup2(24<UNIX-STREAM:[500->400]>, 3) = 3<UNIX-STREAM:[500->400]>\n"
                 "400   close_range(3, 3, CLOSE_RANGE_CLOEXEC) = 0\n",
                 "400   dup2(24<UNIX-STREAM:[500->400]>, 3) = 3<UNIX-STREAM:[500->400]>\n"
                 "400   close(3<UNIX-STREAM:[500->400]>) = 0\n"):
        text = OPENS + ("100   clone(child_stack=NULL, flags=SIGCHLD) = 400\n" + step
                        + '400   execve("/bin/cat", ["/b"...], 0x1 /* 2 vars */) = 0\n')
        j = judge(text)
        assert j.held == [] and j.cannot_say == [], step


def test_taking_it_after_the_exec_is_holding_it():
    text = OPENS + """\
100   clone(child_stack=NULL, flags=SIGCHLD) = 400
400   execve("/bin/cat", ["/b"...], 0x1 /* 2 vars */) = 0
400   pidfd_getfd(5<anon_inode:[pidfd]>, 24, 0) = 6<UNIX-STREAM:[500->400]>
""" + ('400   recvmsg(7<UNIX-STREAM:[8->9]>, {msg_name=NULL, msg_iov=[{iov_base="\\0\\0"..., iov_len=6}], '
           "msg_control=[{cmsg_len=20, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, "
           f"cmsg_data=[8<{WS}>]}}], msg_controllen=24, msg_flags=MSG_CMSG_CLOEXEC}}, MSG_CMSG_CLOEXEC) = 6\n")
    hows = [str(h).split(": ", 1)[1] for h in judge(text).held]
    assert hows == ["took it by pidfd_getfd after its exec", "took it by recvmsg (SCM_RIGHTS) after its exec"]


def test_the_helper_gets_them_only_as_fd_3_and_fd_4():
    text = OPENS + SPAWN_HELPER.replace(
        "200   dup2(23<", "200   dup2(24<UNIX-STREAM:[500->400]>, 5) = 5<UNIX-STREAM:[500->400]>\n200   dup2(23<")
    j = judge(text)
    assert j.findings_of(th.CONNECTION) == [
        f"pid 200 ({HELPER}) held the supervisor connection socket:[500] as fd 5: kept it across its exec of "
        f"{HELPER}: the fixed helper may get it only as fd 3"]


def test_a_second_helper_holding_them_is_a_finding():
    second = SPAWN_HELPER.replace("= 200", "= 210").replace("200   ", "210   ").replace("= 201", "= 211") \
        .replace("201   ", "211   ")
    j = judge(OPENS + SPAWN_HELPER + second)
    assert len(j.findings) == 4 and all("2 processes ran the fixed helper" in f for _, f in j.findings)


def test_passing_either_by_scm_rights_is_a_hand_off():
    text = OPENS + ('100   sendmsg(25<UNIX-STREAM:[601->602]>, {msg_name=NULL, msg_iov=[{iov_base="\\0\\0"..., '
                    "iov_len=1}], msg_control=[{cmsg_len=20, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, "
                    "cmsg_data=[24<UNIX-STREAM:[500->400]>]}], msg_controllen=24, msg_flags=0}, 0) = 1\n")
    j = judge(text)
    assert j.findings_of(th.CONNECTION) == [
        "pid 100 (the runtime) sent the supervisor connection socket:[500] (its fd 24) by SCM_RIGHTS on fd 25 "
        "(UNIX-STREAM:[601->602]): only the fixed helper may pass a descriptor, and only the directory"]


# ------------------------------------------------------------------ a trace that cannot say
def test_a_process_the_trace_did_not_follow_from_its_start_cannot_say():
    text = OPENS + "555   close(3<UNIX-STREAM:[500->400]>) = 0\n"
    j = judge(text)
    assert j.cannot_say[0] == ("pid 555 shows in the trace (line 6) without a traced creation: a process or "
                               "thread the trace did not follow from its start")


def test_a_process_created_untraced_cannot_say():
    j = judge(OPENS + "100   clone(child_stack=NULL, flags=CLONE_UNTRACED|SIGCHLD) = 400\n")
    assert j.cannot_say == ["pid 100 created pid 400 with CLONE_UNTRACED (line 6): a process strace could not follow"]


def test_a_process_of_the_sample_not_in_the_trace_cannot_say():
    j = judge(OPENS + SPAWN_HELPER, tree_at_sample={100, 200, 300})
    assert j.cannot_say == ["pid 300, of the runtime's tree at the live sample, is not in the trace"]


def test_the_sample_seeing_what_the_trace_never_showed_cannot_say():
    j = judge(OPENS + SPAWN_HELPER, sampled=[th.Sampled(200, 7, th.CONNECTION, "500")], tree_at_sample={100, 200})
    assert j.cannot_say == ["the live sample saw pid 200 hold the supervisor connection socket:[500] as fd 7; the "
                            "trace never showed it there"]


def test_a_call_the_trace_lost_shows_as_a_disagreement():
    """The runtime used the connection as fd 9, where the trace never put it (a dup
    it did not record); and a child's fd 3 was something else than the trace says."""
    j = judge(OPENS + "100   close(9<UNIX-STREAM:[500->400]>) = 0\n")
    assert j.cannot_say == ["pid 100 used the supervisor connection socket:[500] as fd 9 (line 6), but the trace "
                            "never showed that process getting it there"]
    j = judge(OPENS + "100   close(24<pipe:[1]>) = 0\n")
    assert j.cannot_say == ["pid 100's fd 24 was pipe:[1] (line 6), but the trace showed it holding the supervisor "
                            "connection socket:[500] there: a call it did not record"]
    j = judge(OPENS + "100   socket(AF_INET, SOCK_STREAM, 0) = 24<TCP:[9]>\n")
    assert "got a new fd 24 from socket" in j.cannot_say[0]


def test_io_uring_outside_the_runtime_cannot_say():
    j = judge(OPENS + SPAWN_HELPER + "200   io_uring_setup(8, {flags=0}) = 9<anon_inode:[io_uring]>\n")
    assert j.cannot_say == [f"pid 200 ({HELPER}) called io_uring_setup: what it does through io_uring opens "
                            "and closes descriptors no call shows"]


def test_the_tracers_own_problems_and_unreadable_lines_cannot_say():
    j = judge(OPENS + "garbage\n", problems=["strace exited (1) before the session ended: the trace stops there"])
    assert j.cannot_say == ["strace exited (1) before the session ended: the trace stops there",
                            "1 lines of the trace are no system call strace prints (first: 'garbage')"]


# ------------------------------------------------------------------ strace's lines, read
def test_events_join_halves_follow_an_exec_by_a_thread_and_read_endings():
    calls, ended, other = strace.events(
        '17102 execve("/bin/true", ["/b"...], 0x7ffd /* 38 vars */ <pid changed to 16733 ...>\n'
        "16733 +++ superseded by execve in pid 17102 +++\n"
        "16733 <... execve resumed>)             = 0\n"
        "16733 close(3</x> <detached ...>\n"
        "16733 +++ killed by SIGKILL +++\n")
    assert [(c.tid, c.name, c.entered, c.done) for c in calls] == [(16733, "execve", 0, 2), (16733, "close", 3, -1)]
    assert calls[0].body.startswith('"/bin/true", ') and calls[0].body.endswith(") = 0".replace(") ", ")             "))
    assert [(e.tid, e.what, e.superseded_by) for e in ended] == [
        (16733, "superseded by execve in pid 17102", 17102), (16733, "killed by SIGKILL", None)]
    assert other == []


@pytest.mark.parametrize("after, unread", [
    # the reference host's control under load (session 32): a Go thread of the helper at its
    # SIGTERM, its registers unreadable at a call's entry, then its end: no call
    ("5329 --- SIGTERM {si_signo=SIGTERM} ---\n5329 +++ killed by SIGTERM +++\n", False),
    ("5329 +++ exited with 143 +++\n", False),
    # anything else of the kind: a line it could not read
    ("5329 <... ??? resumed>) = 0\n5329 +++ exited with 0 +++\n", True),
    ("5329 close(3) = 0\n5329 +++ exited with 0 +++\n", True),
    ("5330 +++ exited with 0 +++\n", True),  # another thread's end, not its own
    ("", True),
])
def test_a_call_strace_could_not_read_at_its_entry_is_none_only_when_the_thread_ended_there(after, unread):
    calls, ended, other = strace.events("5329 ???( <unfinished ...>\n" + after)
    assert ("5329 ???( <unfinished ...>" in other) is unread, other
    assert all(c.name != "???" for c in calls)


@pytest.mark.parametrize("body, skel, descs", [
    ('3</tmp/we\\74i\\76rd) = 3 [x>, F_DUPFD_CLOEXEC, 0) = 4</tmp/a>', "3<#0>, F_DUPFD_CLOEXEC, 0) = 4<#1>",
     ["/tmp/we\\74i\\76rd) = 3 [x", "/tmp/a"]),
    ("25<UNIX-STREAM:[1->2]>, 3</dev/null<char 1:3>>) = 3<UNIX-STREAM:[1->2]>", "25<#0>, 3<#1>) = 3<#2>",
     ["UNIX-STREAM:[1->2]", "/dev/null<char 1:3>", "UNIX-STREAM:[1->2]"]),
    ('AT_FDCWD</w>, "/x\\"9<y>", O_RDONLY) = 5<TCPv6:[[::1]:80->[::1]:5]>', 'AT_FDCWD<#0>, "", O_RDONLY) = 5<#1>',
     ["/w", "TCPv6:[[::1]:80->[::1]:5]"]),
])
def test_a_skeleton_keeps_no_text_a_process_chose(body, skel, descs):
    assert strace.skeleton(body) == (skel, descs)


def test_a_process_already_running_at_the_attach_is_judged_by_what_it_takes():
    """A child the runtime had before the trace began (strace attached to it too):
    it holds none of the session's objects unless the trace shows it taking one."""
    tids = {**TIDS, 150: 150}
    assert judge(OPENS + SPAWN_HELPER, tids=tids).findings == []
    text = OPENS + ('150   recvmsg(7<UNIX-STREAM:[8->9]>, {msg_name=NULL, msg_control=[{cmsg_len=20, '
                    'cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS, cmsg_data=[5<UNIX-STREAM:[500->400]>]}], '
                    'msg_controllen=24, msg_flags=0}, 0) = 1\n')
    j = judge(text, tids=tids)
    assert j.findings_of(th.CONNECTION) == [
        f"pid 150 ({th.ALREADY_RUNNING}) held the supervisor connection socket:[500] as fd 5: took it by recvmsg "
        "(SCM_RIGHTS) after its exec: only the runtime and the fixed helper may hold it"]


def test_what_a_call_returned_is_no_use_of_a_descriptor_even_padded():
    """strace pads a short call's ' = ' to a column: the result is still not read
    as a descriptor the process already held."""
    text = OPENS + "100   dup(24<UNIX-STREAM:[500->400]>)        = 9<UNIX-STREAM:[500->400]>\n"
    j = judge(text)
    assert j.cannot_say == [] and any("as fd 9: dup" in h for h in j.runtime_held)


def test_a_directory_path_strace_would_escape_cannot_say():
    j = judge(OPENS.replace(WS, "/tmp/a b"), workspace="/tmp/a b")
    assert j.cannot_say == ["the directory's path '/tmp/a b' is not one strace prints as it is: its descriptors "
                            "cannot be told in the trace"]
