"""systemd's manager over the system bus (jeepney): the calls the suite needs
to create, read and remove its own disposable units. Every call has a
deadline; a D-Bus error becomes BusError naming the call. The bus is the
one at its fixed path (SYSTEM_BUS), whatever the environment says. Not Testinfra's
`host.service`: unit properties must keep empty values and the suite's own
units are created and removed here."""

from __future__ import annotations

import time
from dataclasses import dataclass

from jeepney import DBusAddress, MessageType, Properties, new_method_call
from jeepney.io.blocking import DBusConnection, open_dbus_connection

from pty_acceptance.errors import Unreadable

SYSTEMD = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                      interface="org.freedesktop.systemd1.Manager")
UNIT_IFACE = "org.freedesktop.systemd1.Unit"
SERVICE_IFACE = "org.freedesktop.systemd1.Service"
CALL_TIMEOUT_S = 5.0
# The system bus at its fixed path, never where the environment says
# (jeepney's bus="SYSTEM" honours DBUS_SYSTEM_BUS_ADDRESS: a private bus with a
# fake org.freedesktop.systemd1 would answer for systemd). Every connection the
# suite opens names this address (SUITE-3).
SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"


def open_system_bus(enable_fds: bool = False) -> DBusConnection:
    """A connection to the system bus at SYSTEM_BUS."""
    return open_dbus_connection(bus=SYSTEM_BUS, enable_fds=enable_fds)


class BusError(Unreadable):
    def __init__(self, call: str, name: str, text: str):
        super().__init__(f"{call}: {name}: {text}")
        self.name = name


def _unwrap(call: str, reply):
    if reply.header.message_type == MessageType.error:
        name = reply.header.fields.get(4, "error")  # HeaderFields.error_name
        text = reply.body[0] if reply.body else ""
        raise BusError(call, str(name), str(text))
    return reply.body


@dataclass
class Systemd:
    conn: DBusConnection

    @classmethod
    def connect(cls) -> "Systemd":
        return cls(open_system_bus(enable_fds=True))

    def close(self) -> None:
        self.conn.close()

    def send(self, msg):
        """One call and its reply. A call cut short by an interrupt (SIGINT, or
        SIGTERM: startup.py) may leave a reply half read: the connection is then
        out of step, so the next call (the teardown's) gets a fresh one."""
        try:
            return self.conn.send_and_get_reply(msg, timeout=CALL_TIMEOUT_S)
        except KeyboardInterrupt:
            old, self.conn = self.conn, open_system_bus(enable_fds=True)
            try:
                old.close()
            except OSError:
                pass
            raise

    def call(self, method: str, signature: str | None = None, body: tuple = ()):
        msg = new_method_call(SYSTEMD, method, signature, body)
        return _unwrap(method, self.send(msg))

    def manager_property(self, name: str):
        """One property of the Manager itself (Version, ...), unwrapped."""
        (value,) = _unwrap(f"Get {name}", self.send(Properties(SYSTEMD).get(name)))
        return value[1]

    def unit_by_pidfd(self, pidfd: int) -> tuple[str, bytes] | None:
        """(unit name, InvocationID) of the process a pidfd names: GetUnitByPIDFD,
        systemd 257 and later (None where the Manager does not offer it)."""
        try:
            _path, unit, invocation = self.call("GetUnitByPIDFD", "h", (pidfd,))
        except BusError as e:
            if e.name.endswith("UnknownMethod"):
                return None
            raise
        return str(unit), bytes(invocation)

    def start_transient(self, name: str, props: list, mode: str = "fail") -> str:
        return self.call("StartTransientUnit", "ssa(sv)a(sa(sv))", (name, mode, props, []))[0]

    def stop(self, name: str) -> None:
        self.call("StopUnit", "ss", (name, "replace"))

    def kill(self, name: str, signal: int, who: str = "all") -> None:
        self.call("KillUnit", "ssi", (name, who, signal))

    def reset_failed(self, name: str) -> None:
        try:
            self.call("ResetFailedUnit", "s", (name,))
        except BusError:
            pass

    def unit_path(self, name: str) -> str | None:
        try:
            return self.call("GetUnit", "s", (name,))[0]
        except BusError as e:
            if e.name.endswith("NoSuchUnit"):
                return None
            raise

    def properties(self, name: str, iface: str = UNIT_IFACE, load: bool = False) -> dict | None:
        """GetAll of a loaded unit, values unwrapped; None if it is not loaded.
        With `load`, a unit that nothing holds in memory yet (a slice no unit
        uses, a unit file never started) is loaded from disk first, as
        `systemctl show` does: its LoadState then says whether it exists."""
        path = self.call("LoadUnit", "s", (name,))[0] if load else self.unit_path(name)
        if path is None:
            return None
        addr = DBusAddress(path, bus_name=SYSTEMD.bus_name, interface=iface)
        msg = Properties(addr).get_all()
        try:
            (props,) = _unwrap("GetAll", self.send(msg))
        except BusError as e:
            if e.name.endswith("UnknownObject"):
                return None
            raise
        return {k: v[1] for k, v in props.items()}

    def wait_for(self, name: str, predicate, deadline_s: float, what: str, iface: str = UNIT_IFACE):
        """Poll the unit's properties until predicate(props or None) holds."""
        end = time.monotonic() + deadline_s
        delay = 0.005
        while True:
            props = self.properties(name, iface)
            if predicate(props):
                return props
            if time.monotonic() > end:
                state = None if props is None else {k: props.get(k) for k in
                                                    ("ActiveState", "SubState", "MainPID", "Result")}
                raise TimeoutError(f"{name}: {what} not reached within {deadline_s} s; "
                                   f"last seen {state}")
            time.sleep(delay)  # poll interval, not a wait for an outcome
            delay = min(delay * 2, 0.1)


def sv(sig: str, value):
    """A (name, variant) property value for StartTransientUnit."""
    return (sig, value)
