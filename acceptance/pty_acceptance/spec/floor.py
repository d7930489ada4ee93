"""The contract's floor: what an inventory may make stricter, never weaker (SUITE-3).

An inventory states what the suite compares the live host with. A value
below the floor would make a check weaker than the review's contract (a
session unit with capabilities, a success pattern any output matches,
another supervisor unit), so `inventory.load` refuses it, naming the key;
a stricter value loads. The floor is the package's, never the inventory's:

- What the seed fixes (the review's own files name it): the three installed
  binaries `/usr/local/libexec/opencode-pty-{supervisor,launcher,client}`
  and the marker `/etc/opencode/pty-supervisor-verified` (the seed's
  verify-readiness: MARKER= and the records MARK-2 names), the supervisor
  unit `opencode-pty-supervisor.service` and the slice `opencode-pty.slice`
  (the reviewed unit files, hashed into SCOPE-1's manifest), the peer
  `opencode-v2.service` (the candidate unit the seed's CUTOVER installs
  under that name), production `opencode.service` (the unit the seed's
  CUTOVER stops and its rollback starts) and the session unit names `opencode-pty-<32 hex>.service`
  (UNIT-1; not a key: `host/systemd.STRICT_SESSION`). The four paths are
  the seed's, all under one root: `/` on a target host; the suite's own
  tests lay a fake target out under a directory, as `verify-marker --root`
  reads one. A marker under any other root is never the one the seed's
  verifier reads, and `fleet-summary` never counts it READY
  (report/fleet.py).
- What TARGET-CONTRACT chose and an inventory may override (the seed names
  none of it): the service user and group, the pilot and code trees, the
  ports, and the supervisor socket, which must lie in a directory of its
  own under `/run` (the supervisor's `RuntimeDirectory=` when the inventory
  states it) that every session unit makes inaccessible.
- The session unit's hardening (TARGET-CONTRACT section 1, "Session unit
  properties"): each property the contract's value, or a stricter one where
  systemd has one (`DevicePolicy=strict`, `ProtectProc=noaccess`,
  `ProtectSystem=strict`, fewer address families, fewer system calls, more
  inaccessible paths, ...). `SystemCallFilter=` is an allow list that never
  names a group `@system-service` leaves out; the run checks on the host that
  what it expands to lies within `@system-service` (test_session_units.py).
- PLUGIN-1's success patterns: neither matches what a run that did nothing
  leaves (an empty line, any one-letter line, a crash message; an empty
  working directory's usual names).
- server.env's variables (CUT-3, CUT-2, RUNTIME-2): `cutover.environment`
  lists what the file may set; a name that changes what the runtime or the
  dynamic loader loads (`LOADS_CODE`, below) is never allowed, even listed.

Each check takes plain values (the inventory's, already of their schema
types) and says what is below the floor, one `Below` per key.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pty_acceptance.host.systemd import STRICT_SESSION

# ---------------------------------------------------------------- the seed's names and paths

BINARIES = {  # role -> path (seed: verify-readiness's records, MARK-2), in the marker's order
    "supervisor": "/usr/local/libexec/opencode-pty-supervisor",
    "launcher": "/usr/local/libexec/opencode-pty-launcher",
    "client": "/usr/local/libexec/opencode-pty-client",
}
MARKER = "/etc/opencode/pty-supervisor-verified"  # seed: verify-readiness's MARKER=
UNITS = {  # units.<role> (seed: the reviewed unit files; CUTOVER's candidate unit)
    "supervisor": "opencode-pty-supervisor.service",
    "slice": "opencode-pty.slice",
    "peer": "opencode-v2.service",
    "production": "opencode.service",  # the seed's CUTOVER: `systemctl stop opencode.service`
}
SESSION_UNIT = STRICT_SESSION  # UNIT-1: the package's, not a key of the inventory

# TARGET-CONTRACT's default socket (an inventory may name another under /run)
SOCKET = "/run/opencode-pty/supervisor.sock"
# what every session unit makes inaccessible besides the socket's directory
# (TARGET-CONTRACT section 1: the Docker socket, the system and the user buses)
INACCESSIBLE = ("/run/docker.sock", "/run/dbus", "/run/user")


@dataclass(frozen=True)
class Below:
    """One inventory value below the floor: its dotted key (below the host) and why."""
    key: str
    problem: str


def root_of(path: str, seed: str) -> str | None:
    """The root `path` puts `seed` under ("" for /), or None when it is not the seed's path."""
    if path == seed:
        return ""
    root = path[:-len(seed)] if path.endswith(seed) else ""
    if root and root.startswith("/") and posixpath.normpath(root) == root and root != "/":
        return root
    return None


def names_problems(binaries: Mapping[str, str], marker: str, units: Mapping[str, str]) -> list[Below]:
    """The seed's paths (one root for the four) and unit names."""
    out = []
    roots = {}
    for role, seed in [*BINARIES.items(), ("marker", MARKER)]:
        key = "marker" if role == "marker" else f"binaries.{role}.path"
        path = marker if role == "marker" else binaries.get(role)
        if not isinstance(path, str):
            continue
        root = root_of(path, seed)
        if root is None:
            out.append(Below(key, f"{shown(path)} is not the seed's {seed} (MARK-2: the marker and its records name "
                                  "the seed's paths)"))
        else:
            roots[key] = root
    if len(set(roots.values())) > 1:
        first = next(iter(roots))
        for key, root in roots.items():
            if root != roots[first]:
                out.append(Below(key, f"lies under {shown(root or '/')}, {first} under "
                                      f"{shown(roots[first] or '/')}: the seed's paths lie under one root "
                                      "(/ on a target host)"))
    for role, seed in UNITS.items():
        name = units.get(role)
        if isinstance(name, str) and name != seed:
            out.append(Below(f"units.{role}", f"{shown(name)} is not the seed's {seed}"))
    return out


def socket_problems(socket: str, runtime_directory: str | None) -> list[Below]:
    """The socket in a directory of its own under /run (the supervisor's
    RuntimeDirectory= when stated), none of the paths sessions never reach."""
    norm = posixpath.normpath(socket)
    parent = posixpath.dirname(norm)
    if norm != socket or not parent.startswith("/run/"):
        return [Below("socket", f"{shown(socket)} is not in a directory of its own under /run (TARGET-CONTRACT "
                                "section 1: the supervisor's runtime directory, which session units cannot reach)")]
    if any(_overlaps(norm, p) for p in INACCESSIBLE):
        return [Below("socket", f"{shown(socket)} lies in a place every session unit makes inaccessible for another "
                                "reason (the Docker socket, the system or user bus)")]
    if runtime_directory is not None:
        dirs = ["/run/" + d for d in runtime_directory.split()]
        if parent not in dirs:
            return [Below("socket", f"{shown(socket)} is not in the supervisor's RuntimeDirectory= "
                                    f"({' '.join(dirs) or 'none'}, unit_properties.supervisor.RuntimeDirectory)")]
    return []


def _overlaps(a: str, b: str) -> bool:
    """One of the two paths is the other or lies below it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


# ---------------------------------------------------------------- the session unit's hardening

# (requirement, the contract's value, the values no weaker than it)
EXACTLY = {
    "Type": ("UNIT-1", "exec"),
    "SupplementaryGroups": ("UNIT-2", ""),
    "CapabilityBoundingSet": ("UNIT-3", ""),
    "AmbientCapabilities": ("UNIT-3", ""),
    "NoNewPrivileges": ("UNIT-3", "yes"),
    "RestrictSUIDSGID": ("UNIT-3", "yes"),
    "PrivateDevices": ("UNIT-4", "yes"),
    "Delegate": ("UNIT-4", "no"),
    "ProcSubset": ("UNIT-5", "pid"),
    "RestrictNamespaces": ("UNIT-5", "yes"),
    "SystemCallArchitectures": ("UNIT-5", "native"),
    "LockPersonality": ("UNIT-5", "yes"),
    "RestrictRealtime": ("UNIT-5", "yes"),
    "ProtectKernelTunables": ("UNIT-5", "yes"),
    "ProtectKernelModules": ("UNIT-5", "yes"),
    "ProtectKernelLogs": ("UNIT-5", "yes"),
    "BindPaths": ("UNIT-7", ""),
    "KillMode": ("CGROUP-1", "control-group"),
    # a stop is TERM, then KILL (a blind red team's ninth pass: only the stop test saw a stop
    # that was SIGKILL alone, and a watcher of the user's could make that test see a grace)
    "KillSignal": ("CONC-3", "15"),
    "FinalKillSignal": ("CONC-3", "9"),
    "SendSIGKILL": ("CONC-3", "yes"),
    "CollectMode": ("CONC-3", "inactive-or-failed"),
}
AT_LEAST = {  # the contract's value first, then the stricter ones systemd has
    "DevicePolicy": ("UNIT-4", ("closed", "strict")),
    "ProtectControlGroups": ("UNIT-4", ("yes", "strict")),  # "private" is writable: weaker
    "ProtectProc": ("UNIT-5", ("invisible", "noaccess")),
    "ProtectSystem": ("UNIT-7", ("full", "strict")),
    "PrivateTmp": ("UNIT-7", ("yes", "disconnected")),
}
ADDRESS_FAMILIES = ("AF_UNIX", "AF_INET", "AF_INET6")
SYSCALL_GROUP = "@system-service"
# groups systemd.exec(5) names as left out of @system-service (and @known: every call)
WIDER_GROUPS = frozenset({"@clock", "@cpu-emulation", "@debug", "@known", "@module", "@mount", "@obsolete",
                          "@privileged", "@raw-io", "@reboot", "@swap"})
SYSCALL_WORD = re.compile(r"^@?[a-z0-9_-]+$")
LOADER_VARIABLE = re.compile(r"^LD_")  # what the dynamic loader reads (refused_variable's kind)


SHOWN = 80  # characters of a value a problem shows


def shown(value: str) -> str:
    """A value in a problem: its repr, at most SHOWN characters (the caller escapes it)."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + f"... ({len(text)} characters)"


def _words(value: str) -> list[str]:
    return value.split()


def _floor(rid: str, name: str, value: str, contract: str) -> Below:
    return Below(f"unit_properties.session.{name}",
                 f"{shown(value)} is below the contract's floor ({rid}: TARGET-CONTRACT section 1 sets {contract})")


def session_problems(props: Mapping[str, str], socket: str, environment: Mapping[str, str],
                     stop_bounds: tuple[int, int]) -> list[Below]:
    """unit_properties.session against the contract's session unit.
    `environment`: session_environment (UNIT-6's four values); `stop_bounds`:
    session_stop's (term_grace_s, timeout_s)."""
    out = []
    for name, (rid, want) in EXACTLY.items():
        value = props.get(name)
        if isinstance(value, str) and _words(value) != _words(want):
            out.append(_floor(rid, name, value, f"{name}={want}" if want else f"{name}= empty"))
    for name, (rid, allowed) in AT_LEAST.items():
        value = props.get(name)
        if isinstance(value, str) and value not in allowed:
            out.append(_floor(rid, name, value, f"{name}={allowed[0]}, or the stricter {' or '.join(allowed[1:])}"))
    checks = (("RestrictAddressFamilies", _address_families), ("SystemCallFilter", _syscall_filter),
              ("InaccessiblePaths", lambda v: _inaccessible(v, socket)),
              ("BindReadOnlyPaths", lambda v: _read_only_binds(v, socket)),
              ("Environment", lambda v: _environment(v, environment)),
              ("TimeoutStopUSec", lambda v: _stop_timeout(v, stop_bounds)))
    for name, check in checks:
        value = props.get(name)
        if isinstance(value, str) and (problem := check(value)):
            out.append(Below(f"unit_properties.session.{name}",
                             f"{shown(value)} is below the contract's floor: {problem}"))
    return out


def _address_families(value: str) -> str | None:
    words = _words(value)
    if words == ["none"] or words and set(words) <= set(ADDRESS_FAMILIES) and len(set(words)) == len(words):
        return None
    return (f"UNIT-5: an allow list of at most {' '.join(ADDRESS_FAMILIES)}, or none (an empty list, or a "
            "~deny list, allows every family)")


def _syscall_filter(value: str) -> str | None:
    words = _words(value)
    if not words or any(w.startswith("~") for w in words):
        return f"UNIT-5: an allow list within {SYSCALL_GROUP} (empty, or a ~deny list, allows every call)"
    if bad := [w for w in words if not SYSCALL_WORD.match(w)]:
        return f"UNIT-5: {shown(bad[0])} is neither a system call nor a group"
    if wider := sorted(set(words) & WIDER_GROUPS):
        return f"UNIT-5: {' '.join(wider)} lies outside {SYSCALL_GROUP}"
    return None


def must_be_inaccessible(socket: str) -> tuple[str, ...]:
    """What every session unit's InaccessiblePaths= names (a leading - allowed)."""
    return (posixpath.dirname(posixpath.normpath(socket)), *INACCESSIBLE)


def _inaccessible(value: str, socket: str) -> str | None:
    named = {w.lstrip("-") for w in _words(value)}
    lacking = [p for p in must_be_inaccessible(socket) if p not in named]
    if lacking:
        return (f"UNIT-7: it does not name {' '.join(lacking)} (the supervisor socket's directory, the Docker "
                "socket, the system and the user bus: more paths are allowed)")
    return None


def _read_only_binds(value: str, socket: str) -> str | None:
    for word in _words(value):
        parts = word.lstrip("-").split(":")
        paths = parts[:2] if len(parts) > 1 else parts
        for p in paths:
            norm = posixpath.normpath(p) if p.startswith("/") else ""
            if not norm.startswith("/run/") or any(_overlaps(norm, q) for q in must_be_inaccessible(socket)):
                return (f"UNIT-7: {shown(word)}: only what a command needs under /run, never one of the paths "
                        "sessions must not reach (a socket bound read-only still connects)")
    return None


def _environment(value: str, environment: Mapping[str, str]) -> str | None:
    words = _words(value)
    names = [w.split("=", 1)[0] for w in words]
    for name, want in environment.items():
        if names.count(name) != 1:
            return f"UNIT-6: {name} set {names.count(name)} times, expected once (session_environment)"
        if not re.search(r"\s", want) and f"{name}={want}" not in words:
            return f"UNIT-6: {name} is not session_environment's {shown(want)}"
    if loader := [n for n in names if LOADER_VARIABLE.match(n)]:
        return f"UNIT-6: {loader[0]} changes what the dynamic loader loads"
    return None


_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h)\b")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}


def timespan_s(value: str) -> float | None:
    """A systemd time span as `systemctl show` prints it ("5s", "1min 30s",
    "500ms"), in seconds; None for infinity or what does not parse."""
    text = value.strip()
    if not text or text == "infinity" or _SPAN.sub("", text).strip():
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in _SPAN.findall(text))


def _stop_timeout(value: str, bounds: tuple[int, int]) -> str | None:
    seconds = timespan_s(value)
    grace, most = bounds
    if seconds is None or not grace <= seconds <= most:
        return (f"CONC-3: a stop escalates to SIGKILL after a finite time between session_stop.term_grace_s "
                f"({grace} s) and session_stop.timeout_s ({most} s)")
    return None


# ---------------------------------------------------------------- PLUGIN-1's success report

# what a harness run that did nothing, or crashed, leaves as its last line
NOT_A_SUCCESS_LINE = ("", " ", "x", "0", "FAIL", "error", "Error: harness crashed", "Killed",
                      "Segmentation fault (core dumped)", "error: Module not found \"pty-plugin-smoke.ts\"")
# names an empty or a crashed working directory holds, and what bun reads
NOT_A_RESULT_FILE = ("", "x", "a", "a.json", "core", "nohup.out", ".env", "bunfig.toml", "node_modules",
                     "package.json")


def pattern_problems(last_line: str, result_file: str) -> list[Below]:
    """PLUGIN-1: each success pattern must tell the harness's own report
    apart from what any run leaves (re.search, as smoke.py applies them)."""
    out = []
    for key, pattern, probes in (("plugin.success.last_line", last_line, NOT_A_SUCCESS_LINE),
                                 ("plugin.success.result_file", result_file, NOT_A_RESULT_FILE)):
        try:
            rx = re.compile(pattern)
        except re.error:
            continue  # the schema's own check names it
        if (hit := next((p for p in probes if rx.search(p)), None)) is not None:
            out.append(Below(key, f"{shown(pattern)} matches {hit!r}, which any run could leave: below the contract's "
                                  "floor (PLUGIN-1: a pass needs the harness's own success report)"))
    return out


# ---------------------------------------------------------------- server.env's variables

PASSWORD_VARIABLE = "OPENCODE_PASSWORD"  # CUT-3: the one variable server.env must set
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what systemd accepts as a name

# The variables server.env may never set, whatever cutover.environment lists:
# the file is the service user's, and RUNTIME-2's runtime (its only
# environment) and the candidate unit (EnvironmentFile=) read it, so a name
# here would run the user's code inside the runtime the suite judges, or
# change what that runtime is. (prefix or exact name, why)
LOADS_CODE: tuple[tuple[str, str], ...] = (
    # Node reads every NODE_* it knows, and each release adds some: a prefix is
    # the floor that holds across releases. NODE_OPTIONS (--require, --import,
    # --loader: the user's module before the runtime's own), NODE_PATH (where
    # require() looks), NODE_REPL_EXTERNAL_MODULE (a module instead of the REPL),
    # NODE_COMPILE_CACHE (compiled code read back), NODE_ICU_DATA (data parsed by
    # native code), NODE_EXTRA_CA_CERTS and NODE_TLS_REJECT_UNAUTHORIZED (whom
    # the runtime trusts: certificates are not code, but a certificate authority
    # of the user's lets the user serve what the runtime fetches over TLS, and
    # opencode installs plugins it fetches: code by another road),
    # NODE_V8_COVERAGE (writes where the user says; no pilot needs it). A
    # single-executable application honours NODE_OPTIONS unless built otherwise.
    ("NODE_", "Node reads it (NODE_OPTIONS --require, NODE_PATH, NODE_EXTRA_CA_CERTS ...)"),
    # glibc's dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, LD_BIND_NOW ...
    ("LD_", "the dynamic loader reads it (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT ...)"),
    # glibc: GLIBC_TUNABLES is parsed by the loader itself (CVE-2023-4911),
    # GCONV_PATH names the iconv modules glibc dlopens, MALLOC_* the allocator's
    # debugging (MALLOC_CHECK_ with libc_malloc_debug), LOCPATH and NLSPATH data
    # glibc parses for the process.
    ("GLIBC_", "glibc's loader reads it (GLIBC_TUNABLES)"),
    ("GCONV_", "glibc loads iconv modules from it (GCONV_PATH)"),
    ("MALLOC_", "glibc's allocator reads it"),
    ("LOCPATH", "glibc loads locale data from it"),
    ("NLSPATH", "glibc loads message catalogues from it"),
    # OpenSSL (Node's TLS): OPENSSL_CONF can load engines and providers (shared
    # objects), OPENSSL_MODULES and OPENSSL_ENGINES name where from;
    # SSL_CERT_FILE and SSL_CERT_DIR are trust anchors (as NODE_EXTRA_CA_CERTS).
    ("OPENSSL_", "OpenSSL loads configuration, engines or providers from it"),
    ("SSL_CERT_", "OpenSSL's trust anchors (whom the runtime trusts over TLS)"),
    # bun (the pilot's plugins and harness run under it; a runtime built on it
    # would read them): BUN_OPTIONS (--preload), BUN_CONFIG_*, BUN_INSTALL ...
    ("BUN_", "bun reads it (BUN_OPTIONS --preload, BUN_CONFIG_* ...)"),
    # libuv, under Node: UV_USE_IO_URING switches its I/O to io_uring, which
    # RUNTIME-2's trace cannot follow; UV_THREADPOOL_SIZE its threads. Not code,
    # but it changes what the runtime does beneath what the suite traces.
    ("UV_", "libuv reads it (UV_USE_IO_URING: I/O the trace cannot follow)"),
)
# Left to the inventory (each one listed only when the review did): PATH (which
# programs the runtime's children are: they run as the service user anyway, and
# RUNTIME-2 judges the helper by its absolute path), HOME and XDG_* (where
# opencode reads its configuration and plugins: the pilot's own layout may set
# them; CUT-2 and PLUGIN-1 judge the plugins), OPENCODE_* (opencode's own
# settings), TZ, LANG and LC_* (data, never code).


def refused_variable(name: str) -> str | None:
    """Why the floor never lets an environment of the runtime hold `name`
    (None: the inventory decides)."""
    for prefix, why in LOADS_CODE:
        if name.startswith(prefix):
            return why
    return None


def environment_problems(names: tuple[str, ...] | list[str]) -> list[Below]:
    """cutover.environment: names systemd accepts, OPENCODE_PASSWORD among them,
    none the floor refuses (every one named)."""
    out = []
    for name in names:
        if not isinstance(name, str):
            continue  # the schema's to name
        if why := refused_variable(name):
            out.append(Below("cutover.environment", f"{shown(name)} changes what the runtime or the dynamic "
                                                          f"loader loads ({why}): never allowed in server.env "
                                                          "(CUT-3, RUNTIME-2)"))
    if PASSWORD_VARIABLE not in names:
        out.append(Below("cutover.environment", f"does not name {PASSWORD_VARIABLE}, which CUT-3 requires"))
    return out
