"""What kind of host this is: its release (os-release, read safely), the
version of systemd that runs it (the Manager's Version over D-Bus), the
kernel and the Python the suite runs in. The preflight records them and says
whether the suite was proven on such a host (spec/proven.py); none of them
is ever a reason to pass or to fail.

os-release(5): /etc/os-release, else /usr/lib/os-release. Debian's
/etc/os-release is a link to ../usr/lib/os-release: a link to exactly that
file is taken (the file is then read walked from / without following a
link), any other link is refused, never followed.
"""

from __future__ import annotations

import os
import platform
import re
import stat
from dataclasses import dataclass
from typing import cast

from pty_acceptance.host import hostfs

ETC_OS_RELEASE = "/etc/os-release"
USR_OS_RELEASE = "/usr/lib/os-release"
OS_RELEASE_LIMIT = 64 * 1024
_KEY = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class HostKind:
    os_release: dict[str, str]  # {}: not read (os_release_note says why)
    os_release_note: str  # where it was read from, or why it was not
    systemd: str  # the Manager's Version ("257.13-1~deb13u1"), or "not read (...)"
    kernel: str
    python: str

    @property
    def release(self) -> str:
        o = self.os_release
        return o.get("PRETTY_NAME") or " ".join(filter(None, (o.get("NAME"), o.get("VERSION")))) or \
            f"release not read ({self.os_release_note})"

    @property
    def systemd_major(self) -> int | None:
        m = re.match(r"(\d+)", self.systemd)
        return int(m.group(1)) if m else None

    @property
    def python_minor(self) -> str:
        return ".".join(self.python.split(".")[:2])

    def line(self) -> str:
        return f"{self.release}; systemd {self.systemd}; kernel {self.kernel}; Python {self.python}"


def _unquote(value: str) -> str | None:
    """An os-release(5) value: bare, or in single quotes, or in double quotes
    where a backslash escapes the next character; None when malformed."""
    if not value or value[0] not in "\"'":
        return value if not any(c.isspace() or c in "\"'\\$`" for c in value) else None
    q, out, i = value[0], cast(list[str], []), 1
    while i < len(value):
        c = value[i]
        if c == q:
            return "".join(out) if i == len(value) - 1 else None
        if c == "\\" and q == '"' and i + 1 < len(value):
            i += 1
            c = value[i]
        out.append(c)
        i += 1
    return None


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines (os-release(5)); comments and malformed lines are skipped."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        key, sep, value = raw.strip().partition("=")
        if not sep or not _KEY.fullmatch(key):
            continue
        got = _unquote(value)
        if got is not None:
            out[key] = got
    return out


def read_os_release(etc_file: str = ETC_OS_RELEASE, usr_file: str = USR_OS_RELEASE) -> tuple[dict[str, str], str]:
    """(its fields, where they were read from). Raises OSError (hostfs.PathRefused
    among them) when neither file can be read safely."""
    etc_dir, name = os.path.split(etc_file)
    links_to_usr = (os.path.relpath(usr_file, etc_dir), usr_file)
    etc = hostfs.open_dir(etc_dir)
    try:
        st = os.stat(name, dir_fd=etc, follow_symlinks=False)
        target = os.readlink(name, dir_fd=etc) if stat.S_ISLNK(st.st_mode) else None
    except FileNotFoundError:
        st, target = None, None
    finally:
        os.close(etc)
    if st is not None and target is None:
        return parse_os_release(hostfs.read_text(etc_file, OS_RELEASE_LIMIT)), etc_file
    if target is not None and target not in links_to_usr:
        raise hostfs.PathRefused(f"{etc_file} is a link to {target!r}, not to {usr_file}: not followed")
    where = f"{etc_file} -> {target}" if target else usr_file
    return parse_os_release(hostfs.read_text(usr_file, OS_RELEASE_LIMIT)), where


def systemd_version() -> str:
    from pty_acceptance.host.bus import BusError, Systemd

    try:
        bus = Systemd.connect()
    except OSError as e:
        return f"not read (no system bus: {e.strerror or e})"
    try:
        return str(bus.manager_property("Version"))
    except (OSError, BusError) as e:
        return f"not read ({e})"
    finally:
        bus.close()


def read() -> HostKind:
    try:
        fields, note = read_os_release()
    except OSError as e:
        fields, note = {}, hostfs.unread(e, ETC_OS_RELEASE)
    return HostKind(fields, note, systemd_version(), os.uname().release, platform.python_version())
