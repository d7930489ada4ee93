"""host/killtrace.py: what a run's trace says of who ended its processes."""

from pty_acceptance.host import killtrace

# a harness (pid 100) that starts a child (101, a thread 102 of its own), which
# leaves a setsid'd sleep (103); shapes as strace 6.1 prints them with -f -q
START = """\
100   execve("/tmp/pty-acceptance-cell/bun", ["/tmp/pty-acceptance-cell/bun"], 0x7ffd /* 4 vars */) = 0
100   clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD, child_tid=0x7f}, 88) = 102
100   clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 101
101   execve("/usr/bin/setsid", ["/usr/bin/setsid", "/bin/sleep", "600"], 0x55 /* 4 vars */) = 0
101   clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 103
103   execve("/bin/sleep", ["/bin/sleep", "600"], 0x55 /* 4 vars */) = 0
101   +++ exited with 0 +++
100   --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=101, si_uid=1000, si_status=0} ---
"""


def test_a_run_whose_processes_all_ended_before_its_main_process_is_clean():
    text = START + ("100   kill(103, SIGKILL)              = 0\n103   +++ killed by SIGKILL +++\n"
                    "102   +++ exited with 0 +++\n100   +++ exited with 0 +++\n")
    v = killtrace.judge(text, 100)
    assert v.passed, v.problems()


def test_a_process_killed_by_a_sigkill_no_process_of_the_run_sent_is_from_outside():
    text = START + "103   +++ killed by SIGKILL +++\n102   +++ exited with 0 +++\n100   +++ exited with 0 +++\n"
    v = killtrace.judge(text, 100)
    assert v.from_outside == ["pid 103 (/bin/sleep) was killed by SIGKILL, which no process of the run sent"]
    assert not v.left_running and not v.passed


def test_a_process_killed_after_the_main_process_ended_is_from_outside_and_was_left_running():
    text = START + "102   +++ exited with 0 +++\n100   +++ exited with 0 +++\n103   +++ killed by SIGKILL +++\n"
    v = killtrace.judge(text, 100)
    assert v.from_outside and v.left_running == ["pid 103 (/bin/sleep)"]


def test_a_process_whose_end_the_trace_never_shows_was_left_running():
    v = killtrace.judge(START + "102   +++ exited with 0 +++\n100   +++ exited with 0 +++\n", 100)
    assert v.left_running == ["pid 103 (/bin/sleep)"] and not v.from_outside


def test_a_signal_a_process_outside_the_run_sent_is_named_and_one_of_the_runs_own_is_not():
    own = "103   --- SIGTERM {si_signo=SIGTERM, si_code=SI_USER, si_pid=100, si_uid=1000} ---\n"
    other = "103   --- SIGSTOP {si_signo=SIGSTOP, si_code=SI_USER, si_pid=4242, si_uid=1000} ---\n"
    end = "103   +++ exited with 0 +++\n102   +++ exited with 0 +++\n100   +++ exited with 0 +++\n"
    assert killtrace.judge(START + own + end, 100).passed
    v = killtrace.judge(START + other + end, 100)
    assert v.from_outside == ["pid 103 (/bin/sleep) got SIGSTOP from pid 4242, not a process of the run"]


def test_a_signal_the_kernel_sent_is_not_from_outside():
    segv = ("103   --- SIGSEGV {si_signo=SIGSEGV, si_code=SEGV_MAPERR, si_addr=NULL} ---\n"
            "103   +++ killed by SIGSEGV (core dumped) +++\n102   +++ exited with 0 +++\n"
            "100   +++ exited with 0 +++\n")
    assert killtrace.judge(START + segv, 100).passed


def test_a_trace_without_the_main_process_end_or_with_an_unreadable_line_cannot_say():
    v = killtrace.judge(START + "103   +++ exited with 0 +++\n", 100)
    assert v.cannot_say == ["the end of the run's main process (pid 100) is not in it"]
    v = killtrace.judge(START + "garbage \x1b[31m\n103   +++ exited with 0 +++\n100   +++ exited with 0 +++\n", 100)
    assert v.cannot_say and "\x1b" not in " ".join(v.cannot_say)


def test_a_thread_of_the_run_signalled_by_tgkill_from_inside_is_not_from_outside():
    text = START + ("102   --- SIGUSR1 {si_signo=SIGUSR1, si_code=SI_TKILL, si_pid=100, si_uid=1000} ---\n"
                    "103   +++ exited with 0 +++\n102   +++ exited with 0 +++\n100   +++ exited with 0 +++\n")
    assert killtrace.judge(text, 100).passed


def test_strace_recovering_from_a_stray_exec_is_no_problem_and_anything_else_it_says_is(tmp_path):
    from pty_acceptance.host import attached_trace, scratch

    class Done:
        pid = 1

        def poll(self):
            return 0

    err = tmp_path / "err"
    err.write_text("/usr/bin/strace: Stray PTRACE_EVENT_EXEC from pid 4242, trying to recover...\n")
    (tmp_path / "out").write_text("")
    t = attached_trace.Tracer(Done(), str(tmp_path / "out"), str(err), scratch.make("pty-acceptance-trace-"),
                              tolerated=killtrace.TOLERATED)
    t.stop()
    assert t.problems == []
    err.write_text("/usr/bin/strace: Stray PTRACE_EVENT_EXEC from pid 4242, trying to recover...\n"
                   "/usr/bin/strace: ptrace(PTRACE_SEIZE, 7): Operation not permitted\n")
    t = attached_trace.Tracer(Done(), str(tmp_path / "out"), str(err), scratch.make("pty-acceptance-trace-"),
                              tolerated=killtrace.TOLERATED)
    t.stop()
    assert t.problems == ["strace said: /usr/bin/strace: ptrace(PTRACE_SEIZE, 7): Operation not permitted"]


def test_a_thread_whose_own_threads_return_before_its_creators_clone_is_the_runs_thread():
    """strace -f under load (a good reference host's PLUGIN-1 run 8/10, bun's first threads):
    thread 4579's own clone3 calls complete before 4575's clone3 that made it returns. 4579
    and its threads are all 4575's: nothing of it was left running."""
    flags = "flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM"
    text = (
        '4575  execve("/tmp/pty-acceptance-cell/bun", ["/tmp/pty-acceptance-cell/bun"], 0x7ffd /* 9 vars */) = 0\n'
        f"4575  clone3({{{flags}, child_tid=0x7fc6705ff990}} <unfinished ...>\n"
        f"4579  clone3({{{flags}, child_tid=0x7fc6701fe990}} => {{parent_tid=[4580]}}, 88) = 4580\n"
        f"4579  clone3({{{flags}, child_tid=0x7fc66f9fd990}} => {{parent_tid=[4581]}}, 88) = 4581\n"
        "4575  <... clone3 resumed> => {parent_tid=[4579]}, 88) = 4579\n"
        "4580  +++ exited with 0 +++\n4581  +++ exited with 0 +++\n4579  +++ exited with 0 +++\n"
        "4575  +++ exited with 0 +++\n")
    v = killtrace.judge(text, 4575)
    assert v.passed, v.problems()
    # the same run with the thread's process really left behind: still named
    left = text.replace("4575  +++ exited with 0 +++\n", "") + \
        "4575  clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 4590\n" \
        "4575  +++ exited with 0 +++\n"
    assert killtrace.judge(left, 4575).left_running == ["pid 4590"]


def test_an_exec_by_a_thread_whose_unfinished_line_came_before_strace_knew_its_pid_would_change():
    """The Go launcher's execve runs on a thread of its own (PROTO-4's traced runs, trixie, under
    load): its line `<unfinished ...>` was printed plain, then the leader's `+++ superseded by
    execve in pid T +++`, then `<... execve resumed>` under the leader's pid."""
    text = (
        '6150  execve("/usr/local/libexec/opencode-pty-launcher", ["/usr/local/libexec/opencode-pty-launcher"], '
        '0x5 /* 9 vars */) = 0\n'
        "6150  clone(child_stack=0xc000044000, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|"
        "CLONE_SYSVSEM|CLONE_SETTLS, tls=0xc000034090) = 6160\n"
        '6160  execve("/usr/bin/script", ["/usr/bin/script", "-q"], 0xc /* 1 var */ <unfinished ...>\n'
        "6150  +++ superseded by execve in pid 6160 +++\n"
        "6150  <... execve resumed>)             = 0\n"
        "6150  +++ exited with 0 +++\n")
    v = killtrace.judge(text, 6150)
    assert v.passed, v.problems()


def test_a_call_strace_could_not_read_of_a_thread_that_then_ended_is_no_call():
    """A good trixie host, PLUGIN-1 run 8/10 under load: `TID ???() = ?`, then the thread's end."""
    text = START + "102   ???()                             = ?\n102   +++ exited with 0 +++\n" \
        "100   kill(103, SIGKILL)              = 0\n103   +++ killed by SIGKILL +++\n100   +++ exited with 0 +++\n"
    v = killtrace.judge(text, 100)
    assert v.passed, v.problems()
    # a thread that went on after it: that line is one the trace cannot read
    going = START + "102   ???()                             = ?\n102   kill(103, SIGKILL) = 0\n" \
        "103   +++ killed by SIGKILL +++\n102   +++ exited with 0 +++\n100   +++ exited with 0 +++\n"
    assert killtrace.judge(going, 100).cannot_say
