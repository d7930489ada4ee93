"""Is this a host the suite can judge at all? Read-only, in seconds, before any
module (issue 22; SUITE-3: what could not be checked never passes).

A run on a machine that is not a target host (no systemd as PID 1, no system
bus, an inventory that does not load, a supervisor that is not installed)
would otherwise fail every module in its own words, a hundred times over. The
preflight finds the first such cause, the gate reports it once, first and
last, and the tests that depend on it are not run (rules.py groups them by
module): nothing passes, nothing is hidden.

Checks, in order (a later one needs the earlier ones):
1. systemd is PID 1 (`/proc/1/comm`, `/run/systemd/system`);
2. the system bus answers (systemd's Manager over D-Bus);
3. the inventory loads, every pin filled (`inventory.load`: a `FILL-IN`
   placeholder names its requirement);
4. what the inventory names exists: the supervisor unit loaded and active,
   the slice loaded, no unit file for the peer (the suite starts its own
   under that name), the candidate unit file, the three binaries, the socket,
   the runtime, server.env, bun and the harness, the service user and group,
   the build user (that a file is there; what it is, a link, a FIFO, a
   group-writable file, is its own requirement's to judge, in its words);
5. every host program the suite runs, by absolute path (`programs.py`): it
   lists them, it never installs one.

It names the host first: its release (os-release, read safely), systemd's
version, the kernel and Python (host/hostkind.py), and whether the suite was
proven on that combination (spec/proven.py). Recorded, never judged: a host
the suite was not proven on is judged by the same checks.

It also reads, and the report records, the kernel's link protections
(`fs.protected_hardlinks`, `_symlinks`, `_fifos`, `_regular`). They are
evidence, never a reason to pass: the suite refuses a link, a FIFO and a
hard link in the user's trees whatever they say (hostfs). A 0 is a finding
the report names (SUITE-4's concern): other programs root runs may not be
so careful.

Every check only reads (lstat, /proc, D-Bus properties); none follows a link
in a place the service user can write.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pty_acceptance.host import hostfs, hostkind, programs
from pty_acceptance.spec import inventory, proven

if TYPE_CHECKING:  # imported where used: the bus only when a check needs it
    from pty_acceptance.host.bus import Systemd

# Host programs every run needs, by name (programs.path finds them in the
# system directories): systemd's tools, strace (HELPER, RUNTIME-2), the
# interpreter the peer agent and the probes run in, script(1) (the contract's
# launcher), the shell and coreutils the sessions run, and what Testinfra's
# `host` runs (id, getent, ss).
# `host` runs (id, getent, ss). Names are looked up in the system directories;
# absolute paths are where the suite (or the contract's launcher) names them.
PROGRAMS = ("systemctl", "systemd-analyze", "strace", "id", "getent", "ss", "/usr/bin/python3",
            "/usr/bin/script", "/bin/sh", "/bin/sleep", "/bin/cat", "/bin/true", "/bin/echo", "busctl")


@dataclass(frozen=True)
class PreflightCheck:
    what: str
    ok: bool
    detail: str
    needed_by: tuple[str, ...] = ()  # requirement IDs whose tests need it; (): every test

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAILED'}  {self.what}: {self.detail}"

    @property
    def cause(self) -> str:
        return f"{self.what}: {self.detail}"

    def withholds(self, ids: tuple[str, ...]) -> bool:
        """A test naming `ids` cannot run while this check fails."""
        return not self.ok and (not self.needed_by or bool(set(ids) & set(self.needed_by)))


# What each protection, when 0, lets another user do to root (proc_sys_fs(5)).
PROTECTIONS = {
    "fs.protected_hardlinks": "any user may hard-link a file it does not own, a root-only one included, "
                              "into a tree it can write",
    "fs.protected_symlinks": "root follows a symlink another user planted in a sticky world-writable "
                             "directory (/tmp)",
    "fs.protected_fifos": "root's O_CREAT opens a FIFO another user planted in a sticky world-writable "
                          "directory",
    "fs.protected_regular": "root's O_CREAT opens a regular file another user planted in a sticky "
                            "world-writable directory",
}


@dataclass(frozen=True)
class Protection:
    """A kernel link protection as this host has it (its /proc/sys value)."""
    name: str
    value: str

    @property
    def off(self) -> bool:
        return self.value == "0"

    def line(self) -> str:
        return f"{self.name} = {self.value}" + (f": {PROTECTIONS[self.name]}" if self.off else "")


def protections() -> tuple[Protection, ...]:
    out = []
    for name in PROTECTIONS:
        path = "/proc/sys/" + name.replace(".", "/")
        try:
            value = hostfs.read_file(path, 64).decode("ascii", "replace").strip()
        except OSError as e:
            value = f"not read ({e.strerror or e})"
        out.append(Protection(name, value))
    return tuple(out)


@dataclass
class Result:
    findings: list[PreflightCheck]
    inventory: inventory.Inventory | None = None
    protections: tuple[Protection, ...] = ()  # recorded, never judged
    host: hostkind.HostKind | None = None  # recorded, never judged
    proven: str = ""  # whether the suite was proven on such a host, in words

    def host_lines(self) -> list[str]:
        """The host named, first: what it is, then whether that was proven."""
        if self.host is None:
            return []
        return [f"host: {self.host.line()}", f"host: {self.proven}"]

    @property
    def failed(self) -> list[PreflightCheck]:
        return [f for f in self.findings if not f.ok]

    @property
    def cause(self) -> str | None:
        """The first failed check that keeps every test from running, in words
        (None: there is none; other failed checks withhold only their tests)."""
        bad = [f for f in self.failed if not f.needed_by]
        return bad[0].cause if bad else None

    def withheld(self, ids: tuple[str, ...]) -> str | None:
        """Why a test naming `ids` cannot run (the first failed check it needs), or None."""
        return next((f.cause for f in self.findings if f.withholds(ids)), None)


def _pid1() -> PreflightCheck:
    try:
        comm = hostfs.read_file("/proc/1/comm", 256).decode("ascii", "replace").strip()
    except OSError as e:
        return PreflightCheck("systemd", False, f"/proc/1/comm cannot be read ({e.strerror or e})")
    booted = os.path.isdir("/run/systemd/system") and not os.path.islink("/run/systemd/system")
    if comm != "systemd" or not booted:
        return PreflightCheck("systemd", False, f"PID 1 is {comm!r}, not systemd"
                       + ("" if booted else ", and /run/systemd/system does not exist")
                       + ": this is not a target host (run the suite on the host it accepts)")
    return PreflightCheck("systemd", True, "PID 1 is systemd")


def _bus() -> tuple[PreflightCheck, Systemd | None]:
    from pty_acceptance.host.bus import BusError, Systemd

    try:
        bus = Systemd.connect()
        bus.call("GetDefaultTarget")
    except (OSError, BusError) as e:
        return PreflightCheck("system bus", False, f"systemd does not answer on the system bus ({e})"), None
    return PreflightCheck("system bus", True, "systemd answers"), bus


def _unit(bus, name: str, role: str, want_active: bool) -> PreflightCheck:
    from pty_acceptance.host.bus import BusError

    try:
        props = bus.properties(name, load=True)  # a slice no unit uses yet is not in memory
    except BusError as e:
        return PreflightCheck(f"unit {name}", False, f"cannot be read ({e})")
    if props is None or props.get("LoadState") != "loaded":
        state = "not loaded" if props is None else f"LoadState={props.get('LoadState')}"
        return PreflightCheck(f"unit {name}", False, f"the {role} is {state}: is it installed?")
    if want_active and props.get("ActiveState") != "active":
        return PreflightCheck(f"unit {name}", False, f"the {role} is {props.get('ActiveState')}/"
                       f"{props.get('SubState')}, not active: start it before the run")
    return PreflightCheck(f"unit {name}", True, f"the {role}, {props.get('ActiveState')}")


def _no_peer(bus, name: str) -> PreflightCheck:
    from pty_acceptance.host.bus import BusError

    try:
        props = bus.properties(name, load=True)  # a unit file that nothing loaded yet counts too
    except BusError as e:
        return PreflightCheck(f"unit {name}", False, f"cannot be read ({e})")
    if props and props.get("FragmentPath"):
        return PreflightCheck(f"unit {name}", False, f"the peer has a unit file ({props.get('FragmentPath')}): "
                       "the suite starts its own disposable peer under that name, before the cutover")
    return PreflightCheck(f"unit {name}", True, "no unit file: the suite's disposable peer can use the name")


def _exists(path: str, what: str, needed_by: tuple[str, ...] = ()) -> PreflightCheck:
    """`path` is there (fstatat in its directory, reached from / without
    following a link). What it is (a link, a FIFO, a group-writable file, a
    link above it...) is its own requirement's to judge (OWN-1, SCOPE-2,
    CUT-3, ...), with that requirement's words: the preflight only asks
    whether there is anything to judge."""
    try:
        node = hostfs.Node.walked(path)
    except OSError as e:
        return PreflightCheck(what, True, f"{path} (not reached: {e.strerror or e}; its requirement judges it)",
                              needed_by)
    if not node.exists:
        return PreflightCheck(what, False, f"{path} does not exist", needed_by)
    return PreflightCheck(what, True, f"{path} ({node.kind})", needed_by)


def _account(name: str, what: str, db, needed_by: tuple[str, ...] = ()) -> PreflightCheck:
    try:
        db(name)
    except KeyError:
        return PreflightCheck(what, False, f"{name!r} does not exist on this host", needed_by)
    return PreflightCheck(what, True, name, needed_by)


# What a check's failure withholds beyond itself (requirement IDs); a check
# not named here is needed by every test.
BUILD = ("BUILD-1", "BUILD-2", "BUILD-3", "PLUGIN-1")
RUNTIME = ("RUNTIME-1", "RUNTIME-2")
HELPER = ("HELPER-1", "HELPER-2", "HELPER-3", "HELPER-4", "HELPER-5", "RUNTIME-2")
NEEDED_BY = {"systemd-analyze": ("CUT-4", "UNIT-9"), "strace": HELPER,
             "busctl": ("CONC-2",)}  # the forged signals of test_forged_signals.py


def programs_needed(inv: inventory.Inventory | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(path, what for, the IDs whose tests need it; () every test) of every
    host program the suite runs."""
    out = [(n if n.startswith("/") else programs.path(n), n, NEEDED_BY.get(n, ())) for n in PROGRAMS]
    if inv is not None:
        out += [(inv.build.go, "build.go (BUILD-1)", BUILD),
                (inv.plugin.bun, "plugin.bun (PLUGIN-1)", ("PLUGIN-1",))]
    return out


def _inventory_findings(bus, inv: inventory.Inventory) -> list[PreflightCheck]:
    units = inv.units
    out = [_unit(bus, units.supervisor, "supervisor", True), _unit(bus, units.slice, "session slice", False),
           _no_peer(bus, units.peer),
           _exists(units.candidate_file, "the candidate unit file", RUNTIME + ("CUT-4",))]
    out += [_exists(b.path, f"binary {b.role}") for b in inv.binaries_list]
    out.append(_exists(inv.socket, "the supervisor socket"))
    out += [_exists(inv.runtime.binary, "runtime.binary", RUNTIME),
            _exists(inv.cutover.server_env, "server.env", ("CUT-2", "CUT-3", "RUNTIME-2")),
            _exists(inv.plugin.harness, "plugin.harness", ("PLUGIN-1",))]
    out += [_account(inv.service_user, "the service user", pwd.getpwnam),
            _account(inv.service_group, "the service group", grp.getgrnam),
            _account(inv.build.user, "build.user", pwd.getpwnam, BUILD)]
    return out


def host_findings(inv: inventory.Inventory | None) -> list[PreflightCheck]:
    """The checks of the host itself, in order (systemd, the bus, what the
    inventory names, the programs); those that need a failed one are left out."""
    found = [_pid1()]
    bus = None
    if found[-1].ok:
        bus_finding, bus = _bus()
        found.append(bus_finding)
    try:
        if inv is not None and bus is not None:
            found += _inventory_findings(bus, inv)
    finally:
        if bus is not None:
            bus.close()
    found += [_program(path, why, needed) for path, why, needed in programs_needed(inv)]
    return found


def check(inventory_file: str) -> Result:
    """Every check: systemd and the bus, the inventory, then what it names and
    the programs."""
    try:
        inv = inventory.load(inventory_file)
        loaded = PreflightCheck("inventory", True, f"{inventory_file} loads, every pin filled")
    except inventory.InventoryError as e:
        inv, loaded = None, PreflightCheck("inventory", False, str(e))
    host = host_findings(inv)
    first = [f for f in host if f.what in ("systemd", "system bus")]
    kind = hostkind.read()
    said = proven.verdict(kind.os_release.get("ID", ""), kind.os_release.get("VERSION_CODENAME", ""),
                          kind.systemd_major, kind.python_minor, kind.kernel)
    return Result(first + [loaded] + [f for f in host if f not in first], inv, protections(), kind, said)


def _program(path: str, why: str, needed_by: tuple[str, ...] = ()) -> PreflightCheck:
    """An executable file at `path` (a link in a system directory, /bin/sh ->
    dash, is how Debian installs some: it is executed, never judged for ownership
    here; OWN-1 judges the suite's binaries)."""
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return PreflightCheck(f"program {why}", True, path, needed_by)
    return PreflightCheck(f"program {why}", False, f"{path} is not an executable file: the suite needs "
                   "it and never installs it", needed_by)
