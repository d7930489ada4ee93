"""Run inside a reference host (as root) by tests/test_userunit.py: host/userunit.py
for real, each scenario a transient unit as `nobody`; prints one JSON object
with what each scenario saw."""
from __future__ import annotations

import json
import os
import pwd
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.getcwd(), "acceptance"))

from pty_acceptance.host import hostfs, scratch, userunit  # noqa: E402
from pty_acceptance.host.bus import Systemd  # noqa: E402

NOBODY = pwd.getpwnam("nobody")
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C.UTF-8"}


def job(purpose, script, **kw):
    return userunit.Job(purpose, ("/bin/sh", "-c", script), NOBODY, kw.pop("cwd", "/"), kw.pop("env", ENV), **kw)


def seen(e: userunit.Ended) -> dict:
    return {"unit": e.unit, "exit": e.exit_status, "signal": e.signal, "timed_out": e.timed_out,
            "duration": e.duration_s, "output": e.output.decode("utf-8", "replace"), "bytes": e.output_bytes,
            "still": e.still_running, "left": e.left_behind, "held": e.held_open, "not_gone": e.not_gone}


def disposable_units() -> list[str]:
    bus = Systemd.connect()
    try:
        return [r[0] for r in bus.call("ListUnits")[0] if r[1].startswith(userunit.DISPOSABLE)]
    finally:
        bus.close()


def holder(stop: threading.Event) -> None:
    """Root outside the unit reopens the main process's stdout (/proc/<pid>/fd/1)
    as soon as a unit of the scenario runs, and keeps it open."""
    fd = None
    while not stop.is_set() and fd is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if b"held-open-scenario" in open(f"/proc/{pid}/cmdline", "rb").read():
                    fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
                    break
            except OSError:
                continue
        time.sleep(0.01)
    stop.wait()
    if fd is not None:
        os.close(fd)


def view_scenario() -> dict:
    """PLUGIN-1's view: an empty read-only tmpfs over /home, /root and /run/user
    (ProtectHome=tmpfs) and over a home elsewhere (TemporaryFileSystem=), a
    root-owned mirror bound read-only where a user's tree is (systemd makes the
    mount point on the empty tmpfs): the program sees the mirror's file, not
    the plant beside the original, nothing of the homes."""
    tree = "/home/pty-probe/tree"
    elsewhere = "/srv/pty-probe-home"
    for d in ("/home/pty-probe", tree, f"{tree}/plugins", elsewhere):
        os.makedirs(d, exist_ok=True)
        os.chown(d, NOBODY.pw_uid, NOBODY.pw_gid)
    for path, text in ((f"{tree}/plugins/pty.ts", "user's\n"), (f"{tree}/plugins/pty.tsx", "plant\n"),
                       ("/home/pty-probe/secret", "home\n"), (f"{elsewhere}/secret", "elsewhere\n")):
        with open(path, "w") as f:
            f.write(text)
    m = scratch.make("pty-acceptance-probe-mirror-", mode=0o755)
    mfd = hostfs.open_dir(m)
    pfd = hostfs.open_dir_beneath(mfd, ("plugins",), m, create=True)
    hostfs.create_at(pfd, "pty.ts", b"mirror\n", 0o444, owner=(0, 0))
    os.close(pfd)
    os.close(mfd)
    seen_ = seen(userunit.run(job(
        "view", f"ls -A /home; ls -A /home/pty-probe; ls -A {tree}/plugins; cat {tree}/plugins/pty.ts; "
                f"ls -A {elsewhere}; ls -A /run/user | wc -l; touch {tree}/plugins/x 2>/dev/null || echo ro; "
                f"touch {elsewhere}/x 2>/dev/null || echo ro; stat -c '%U %a' /home/pty-probe",
        protect_home=True, hide=(elsewhere,), read_only=((m, tree),)), 20))
    scratch.remove(m)
    return seen_


def main() -> int:
    out: dict = {}
    out["status"] = seen(userunit.run(job("exit status", "id; env | sort; pwd; umask; exit 3", umask=0o027), 20))
    out["signal"] = seen(userunit.run(job("signal", "kill -KILL $$"), 20))
    out["dollar"] = seen(userunit.run(job("no expansion", "echo '$HOME' \"$PATH\""), 20))
    out["deadline"] = seen(userunit.run(job("deadline", "echo started; exec /bin/sleep 600"), 1.5))
    out["left"] = seen(userunit.run(job("left behind", "echo x; /usr/bin/setsid /bin/sleep 600 & exit 0"), 20))
    stop = threading.Event()
    t = threading.Thread(target=holder, args=(stop,), daemon=True)
    t.start()
    t0 = time.monotonic()
    out["held"] = seen(userunit.run(job("held open", "echo held-open-scenario >/dev/null; sleep 0.5; "
                                        ": held-open-scenario; exit 0"), 20))
    out["held_took"] = time.monotonic() - t0
    stop.set()
    t.join(5)
    # a private /tmp holding only what is bound there; the host directory in a root-only parent
    d = scratch.make("pty-acceptance-probe-", mode=0o700)
    dfd = hostfs.open_dir(d)
    os.mkdir("work", 0o700, dir_fd=dfd)
    os.chown("work", NOBODY.pw_uid, NOBODY.pw_gid, dir_fd=dfd)
    os.mkdir("ro", 0o755, dir_fd=dfd)
    rfd = hostfs.open_dir_at(dfd, "ro", f"{d}/ro")
    hostfs.create_at(rfd, "ro.txt", b"read only\n", 0o444, owner=(0, 0))
    os.close(rfd)
    os.close(dfd)
    out["binds"] = seen(userunit.run(job(
        "binds", "ls -A /tmp; cat /tmp/ro/ro.txt; touch /tmp/ro/x 2>/dev/null && echo ro-writable; "
                 "touch /tmp/w/made && echo made; pwd", cwd="/tmp/w", private_tmp=True,
        binds=((f"{d}/work", "/tmp/w"),), read_only=((f"{d}/ro", "/tmp/ro"),)), 20))
    out["made_on_host"] = sorted(os.listdir(f"{d}/work"))
    scratch.remove(d)
    out["view"] = view_scenario()
    # a scope: a child the suite started itself, gated until it is inside; what it
    # starts (a setsid'd sleep) is in the scope's cgroup, killed and gone at close
    import subprocess
    scope = userunit.Scope("probe")
    r, w = os.pipe()
    child = subprocess.Popen(scope.argv(["/bin/sh", "-c", "/usr/bin/setsid /bin/sleep 600 & echo $!"]),
                             close_fds=False, stdout=w, preexec_fn=lambda: os.dup2(scope.gate_r, 5))
    os.close(w)
    before_gate = open(f"/proc/{child.pid}/cmdline", "rb").read().split(b"\0")[0].decode()
    scope.enter(child.pid)
    sleep_pid = int(os.read(r, 100).decode().strip())
    os.close(r)
    child.wait(10)
    cg = open(f"/proc/{sleep_pid}/cgroup").read()
    out["scope"] = {"before_gate": before_gate, "sleep_in_scope": scope.unit in cg, "unit": scope.unit,
                    "left": scope.close(), "sleep_alive": os.path.exists(f"/proc/{sleep_pid}")}
    # an interrupt while a run waits: its unit is removed on the way out
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        userunit.run(job("interrupted", "exec /bin/sleep 600"), 30)
        out["interrupt"] = "not interrupted"
    except KeyboardInterrupt:
        out["interrupt"] = "interrupted"
    out["units_left"] = disposable_units()
    print(json.dumps(out))
    scratch.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
