"""What a live session unit is allowed to be (TARGET-CONTRACT section 1).

One session, shared by the module, runs PROBE (session_inspect.py) as its
command: a program of the suite's, run by the suite's execute-only Python and
judged by root before it may act (session_probe.py: the terminal, script(1)
and the launcher are the user's, which another process of the user may
attach to), that answers what the session sees and can do on a channel of
its own, then waits for end of input, so the suite can read the unit (`systemctl show
--all`, once per test) and /proc of every process in its cgroup while the
command is running (the sandbox is then in place; Type=exec alone does not
say the command has exec'd).

UNIT-1  the START created exactly one new unit, the one STARTED names, it is
        running (Testinfra's host.service), and that name is
        opencode-pty-<32 lowercase hex>.service.
UNIT-2  every process of the session runs with Uid and Gid (real, effective,
        saved, fs) of the service user and group and no group beyond the
        service group; User= and Group= are the service user's and group.
UNIT-3  every process has zero effective, permitted, inheritable, bounding
        and ambient capabilities and NoNewPrivs 1.
UNIT-4  the session's /dev holds only the pseudo devices and pts/ptmx, and
        DeviceAllow= holds nothing beyond what PrivateDevices=yes itself
        permits (an administrator's drop-in `DeviceAllow=block-sd rw` fails).
UNIT-5  /proc shows no process of another user and no non-process entries
        (a process that exits between the probe's listing and its read is
        gone, recorded and not judged; one listed and not readable, or read
        cut short or malformed, fails); unshare(CLONE_NEWUSER...) fails; AF_NETLINK and AF_PACKET sockets are
        refused by the family filter; more seccomp filters than every process
        of the host already has.
UNIT-6  the command's environment is exactly PATH, HOME, TERM, LANG, each set
        once to the value the inventory declares (session_environment); its cwd
        is the directory the suite opened and passed (same device and inode,
        a token file in it readable by relative path), with no
        WorkingDirectory= path in the unit.
UNIT-7  from inside, connecting to the supervisor socket, the Docker socket,
        the system bus and the user bus fails (stand-in listeners are created
        where the host has none, before the session starts, and removed); and
        none of those sockets is reachable at any other path: by device and
        inode (stat as root outside, before the session starts), no mount of
        the session's namespace (/proc/<MainPID>/mountinfo, read from the host)
        shows one at a path no other mount covers, and the probe, searching
        every mount of the sockets' filesystems inside, finds none; nor is one
        reachable through /proc/<pid>/root of a process of the service user
        outside the session (ProtectProc=invisible hides only what the
        session cannot ptrace: a dumpable process of its own user shows, and
        its root is the host's), each such process named.
UNIT-8  Slice= is the session slice and the cgroup is under the slice's;
        exactly one BindsTo=, the supervisor, which After= also names.
UNIT-9  (CONCERN) the live session unit's `systemd-analyze security` exposure
        is recorded.

Every property TARGET-CONTRACT section 1 lists for session units is compared
with the inventory's unit_properties.session, one test per requirement the
property belongs to (UNIT-1..7, CGROUP-1, CONC-3: spec/inventory.py's
SessionUnitProperties names each), from `systemctl show --all` (Testinfra
drops empty values). The inventory's values are at least the contract's
(spec/floor.py refuses a weaker one at load); SystemCallFilter='s allow list
is also held, as this host expands it, within the contract's @system-service.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass

import pytest

from pty_acceptance.host import analyze, cgroups, mountinfo, proc, seccomp
from pty_acceptance.supervisor import session_inspect as live, session_probe
from pty_acceptance.host import hostfs, scratch, standin_listener as standin, terminal
from pty_acceptance.host.bus import SERVICE_IFACE, BusError
from pty_acceptance.gate.checks import collect, expect, expect_none, finding, reading
from pty_acceptance.gate.failures import fail
from pty_acceptance.supervisor.peer import PeerError
from pty_acceptance.supervisor.session_clients import RawSession, SessionError
from pty_acceptance.host.systemd import STRICT_SESSION, SYSCALLS, show_or_fail, value_problem
from pty_acceptance.spec import floor, inventory
from pty_acceptance.spec.requirements import of_group

SYSTEM_BUS = "/run/dbus/system_bus_socket"
DOCKER = "/run/docker.sock"
PSEUDO_DEVICES = {(1, 3): "null", (1, 5): "zero", (1, 7): "full", (1, 8): "random",
                  (1, 9): "urandom", (5, 0): "tty", (5, 2): "ptmx"}
PTS_MAJORS = range(136, 144)  # UNIX98 pty slaves
# UNIT-4: DeviceAllow= entries the contract's hardening may carry: what
# PrivateDevices=yes itself permits (the pseudo devices, the tty, ptmx and the
# pts class). systemd 252 lists none for the contract's unit (`DeviceAllow=`
# empty, measured on the reference host); anything else, e.g. an
# administrator's drop-in `DeviceAllow=block-sd rw`, opens a device.
IMPLIED_DEVICE_ALLOW = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                        "/dev/tty", "/dev/ptmx", "char-pts"}
CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
START_DEADLINE_S = 10
RUNTIME_S = 120  # the probe session's requested runtime (RuntimeMaxUSec=)
END_DEADLINE_S = 10

UNIT_IDS = of_group("UNIT")  # what a failure of the whole probe session names: every UNIT ID


@dataclass
class Live:
    unit: str
    main_pid: int
    control_group: str
    probe: dict
    probe_pid: int
    cwd: str
    token: str
    sockets: dict          # path -> what the suite (root) saw connecting, outside
    targets: list          # the host's sockets (UNIT-7): path, (dev, ino), Place
    new_units: list
    uid: int
    gid: int



def _loaded_units(bus) -> set[str]:
    return {row[0] for row in bus.call("ListUnits")[0]}


def _slice_chain(name: str) -> set[str]:
    """A slice and its parents: opencode-pty.slice -> {opencode.slice, opencode-pty.slice}."""
    parts = name.removesuffix(".slice").split("-")
    return {"-".join(parts[:i]) + ".slice" for i in range(1, len(parts) + 1)}


def _standins(stack, inv, uid, gid):
    """Docker and user-bus listeners where the host has none (made before START)."""
    user_bus = f"/run/user/{uid}/bus"
    stack.enter_context(standin.standin_listener(DOCKER, mode=0o666))
    stack.enter_context(standin.standin_listener(user_bus, uid=uid, gid=gid, mode=0o600,
                                                 dir_uid=uid, dir_gid=gid, dir_mode=0o700))
    return [inv.socket, DOCKER, SYSTEM_BUS, user_bus]


@dataclass(frozen=True)
class Target:
    """A host socket a session must not reach (UNIT-7), as root sees it outside."""
    path: str
    ident: tuple[int, int]     # st_dev, st_ino
    place: mountinfo.Place     # its filesystem's device and its path inside it


def _targets(paths: list[str]) -> list[Target]:
    """Each socket's identity and place, read before the session starts; a path that
    is not a socket, or that a link leads to, cannot be placed and fails UNIT-7."""
    host = mountinfo.read("self")
    out = []
    for path in paths:
        links = [d for d in hostfs.ancestors(path) if hostfs.Node.at(d).kind == "symlink"]
        st = os.lstat(path)
        if links or not stat.S_ISSOCK(st.st_mode):
            raise ValueError(f"{path} is {hostfs.Node.at(path).kind}"
                             + (f" below the link {links[0]}" if links else "") + ", not a socket")
        where = mountinfo.place(host, path)
        if where.dev != mountinfo.device_of(st):
            raise ValueError(f"{path} is on device {mountinfo.device_of(st)}, but the mount table places "
                             f"it on {where.dev} at {where.path}")
        out.append(Target(path, (st.st_dev, st.st_ino), where))
    return out


def _cwd(stack):
    d = stack.enter_context(scratch.directory("pty-acceptance-cwd-", mode=0o755))
    token = secrets.token_hex(16)
    dfd = hostfs.open_dir(d)
    try:
        hostfs.create_at(dfd, "token", token.encode(), 0o644)
    finally:
        os.close(dfd)
    return d, token


@pytest.fixture(scope="module")
def session(inv, host, bus, module_peer):
    """One live session running the probe, for every test of this module."""
    with contextlib.ExitStack() as stack:
        peer = module_peer
        acct = host.user(inv.service_user)
        if not acct.exists:
            fail(f"{UNIT_IDS}: the service user {inv.service_user!r} does not exist")
        uid, gid = acct.uid, acct.gid
        cwd, token = _cwd(stack)
        try:
            paths = _standins(stack, inv, uid, gid)
        except standin.StandinError as e:
            fail(f"UNIT-7: SUITE-4: no stand-in listener: {terminal.escape(str(e))}")
        outside = {path: live.can_connect(path) for path in paths}
        try:
            targets = _targets(paths)
        except (OSError, ValueError, mountinfo.MountinfoError) as e:
            fail(f"UNIT-7: cannot place the host's sockets in its mount table: {terminal.escape(str(e))}")
        raw = RawSession(peer, inv.socket)
        stack.callback(raw.close)
        try:
            channel = session_probe.Channel(cwd)
            stack.callback(channel.close)
            before = _loaded_units(bus)
            raw.open()
            argv = live.probe_argv(channel, "token", paths, sorted({t.place.dev for t in targets}))
            raw.start(argv, runtime_s=RUNTIME_S, cwd=cwd)
            started = raw.wait_started(START_DEADLINE_S)
            after = _loaded_units(bus)
            svc = bus.properties(started.unit, SERVICE_IFACE) or {}
            # the answer is believed only from the probe root judged (session_probe.py)
            pid = channel.admit(lambda: [svc.get("ControlGroup", "")], argv, START_DEADLINE_S)
            channel.go()
            report = channel.answer(START_DEADLINE_S)
            report["environ"] = session_probe.environ(pid)  # UNIT-6: read by root
        except (SessionError, PeerError, TimeoutError, BusError, live.LiveError, OSError,
                session_probe.ProbeError) as e:
            fail(f"{UNIT_IDS}: the probe session did not come up: {terminal.escape(str(e))}")
        stack.callback(live.end_by_eof, raw, END_DEADLINE_S)
        yield Live(unit=started.unit, main_pid=svc.get("MainPID", 0),
                   control_group=svc.get("ControlGroup", ""), probe=report,
                   probe_pid=pid, cwd=cwd, token=token, sockets=outside, targets=targets,
                   new_units=sorted(after - before), uid=uid, gid=gid)


def _processes(s: Live, rid: str) -> dict[int, dict]:
    """/proc status of every process of the live session (the probe among them).
    Not Testinfra's host.process: it splits `ps` lines on spaces with comm, which
    any process sets, first, so a process can pose as another pid."""
    path = cgroups.cgroup_dir(s.control_group)
    if path is None:
        raise finding(rid, f"cannot list the processes of {s.unit}: no cgroup.procs for "
                           f"{s.control_group!r} under {', '.join(cgroups.CGROUP_ROOTS)}")
    pids = cgroups.cgroup_pids(path)
    expect(s.probe_pid in pids, rid, f"the probe (pid {s.probe_pid}) is not in {s.control_group}: {pids}")
    out = {}
    for pid in pids:
        with reading(rid, f"{s.unit} pid {pid} vanished while it was read", OSError):
            out[pid] = proc.status(pid)
            out[pid]["cmdline"] = b" ".join(proc.cmdline(pid))[:80].decode("utf-8", "replace")
    return out


# ------------------------------------------------------------------ UNIT-1
@pytest.mark.requirement("UNIT-1")
def test_start_creates_exactly_one_strictly_named_unit(inv, host, session, evidence):
    evidence("STARTED", session.unit)
    evidence("units loaded after START that were not before", session.new_units)
    expect(STRICT_SESSION.match(session.unit), "UNIT-1",
           f"STARTED named {session.unit!r}, not opencode-pty-<32 lowercase hex>.service")
    # the session slice (and its parents) load on demand with the first session
    slices = _slice_chain(inv.units.slice)
    others = [u for u in session.new_units if u not in slices]
    expect(others == [session.unit], "UNIT-1",
           f"one START loaded {others} besides the slices {sorted(slices)}, expected exactly [{session.unit}]")
    unit = show_or_fail(session.unit, "UNIT-1")  # not Testinfra's systemd_properties: it drops empty values
    evidence("Id / LoadState / ActiveState", [unit.get("Id"), unit.get("LoadState"),
                                              unit.get("ActiveState")])
    running = host.service(session.unit).is_running
    evidence("running (systemctl is-active)", running)
    expect(unit.get("Id") == session.unit and running, "UNIT-1",
           f"{session.unit} is Id={unit.get('Id')} ActiveState={unit.get('ActiveState')}")


# ------------------------------------------------------------------ UNIT-2
@pytest.mark.requirement("UNIT-2")
def test_live_processes_run_as_the_service_user_without_supplementary_groups(
        inv, host, session, evidence):
    unit = show_or_fail(session.unit, "UNIT-2")
    procs = _processes(session, "UNIT-2")
    # systemd initgroups()s User= even with SupplementaryGroups= empty: the
    # service user's memberships in the user database are the session's groups
    account = host.user(inv.service_user)
    evidence(f"id -nG {inv.service_user}", account.groups)
    evidence("MainPID", session.main_pid)
    evidence("User / Group / SupplementaryGroups", [unit.get("User"), unit.get("Group"),
                                                    unit.get("SupplementaryGroups")])
    evidence("live Uid/Gid/Groups", {pid: (st.get("Uid"), st.get("Gid"), st.get("Groups"),
                                           st["cmdline"]) for pid, st in procs.items()})
    want_uid, want_gid = [str(session.uid)] * 4, [str(session.gid)] * 4
    extra: dict[str, list[int]] = {}
    with collect("UNIT-2", session.unit) as problems:
        for pid, st in procs.items():
            problems.when(st.get("Uid", "").split() != want_uid,
                          f"pid {pid} ({st['cmdline']}) Uid {st.get('Uid')}, expected {want_uid}")
            problems.when(st.get("Gid", "").split() != want_gid,
                          f"pid {pid} ({st['cmdline']}) Gid {st.get('Gid')}, expected {want_gid}")
            # the primary group may be listed; any other group is a real membership
            for g in set(st.get("Groups", "").split()) - {str(session.gid)}:
                extra.setdefault(g, []).append(pid)
        problems.when(account.groups != [inv.service_group],
                      f"the service user {inv.service_user} is in the groups {account.groups}, "
                      f"expected only its own group {inv.service_group}")
        problems.when(extra, f"the live processes have supplementary groups {extra} (group: pids); "
                             "systemd adds the service user's /etc/group memberships even with "
                             "SupplementaryGroups= empty, so the user must be in no other group")
        problems.when(unit.get("User") != inv.service_user or unit.get("Group") != inv.service_group,
                      f"User={unit.get('User')!r} Group={unit.get('Group')!r}, expected "
                      f"{inv.service_user!r}/{inv.service_group!r}")


# ------------------------------------------------------------------ UNIT-3
@pytest.mark.requirement("UNIT-3")
def test_live_processes_have_no_capabilities_and_no_new_privileges(session, evidence):
    procs = _processes(session, "UNIT-3")
    evidence("live capabilities", {pid: {k: st.get(k) for k in CAP_FIELDS + ("NoNewPrivs",)}
                                   for pid, st in procs.items()})
    with collect("UNIT-3", session.unit) as problems:
        for pid, st in procs.items():
            nonzero = {k: st.get(k) for k in CAP_FIELDS if int(st.get(k) or "1", 16) != 0}
            problems.when(nonzero, f"pid {pid} ({st['cmdline']}) holds {nonzero}")
            problems.when(st.get("NoNewPrivs") != "1",
                          f"pid {pid} ({st['cmdline']}) NoNewPrivs={st.get('NoNewPrivs')}")


# ------------------------------------------------------------------ UNIT-4
def _device_problems(devs):
    problems, seen = [], set()
    for path, kind, major, minor in devs:
        if kind == "blk":
            problems.append(f"block device {path} ({major}:{minor})")
        elif kind == "chr":
            if (major, minor) in PSEUDO_DEVICES:
                seen.add(PSEUDO_DEVICES[(major, minor)])
            elif major not in PTS_MAJORS:
                problems.append(f"device {path} ({major}:{minor})")
    return problems, seen


def _device_allow_problems(entries: list[str]) -> list[str]:
    """DeviceAllow= entries beyond what the contract's hardening implies."""
    problems = []
    for entry in entries:
        spec, _, access = entry.partition(" ")
        if spec not in IMPLIED_DEVICE_ALLOW or not set(access.strip()) <= set("rwm"):
            problems.append(f"DeviceAllow={entry!r} opens a device the contract's hardening does not")
    return problems


@pytest.mark.requirement("UNIT-4")
def test_devices_are_closed_and_nothing_is_delegated(session, evidence):
    unit = show_or_fail(session.unit, "UNIT-4")
    allowed = [v for v in unit.values.get("DeviceAllow", []) if v]
    evidence("systemctl show --all", {"DeviceAllow": allowed, "DropInPaths": unit.get("DropInPaths")})
    devs = session.probe.get("dev", [])
    evidence("device nodes inside", [f"{d[0]} {d[2]}:{d[3]}" for d in devs if d[1] in ("chr", "blk")])
    with collect("UNIT-4", session.unit) as problems:
        found, seen = _device_problems(devs)
        problems += found
        problems.when(not {"null", "ptmx"} <= seen, f"the session's /dev lacks null or ptmx (saw {sorted(seen)}): "
                                                    "the probe did not see a private /dev")
        problems += _device_allow_problems(allowed)


# ------------------------------------------------------------------ UNIT-5
def _read_entry(v) -> bool:
    """A process the probe read: its cgroup text and its owner's uid, nothing else
    (an error, a missing field or another shape is a process it could not read)."""
    return (isinstance(v, dict) and set(v) == {"cgroup", "uid"} and isinstance(v["cgroup"], str)
            and isinstance(v["uid"], int) and not isinstance(v["uid"], bool))


@pytest.mark.requirement("UNIT-5")
def test_proc_is_restricted_to_the_service_users_processes(session, evidence):
    pids, other = session.probe.get("proc_pids", {}), session.probe.get("proc_other", [])
    gone = session.probe.get("proc_gone")
    evidence("/proc inside: processes", pids)
    evidence("/proc inside: listed, then gone before they were read (not judged)", gone or "none")
    evidence("/proc inside: other entries", other)
    own = session.probe.get("self_cgroup")
    with collect("UNIT-5", session.unit) as problems:
        read = {pid: v for pid, v in pids.items() if _read_entry(v)}
        unread = {pid: v for pid, v in pids.items() if pid not in read}
        problems.when(unread, f"processes listed in /proc inside could not be read (there, not gone): {unread}")
        problems.when(not (isinstance(gone, list) and all(isinstance(p, str) and p.isdigit() and p not in pids
                                                          for p in gone)),
                      f"the probe's list of processes gone before they were read is malformed: {gone!r}")
        foreign = {pid: v for pid, v in read.items() if v["uid"] != session.uid and v["cgroup"] != own}
        problems.when(foreign, f"processes of other users are visible inside: {foreign}")
        problems.when(str(session.probe_pid) not in pids,
                      f"the probe does not see itself (pid {session.probe_pid}) in /proc")
        extra = sorted(set(other) - {"self", "thread-self"})
        problems.when(extra, f"/proc shows non-process entries {extra[:20]}")
        outside = sorted(pid for pid, v in read.items() if v["cgroup"] != own)
        evidence("service-user processes visible from another unit (see ISO-1)", outside or "none")


@pytest.mark.requirement("UNIT-5")
def test_namespaces_and_address_families_are_refused(session, evidence):
    ns, fam = session.probe.get("unshare", {}), session.probe.get("socket", {})
    evidence("unshare() inside", ns)
    evidence("socket() inside", fam)
    with collect("UNIT-5", session.unit) as problems:
        problems += [f"unshare({k}) succeeded" for k, v in ns.items() if v == "ok"]
        problems.when(not ns, "the probe reported no unshare() attempt")
        for af in ("AF_NETLINK", "AF_PACKET"):
            problems.when(fam.get(af) != "EAFNOSUPPORT", f"socket({af}) gave {fam.get(af)!r}, expected "
                                                         "EAFNOSUPPORT (refused by the address-family filter)")
        problems.when(fam.get("AF_UNIX") != "ok", f"socket(AF_UNIX) gave {fam.get('AF_UNIX')!r}: the probe could "
                                                  "not create any socket, so the refusals prove nothing")


@pytest.mark.requirement("UNIT-5")
def test_system_calls_are_filtered(session, evidence):
    with reading("UNIT-5", "cannot read Seccomp_filters of PID 1 or the probe", OSError, ValueError):
        baseline = live.host_seccomp_baseline()
        probe = proc.status(session.probe_pid)
    evidence("Seccomp_filters: host PID 1 / probe", [baseline, probe.get("Seccomp_filters")])
    expect(probe.get("Seccomp") == "2" and int(probe.get("Seccomp_filters", "0")) > baseline, "UNIT-5",
           f"{session.unit}: the probe has Seccomp {probe.get('Seccomp')} with "
           f"{probe.get('Seccomp_filters')} filters, not more than PID 1's {baseline}")


# ------------------------------------------------------------------ UNIT-6
@pytest.mark.requirement("UNIT-6")
def test_environment_is_exactly_the_fixed_list(inv, session, evidence):
    unit = show_or_fail(session.unit, "UNIT-6")
    env = session.probe.get("environ", [])
    want = inv.session_environment.as_dict()
    evidence("the command's /proc/<pid>/environ (read by root)", env)
    evidence("Environment=", unit.get("Environment"))
    evidence("declared session_environment", want)
    expect_none(live.environment_problems(env, want), "UNIT-6", session.unit)


@pytest.mark.requirement("UNIT-6")
def test_working_directory_is_the_passed_descriptor(session, evidence):
    unit = show_or_fail(session.unit, "UNIT-6")
    pr = session.probe
    host = os.stat(session.cwd)
    evidence("passed directory (host)", f"{session.cwd} dev:ino {host.st_dev}:{host.st_ino}")
    evidence("inside: getcwd / /proc/self/cwd / dev:ino / token",
             [pr.get("getcwd"), pr.get("proc_cwd"), pr.get("cwd_dev_ino"), pr.get("cwd_token")])
    evidence("WorkingDirectory=", unit.get("WorkingDirectory"))
    with collect("UNIT-6", session.unit) as problems:
        problems.when(pr.get("cwd_dev_ino") != [host.st_dev, host.st_ino],
                      f"cwd is dev:ino {pr.get('cwd_dev_ino')}, the passed directory is "
                      f"{host.st_dev}:{host.st_ino}")
        problems.when(pr.get("getcwd") != session.cwd or pr.get("proc_cwd") != session.cwd,
                      f"getcwd {pr.get('getcwd')!r} and /proc/self/cwd {pr.get('proc_cwd')!r}, "
                      f"expected {session.cwd!r}")
        problems.when(pr.get("cwd_token") != session.token,
                      f"./token read {pr.get('cwd_token')!r}, expected the suite's token")
        problems.when(unit.get("WorkingDirectory"),
                      f"the unit names a path: WorkingDirectory={unit.get('WorkingDirectory')!r}")


# ------------------------------------------------------------------ UNIT-7
@pytest.mark.requirement("UNIT-7")
def test_host_sockets_are_unreachable_from_inside(session, evidence):
    unit = show_or_fail(session.unit, "UNIT-7")
    inside = session.probe.get("connect", {})
    evidence("InaccessiblePaths=", unit.get("InaccessiblePaths"))
    evidence("connect() from the suite (root, outside)", session.sockets)
    evidence("connect() from inside the session", inside)
    with collect("UNIT-7", session.unit) as problems:
        for path, seen in session.sockets.items():
            problems.when(seen != "connected", f"{path} does not accept connections even from outside ({seen}): "
                                               "the check inside would prove nothing")
            if path not in inside:
                problems.add(f"the probe did not try {path}")
            elif inside[path] == "connected":
                problems.add(f"{path} is reachable from inside")


def _session_mounts(session: Live) -> list[mountinfo.Mount]:
    """The mount table of the session's namespace, read from the host as root
    through the MainPID systemd names (checked to be a process of its cgroup)."""
    expect(session.main_pid in _processes(session, "UNIT-7"), "UNIT-7",
           f"{session.unit}: MainPID {session.main_pid} is not a process of its cgroup")
    with reading("UNIT-7", f"cannot read the mount table of {session.unit} (MainPID {session.main_pid})",
                 OSError, mountinfo.MountinfoError):
        return mountinfo.read(session.main_pid)


def _of_their_filesystems(session: Live, table: list[mountinfo.Mount]) -> list[mountinfo.Mount]:
    devs = {t.place.dev for t in session.targets}
    return [m for m in table if m.dev in devs]


@pytest.mark.requirement("UNIT-7")
def test_no_mount_of_the_session_shows_a_host_socket(session, evidence):
    table = _session_mounts(session)
    evidence("the host's sockets: path, dev:ino, their filesystem and path in it",
             [f"{t.path} {t.ident[0]}:{t.ident[1]} on {t.place.dev[0]}:{t.place.dev[1]} at {t.place.path}"
              for t in session.targets])
    evidence("the session's mounts of those filesystems (/proc/<MainPID>/mountinfo)",
             [m.describe() for m in _of_their_filesystems(session, table)])
    shown = [f"{t.path} at {at} through {m.describe()}"
             for t in session.targets for at, m in mountinfo.exposures(table, t.place)]
    evidence("host sockets the session's mount table shows", shown or "none")
    expect_none(shown, "UNIT-7", f"{session.unit}: a mount of the session's namespace shows a host socket",
                escape=terminal.escape)


def _found(report: dict, key: str) -> list[tuple[str, tuple[int, int]]]:
    """The probe's [path, dev, ino] entries under `key`, each checked for shape (SUITE-4)."""
    out = []
    entries = report.get(key)
    if not isinstance(entries, list):
        raise finding("UNIT-7", f"the probe's socket search reported no list {key!r}")
    for entry in entries:
        expect(isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
               and all(isinstance(x, int) and not isinstance(x, bool) for x in entry[1:]), "UNIT-7",
               f"the probe's socket search reported a malformed entry: {terminal.escape(repr(entry)[:200])}")
        out.append((entry[0], (entry[1], entry[2])))
    return out


def _pid_of(path: str) -> int:
    """The pid in a probe path /proc/<pid>/root/...; 0 if the probe sent another shape."""
    part = path.split("/")[2] if path.startswith("/proc/") else ""
    return int(part) if part.isdigit() else 0


def _who(pid: int) -> str:
    """A process outside the session, as root reads it now: pid, program, unit."""
    try:
        return f"pid {pid} ({proc.exe(pid)}, in {', '.join(proc.cgroups(pid)) or 'no cgroup'})"
    except (OSError, ValueError):
        return f"pid {pid} (gone)"


@pytest.mark.requirement("UNIT-7")
def test_no_socket_found_inside_is_a_host_socket(session, evidence):
    report = session.probe.get("sockets")
    if not isinstance(report, dict):
        raise finding("UNIT-7", f"{session.unit}: the probe reported no socket search")
    table = _of_their_filesystems(session, _session_mounts(session))
    expected = sorted({m.mountpoint for m in table})
    hosts = {t.ident: t.path for t in session.targets}
    found, via = _found(report, "found"), _found(report, "via_proc_root")
    inside = [f"{hosts[i]} at {path}" for path, i in found if i in hosts]
    through = [f"{hosts[i]} at {path}" for path, i in via if i in hosts]
    evidence("mounts searched inside / of the sockets' filesystems in the mount table",
             [report.get("mounts"), expected])
    evidence("names looked at / complete", [report.get("entries"), report.get("complete")])
    evidence("sockets found inside (path, dev, ino)", report.get("found"))
    evidence("unreadable inside (first 50) / count", [report.get("unreadable"), report.get("unreadable_count")])
    evidence("host sockets found inside", inside or "none")
    evidence("host sockets reached through /proc/<pid>/root of a process outside the session",
             through or f"none (errors: {report.get('via_errors')})")
    with collect("UNIT-7", session.unit, escape=terminal.escape) as problems:
        problems.when(report.get("found_count") != len(found),
                      f"the probe's report holds {len(found)} of the {report.get('found_count')} sockets "
                      "it found: the rest were not compared")
        problems.when(report.get("mounts") != expected,
                      f"the probe searched the mounts {report.get('mounts')}, the session's mount table "
                      f"holds {expected} of the sockets' filesystems: its search proves nothing")
        problems.when(report.get("complete") is not True,
                      f"the probe's search stopped after {report.get('entries')} names "
                      f"(bound {live.SEARCH_ENTRIES})")
        problems.when(inside, "host sockets are reachable inside: " + "; ".join(inside))
        if through:
            problems.add(f"{len(through)} host socket paths are reachable inside through /proc/<pid>/root of "
                         "processes of the service user outside the session: " + "; ".join(through[:8])
                         + "; by " + "; ".join(_who(pid) for pid in sorted({_pid_of(path) for path, i in via
                                                                             if i in hosts}))
                         + " (a dumpable process of the service user outside its sessions hands them the "
                         "host's root: none may run there, or sessions need a PID namespace of their own)")


# ------------------------------------------------------------------ properties
def _syscalls(inv, want: str) -> set[str]:
    """The allow list `want` (SystemCallFilter='s words) gives on this host: its
    groups expanded as systemd-analyze lists them, less the names this host's
    libseccomp does not know (systemd drops those)."""
    res, groups = analyze.syscall_groups(inv.build.user)
    try:
        names = analyze.expand_syscalls(want.split(), groups)
        return names - seccomp.unknown(names)
    except KeyError as e:
        fail(f"UNIT-5: systemd-analyze syscall-filter (exit {res.returncode}) lists no group {e}: "
             f"{res.output.strip()[-300:]}")
    except OSError as e:
        fail(f"UNIT-5: cannot load {seccomp.SONAME} to resolve system call names: {e}")


@pytest.mark.parametrize("rid", [pytest.param(r, marks=pytest.mark.requirement(r), id=r)
                                 for r in inventory.SESSION_PROPERTY_REQUIREMENTS])
def test_unit_shows_the_contracts_properties(inv, rid, session, evidence):
    """Each property of TARGET-CONTRACT's session unit, under the requirement it
    belongs to, as the inventory's unit_properties.session states it."""
    if inv.unit_properties.session is None:
        raise finding(rid, "the inventory states no session unit properties (unit_properties.session)")
    want = inv.unit_properties.session.judged(rid)
    unit = show_or_fail(session.unit, rid)
    shown = {k: unit.get(k) for k in want}
    evidence("the inventory's unit_properties.session", {k: v for k, (v, _) in want.items()})
    evidence("systemctl show --all", shown)
    evidence("DropInPaths", unit.get("DropInPaths"))
    with collect(rid, session.unit, escape=terminal.escape) as problems:
        for key, (value, how) in want.items():
            allowed = _syscalls(inv, value) if how == SYSCALLS else None
            problems.when(problem := value_problem(key, value, shown[key], how, allowed), problem)
            if allowed is not None:  # the contract's floor, as this host expands it (spec/floor.py)
                beyond = sorted(allowed - _syscalls(inv, floor.SYSCALL_GROUP))
                problems.when(beyond, f"{key}: the inventory's {value!r} allows {len(beyond)} calls beyond the "
                                      f"contract's {floor.SYSCALL_GROUP} {beyond[:12]}: an inventory may narrow "
                                      "it, never widen it")


# ------------------------------------------------------------------ UNIT-8
@pytest.mark.requirement("UNIT-8")
def test_unit_is_in_the_slice_and_bound_to_the_supervisor(inv, session, evidence):
    unit = show_or_fail(session.unit, "UNIT-8")
    slice_unit = show_or_fail(inv.units.slice, "UNIT-8")
    supervisor = inv.units.supervisor
    props = {k: unit.get(k) for k in ("Slice", "ControlGroup", "BindsTo", "After")}
    evidence("systemctl show --all", props)
    evidence(f"{slice_unit.name} ControlGroup", slice_unit.get("ControlGroup"))
    want_cg = f"{slice_unit.get('ControlGroup')}/{session.unit}"
    with collect("UNIT-8", session.unit) as problems:
        problems.when(props["Slice"] != inv.units.slice, f"Slice={props['Slice']!r}, expected {inv.units.slice!r}")
        problems.when(not slice_unit.get("ControlGroup") or props["ControlGroup"] != want_cg,
                      f"ControlGroup={props['ControlGroup']!r}, expected {want_cg!r}")
        problems.when(unit.words("BindsTo") != [supervisor],
                      f"BindsTo={unit.words('BindsTo')}, expected exactly [{supervisor}]")
        problems.when(supervisor not in unit.words("After"),
                      f"After= does not name {supervisor}: {unit.words('After')}")


# ------------------------------------------------------------------ UNIT-9
@pytest.mark.requirement("UNIT-9")
def test_live_session_exposure_is_recorded(inv, session, evidence, concern):
    res, score = analyze.security(inv.build.user, session.unit)
    evidence("command", " ".join(res.argv))
    if score is None:
        raise finding("UNIT-9", f"no exposure level from systemd-analyze security "
                                f"{session.unit} (exit {res.returncode}): {res.output.strip()[-500:]}")
    evidence("exposure (CONCERN, recorded)", f"{session.unit}: {score[0]} {score[1]}")
    concern("UNIT-9", f"live session {session.unit}: systemd-analyze security exposure "
                      f"{score[0]} {score[1]} (recorded, not judged)")
