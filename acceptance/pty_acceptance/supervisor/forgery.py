"""Forged systemd signals (CONC-2: cleanup is forge-proof).

The system bus delivers a signal that names a destination to that connection
whatever its match rules say, and its default policy (Debian 12's dbus 1.14:
`<allow send_type="signal"/>`) lets any local user send one; session unit
names are public. So any process of the host can tell the supervisor's bus
connections that a session's unit ended, if the supervisor believes it.

Here: the supervisor's unique bus names (every connection a process of its
unit holds: supervisor_names), the forged signals for one session unit as
`busctl emit` arguments (forgeries; a process of the suite's choosing sends
them, `busctl` run as that user), and a connection of the suite's own that
receives a copy of every forgery (Witness): proof that the bus of this host
did deliver them, so that a session that survived was really tried.
Sessions are watched for an end (quiet_for) while the forgery could act.
"""
from __future__ import annotations

import select
import time
from dataclasses import dataclass, field

from jeepney import HeaderFields, MessageType
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection

from pty_acceptance.host import cgroups, programs
from pty_acceptance.host.bus import SERVICE_IFACE, BusError, Systemd, open_system_bus
from pty_acceptance.supervisor import protocol as p
from pty_acceptance.supervisor.session_clients import RawSession

SYSTEMD_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
PROPERTIES = "org.freedesktop.DBus.Properties"
MEMBERS = ("PropertiesChanged", "JobRemoved", "UnitRemoved")
# How long the sessions are watched after the forgery: as long as the suite
# gives a real end to be reported (Ending.stream_end), so a supervisor that
# took the forgery for systemd's word has acted on it by then.
WATCH_S = 15.0
WITNESS_WAIT_S = 5.0


def bus_call(bus: Systemd, msg) -> tuple:
    """A call to the bus itself (org.freedesktop.DBus) and its reply's body."""
    reply = bus.send(msg)
    if reply.header.message_type == MessageType.error:
        raise BusError(str(msg.header.fields.get(HeaderFields.member)),
                       str(reply.header.fields.get(HeaderFields.error_name, "error")),
                       str(reply.body[0]) if reply.body else "")
    return reply.body


def supervisor_names(bus: Systemd, unit: str) -> dict[str, int]:
    """{unique bus name: pid} of every bus connection a process of `unit` holds
    (its MainPID's, and a child's: the python implementation's interpreter)."""
    props = bus.properties(unit, SERVICE_IFACE) or {}
    path = cgroups.cgroup_dir(props.get("ControlGroup") or "")
    if path is None:
        raise BusError("supervisor_names", "NoCgroup", f"{unit} has no cgroup on this host")
    pids = set(cgroups.cgroup_pids(path))
    names = {}
    for name in bus_call(bus, message_bus.ListNames())[0]:
        if not name.startswith(":"):
            continue
        try:
            (pid,) = bus_call(bus, message_bus.GetConnectionUnixProcessID(name))
        except BusError:  # the connection went away while listed
            continue
        if pid in pids:
            names[name] = pid
    return names


def unit_object_path(unit: str) -> str:
    """systemd's object path of a unit (sd_bus_path_encode)."""
    return SYSTEMD_PATH + "/unit/" + "".join(
        c if c.isascii() and c.isalnum() else f"_{ord(c):02x}" for c in unit)


def forgeries(unit: str) -> list[tuple[str, list[str]]]:
    """(what, `busctl emit` arguments after --destination) of every forged
    signal for `unit`: systemd's own signals saying it ended cleanly."""
    path = unit_object_path(unit)
    return [
        ("PropertiesChanged Unit ActiveState=inactive SubState=dead",
         [path, PROPERTIES, "PropertiesChanged", "sa{sv}as", "org.freedesktop.systemd1.Unit",
          "2", "ActiveState", "s", "inactive", "SubState", "s", "dead", "0"]),
        ("PropertiesChanged Service ExecMainCode=1 ExecMainStatus=0 Result=success",
         [path, PROPERTIES, "PropertiesChanged", "sa{sv}as", SERVICE_IFACE,
          "3", "ExecMainCode", "i", "1", "ExecMainStatus", "i", "0", "Result", "s", "success", "0"]),
        ("JobRemoved done",
         [SYSTEMD_PATH, MANAGER, "JobRemoved", "uoss", "4242", f"{SYSTEMD_PATH}/job/4242", unit, "done"]),
        ("UnitRemoved", [SYSTEMD_PATH, MANAGER, "UnitRemoved", "so", unit, path]),
    ]


def emit_argvs(destinations: list[str], units: list[str]) -> list[list[str]]:
    """busctl command lines sending every forgery for every unit to every destination."""
    busctl = programs.path("busctl")
    return [[busctl, "--system", "emit", f"--destination={d}", *args]
            for u in units for _, args in forgeries(u) for d in destinations]


@dataclass
class Witness:
    """A connection of the suite's own: the forgers address a copy of every
    forgery to it too, and what it got says whether the bus delivered them."""

    conn: DBusConnection | None = None
    name: str = ""
    got: dict[str, set[str]] = field(default_factory=dict)  # member -> senders

    def __enter__(self) -> "Witness":
        self.conn = open_system_bus()
        self.name = self.conn.unique_name
        return self

    def __exit__(self, *exc) -> None:
        if self.conn is not None:
            self.conn.close()

    def collect(self, want: int, deadline_s: float = WITNESS_WAIT_S) -> int:
        """Receive until `want` forged signals came (or the deadline); how many did."""
        end = time.monotonic() + deadline_s
        count = 0
        while count < want and (left := end - time.monotonic()) > 0:
            try:
                msg = self.conn.receive(timeout=left)  # type: ignore[union-attr]  # entered
            except TimeoutError:
                break
            member = msg.header.fields.get(HeaderFields.member)
            if msg.header.message_type == MessageType.signal and member in MEMBERS:
                count += 1
                self.got.setdefault(member, set()).add(str(msg.header.fields.get(HeaderFields.sender)))
        return count


def quiet_for(sessions: list[RawSession], seconds: float) -> dict[RawSession, str]:
    """Watch the sessions side by side for `seconds`: {session: what ended it}
    for each one that got EXIT or ERROR or whose stream ended meanwhile
    (output is kept as RawSession.read keeps it)."""
    ended: dict[RawSession, str] = {}
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        live = {s.sock: s for s in sessions if s.sock is not None and s not in ended}
        if not live:
            break
        ready, _, _ = select.select(list(live), [], [], left)
        for sock in ready:
            s = live[sock]
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                ended[s] = "connection reset"
                continue
            if not data:
                ended[s] = "end of stream"
                continue
            try:
                frames = s.decoder.feed(data)
            except p.ProtocolError as e:
                ended[s] = f"malformed frames: {e}"
                continue
            for f in frames:
                if f.type == p.T.OUTPUT:
                    s.outcome.output = (s.outcome.output + f.payload)[-65536:]
                    continue
                s.outcome.note(f)
                if f.type in (p.T.EXIT, p.T.ERROR):
                    ended[s] = s.outcome.describe()
    return ended
