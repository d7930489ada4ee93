"""Units as systemd reports them.

Properties come from `systemctl show --all` (testinfra's systemd_properties
drops empty values, which makes "set empty" and "unset" look alike), so
unit properties are read here, never through Testinfra's `host.service`.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass, field
from typing import Mapping

from pty_acceptance.errors import Unreadable
from pty_acceptance.host import programs

STRICT_SESSION = re.compile(r"^opencode-pty-[0-9a-f]{32}\.service$")
ANY_SESSION = re.compile(r"^opencode-pty-.*\.service$")  # any session unit, strict name or not
SESSION_GLOB = "opencode-pty-*.service"  # the same, as systemd's pattern
EXEC_KEYS = ("ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost",
             "ExecReload", "ExecStop", "ExecStopPost")
_EXEC_PATH = re.compile(r"(?:^|[{;]\s*)path=([^ ;]+)")
# systemd 257 widened three boolean settings the contract's hardening names, and
# `systemctl show` says the whole setting beside the boolean as <Name>Ex (systemd
# 252 shows no such property). The boolean says "yes" for every setting but "no"
# (PrivateTmp=yes for PrivateTmp=disconnected too), so a value of the boolean is
# read against its Ex form: what each value of the boolean means there.
WIDENED = {
    "PrivateTmp": {"yes": "connected", "no": "no"},  # 257: also disconnected
    "ProtectControlGroups": {"yes": "yes", "no": "no"},  # 257: also private, strict
    "PrivateUsers": {"yes": "self", "no": "no"},  # 257: also identity, full
}


def setting(props: Mapping[str, str], key: str) -> str | None:
    """`key` as `systemctl show` says it, read in full: where this systemd also
    shows `key`Ex (257 and later) and it is not what the boolean's value means
    (WIDENED), "<value> (<key>Ex=<the setting>)", which matches no pin of the
    boolean."""
    value = props.get(key)
    ex = props.get(key + "Ex")
    if value is None or ex is None or key not in WIDENED or WIDENED[key].get(value) == ex:
        return value
    return f"{value} ({key}Ex={ex})"


def widened_settings(props: Mapping[str, str]) -> dict[str, str]:
    """The <Name>Ex values this systemd shows for WIDENED ({}: it shows none, 252)."""
    return {k + "Ex": props[k + "Ex"] for k in WIDENED if k + "Ex" in props}


class SystemdError(Unreadable):
    pass


def _systemctl(*args: str, timeout: float = 30) -> str:
    argv = [programs.path("systemctl"), "--no-pager", *args]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False,
                              env=programs.ROOT_ENV, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SystemdError("systemctl is not installed on this host") from None
    except subprocess.TimeoutExpired:
        raise SystemdError(f"{' '.join(argv)} did not answer within {timeout} s") from None
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        raise SystemdError(f"{' '.join(argv)} exited {done.returncode}: {err}")
    return done.stdout.decode("utf-8", "replace")


@dataclass
class Unit:
    """One unit's properties, every value kept (Exec* keys may repeat)."""

    name: str
    values: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def show(cls, name: str) -> "Unit":
        out = _systemctl("show", "--all", "--", name)
        unit = cls(name)
        for line in out.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                unit.values.setdefault(key, []).append(value)
        if not unit.values:
            raise SystemdError(f"systemctl show {name} printed no properties")
        return unit

    def get(self, key: str) -> str | None:
        vals = self.values.get(key)
        return None if vals is None else vals[-1]

    def last(self) -> dict[str, str]:
        """Every property's last value."""
        return {k: v[-1] for k, v in self.values.items()}

    def setting(self, key: str) -> str | None:
        """`key` read in full (setting())."""
        return setting(self.last(), key)

    def words(self, key: str) -> list[str]:
        return (self.get(key) or "").split()

    def exec_paths(self) -> dict[str, list[str]]:
        """Every program path an Exec*= property names."""
        out: dict[str, list[str]] = {}
        for key in EXEC_KEYS:
            for value in self.values.get(key, []) + self.values.get(key + "Ex", []):
                for p in _EXEC_PATH.findall(value):
                    out.setdefault(key, []).append(p)
        return out

    def files(self) -> list[str]:
        """The unit file and its drop-ins, as systemd loaded them."""
        found = [self.get("FragmentPath") or "", self.get("SourcePath") or ""]
        found += self.words("DropInPaths")
        return [p for p in dict.fromkeys(found) if p]


# How an expected property value is compared with what `systemctl show` prints.
EXACT, WORDS, SYSCALLS = "exact", "words", "syscalls"


def value_problem(key: str, want: str, have: str | None, how: str,
                  syscalls: set[str] | None = None) -> str | None:
    """Why `have` is not `want` (None when it is): EXACT the same text; WORDS the
    same words in any order, each as often; SYSCALLS an allow list of exactly
    `syscalls` (the names `want` expands to on this host)."""
    if have is None:
        return f"{key} is not shown"
    if how == WORDS:
        ok = sorted(have.split()) == sorted(want.split())
    elif how == SYSCALLS:
        if syscalls is None:
            raise ValueError(f"{key}: no expansion of {want!r} to compare with")
        shown = set(have.split())
        if have.startswith("~") or shown != syscalls:
            beyond, lacking = sorted(shown - syscalls), sorted(syscalls - shown)
            return (f"{key}= is not the allow list {want!r} expands to: "
                    + ("a deny list; " if have.startswith("~") else "")
                    + f"{len(beyond)} beyond it {beyond[:12]}, {len(lacking)} lacking {lacking[:12]}")
        return None
    else:
        ok = have == want
    return None if ok else f"{key}={have!r}, expected {want!r}"


def show_or_fail(name: str, requirement: str) -> Unit:
    """Unit.show for a test: a host that cannot answer fails the requirement."""
    try:
        return Unit.show(name)
    except SystemdError as e:
        raise Unreadable(f"cannot read {name} from systemd: {e}", requirements=(requirement,)) from None


def units_matching(pattern: str) -> list[str]:
    """Names of every loaded unit (any state) matching `pattern`."""
    out = _systemctl("list-units", "--all", "--full", "--plain", "--no-legend", "--", pattern)
    names = []
    for line in out.splitlines():
        parts = line.split()
        if parts:
            name = parts[0].lstrip("●*").strip()
            if fnmatch.fnmatchcase(name, pattern):
                names.append(name)
    return sorted(set(names))
