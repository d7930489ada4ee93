"""What a target host is expected to be.

The inventory is Ansible/testinfra YAML (``all: hosts: NAME: vars``) with one
host. Loading validates every key against SCHEMA; any problem is one line that
names the file and the key (InventoryError), raised before any test runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs

HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
ABS_PATH = re.compile(r"^/[^\0]*$")
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|slice|socket|target)$")
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
PACKAGE = re.compile(r"^\./[A-Za-z0-9_./-]+$")
NODE_VERSION = re.compile(r"^v\d+\.\d+\.\d+$")
URL_PATH = re.compile(r"^/[A-Za-z0-9._~/%-]*$")
PLUGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
ARTIFACTS = ("supervisor", "launcher", "client")
ENV_VALUE = re.compile(r"^[^\0\n]*$")
SESSION_ENV = ("PATH", "HOME", "TERM", "LANG")  # UNIT-6: the fixed list (TARGET-CONTRACT section 1)


class InventoryError(AcceptanceError):
    """One line: ``<file>: <key>: <problem>``."""


# SUITE-4: bounds on root's reads and copies of what the service user can
# write; the inventory's optional `limits:` overrides them one by one. A
# refusal names the key and its value, so that an operator raises it
# deliberately. A real host fits the defaults: the Node SEA runtime is about
# 120 MB, bun 107 MB, a Go source tree a few MB.
LIMIT_DEFAULTS = {
    "file_bytes": 32 << 20,       # one file of the pilot or code tree (manifest, go.sum, build copy)
    "tree_bytes": 256 << 20,      # the manifest's files together; the build's source copy, each
    "tree_entries": 50_000,       # entries walked for the manifest; copied for a build, each
    "runtime_bytes": 512 << 20,   # the candidate's runtime binary (RUNTIME-1)
    "artifact_bytes": 256 << 20,  # an installed binary, a build's output
}


# Leaves are (python type, regex or None). Dicts are nested schemas; "*" in a
# schema means any key, each value checked against the schema under "*".
def _s(t, rx=None):
    return (t, rx)


class ListOf:
    """A list leaf: every element is checked against (type, regex)."""

    def __init__(self, t, rx=None, min_len=1):
        self.leaf, self.min_len = (t, rx), min_len


_BINARY = {"path": _s(str, ABS_PATH), "sha256": _s(str, HEX64), "package": _s(str, PACKAGE)}
SCHEMA: dict[str, Any] = {
    "ansible_connection": _s(str),
    "ansible_host": _s(str),
    "ansible_python_interpreter": _s(str, ABS_PATH),
    "service_user": _s(str, NAME),
    "service_group": _s(str, NAME),
    "pilot_root": _s(str, ABS_PATH),
    "code_root": _s(str, ABS_PATH),
    "revision": _s(str, HEX40),
    "source_manifest_sha256": _s(str, HEX64),
    "binaries": {name: _BINARY for name in ARTIFACTS},
    "build": {
        "source_dir": _s(str, ABS_PATH),
        "go": _s(str, ABS_PATH),
        "user": _s(str, NAME),
        "go_version": _s(str, re.compile(r"^go\d+\.\d+(\.\d+)?$")),
        "env": {"*": _s(str)},
    },
    "units": {
        "supervisor": _s(str, UNIT_NAME),
        "slice": _s(str, UNIT_NAME),
        "peer": _s(str, UNIT_NAME),
        "candidate_file": _s(str, ABS_PATH),
    },
    "socket": _s(str, ABS_PATH),
    "marker": _s(str, ABS_PATH),
    "ports": {"production": _s(int), "candidate": _s(int)},
    "unit_properties": {"supervisor": {"*": _s(str)}, "slice": {"*": _s(str)}},
    # SCOPE-2, CUT-4: the supervisor unit's one ExecStart= (program and argv, as
    # systemd's D-Bus ExecStart reports them); the program is binaries.supervisor.path
    "supervisor_exec": {"path": _s(str, ABS_PATH), "argv": ListOf(str)},
    # RUNTIME-1: the candidate runtime (the process listening on ports.candidate)
    "runtime": {
        "binary": _s(str, ABS_PATH),
        "sha256": _s(str, HEX64),          # the exact SEA build (RUNTIME-1), required
        "node_version": _s(str, NODE_VERSION),
    },
    # CUT-1..3: what the preflight reads over loopback HTTP and from server.env
    "cutover": {
        "production_health": _s(str, URL_PATH),
        "candidate_health": _s(str, URL_PATH),
        "candidate_ui": ListOf(str, URL_PATH),
        "plugins": ListOf(str, PLUGIN_NAME),
        "server_env": _s(str, ABS_PATH),
        "directory": _s(str, ABS_PATH),    # location[directory] of every /api/* request
    },
    # PLUGIN-1: the review's smoke harness and the bun that runs it (TARGET-CONTRACT 9);
    # {helper} and {workdir} in the arguments are filled in by the suite
    "plugin": {
        "bun": _s(str, ABS_PATH),
        "bun_sha256": _s(str, HEX64),      # the reviewed bun (from the review), required
        "harness": _s(str, ABS_PATH),
        "harness_sha256": _s(str, HEX64),  # the reviewed harness (from the review), required
        "plugin_dir": _s(str, ABS_PATH),   # the auto-discovered plugin directory
        "args": ListOf(str, min_len=0),        # the ten runs
        "fresh_args": ListOf(str, min_len=0),  # the run against the fresh helper
        "deadline_s": _s(int),             # optional: each run's bound (default 120)
    },
    # ISO-2: the pilot's declared session behaviour (recorded, compared)
    "isolation": {
        "session_workspace_writable": _s(bool),
        "session_network": _s(bool),
    },
    # UNIT-6: the value of each variable of the fixed environment a session's command gets
    "session_environment": {name: _s(str, ENV_VALUE) for name in SESSION_ENV},
    # SUITE-4 (optional): bounds on reads and copies of user-writable files (LIMIT_DEFAULTS)
    "limits": {key: _s(int) for key in LIMIT_DEFAULTS},
}
REQUIRED = {
    "service_user", "service_group", "pilot_root", "code_root", "revision",
    "source_manifest_sha256", "binaries", "build", "units", "socket", "marker",
    "ports", "binaries.supervisor", "binaries.launcher", "binaries.client",
    "build.source_dir", "build.go", "build.user", "units.supervisor",
    "units.slice", "units.peer", "units.candidate_file",
    "ports.production", "ports.candidate",
    "runtime", "runtime.binary", "runtime.node_version", "runtime.sha256",
    "supervisor_exec", "supervisor_exec.path", "supervisor_exec.argv",
    "cutover", "cutover.production_health", "cutover.candidate_health",
    "cutover.candidate_ui", "cutover.plugins", "cutover.server_env", "cutover.directory",
    "isolation", "isolation.session_workspace_writable", "isolation.session_network",
    "plugin", "plugin.bun", "plugin.harness", "plugin.plugin_dir", "plugin.args", "plugin.fresh_args",
    "plugin.bun_sha256", "plugin.harness_sha256",
    "session_environment",
} | {f"session_environment.{name}" for name in SESSION_ENV} | {f"binaries.{a}.{k}" for a in ARTIFACTS for k in _BINARY}


@dataclass(frozen=True)
class Binary:
    role: str
    path: str
    sha256: str
    package: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Inventory:
    file: str
    host: str
    vars: dict

    def __getattr__(self, key):  # only called for keys not set as attributes
        try:
            return self.vars[key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def binaries_list(self) -> list[Binary]:
        b = self.vars["binaries"]
        return [Binary(r, b[r]["path"], b[r]["sha256"], b[r]["package"]) for r in ARTIFACTS]

    @property
    def unit_properties(self) -> dict:
        return self.vars.get("unit_properties", {})

    def limit(self, key: str) -> hostfs.Limit:
        """A bound of `limits:` (LIMIT_DEFAULTS where the inventory sets none),
        named by its key for the message that refuses a file over it."""
        value = self.vars.get("limits", {}).get(key, LIMIT_DEFAULTS[key])
        return hostfs.Limit(value, f"limits.{key}", "entries" if key.endswith("_entries") else "bytes")

    def tree_bounds(self) -> hostfs.TreeBounds:
        return hostfs.TreeBounds(self.limit("file_bytes"), self.limit("tree_bytes"),
                                 self.limit("tree_entries"))


def _check(file: str, key: str, value: Any, schema: Any, problems: list[str]) -> None:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            problems.append(f"{file}: {key}: expected a mapping, got {type(value).__name__}")
            return
        for k, v in value.items():
            sub = f"{key}.{k}"
            if not isinstance(k, str):
                problems.append(f"{file}: {sub}: keys must be strings")
            elif k in schema:
                _check(file, sub, v, schema[k], problems)
            elif "*" in schema:
                _check(file, sub, v, schema["*"], problems)
            else:
                problems.append(f"{file}: {sub}: unknown key")
        return
    if isinstance(schema, ListOf):
        if not isinstance(value, list):
            problems.append(f"{file}: {key}: expected a list, got {type(value).__name__}")
        elif len(value) < schema.min_len:
            problems.append(f"{file}: {key}: expected at least {schema.min_len} entries")
        else:
            for i, item in enumerate(value):
                _check(file, f"{key}[{i}]", item, schema.leaf, problems)
        return
    typ, rx = schema
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        problems.append(f"{file}: {key}: expected {typ.__name__}, got {type(value).__name__} {value!r}")
    elif rx is not None and not rx.match(value):
        problems.append(f"{file}: {key}: malformed value {value!r} (must match {rx.pattern})")


_ABSENT = object()


def value_at(vars_: dict, dotted: str, default: Any = None) -> Any:
    """The value at a dotted key ("plugin.bun"), `default` when it is not there."""
    node: Any = vars_
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _present(vars_: dict, dotted: str) -> bool:
    return value_at(vars_, dotted, _ABSENT) is not _ABSENT


# Why a key matters, appended to a problem with it: the operator fills these in.
WHY = {
    "runtime.sha256": " (RUNTIME-1: the SHA-256 of the exact Node 26.4 SEA runtime.binary the "
                      "review approved; no pin, no runtime gate)",
    "plugin.bun_sha256": " (PLUGIN-1: the SHA-256 of the bun the review ran the smoke harness "
                         "under, from the review's record, never from the live host)",
    "plugin.harness_sha256": " (PLUGIN-1: the SHA-256 of the smoke harness the review ran, from "
                             "the review's record, never from the live host)",
}


def _why(problem: str, prefix: str) -> str:
    return next((why for key, why in WHY.items() if f"{prefix}.{key}:" in problem), "")


def marker_named(path: str | Path) -> str | None:
    """The marker path the inventory file names, read whether or not the rest
    of the file validates: a run removes that marker before anything else
    (MARK-4). None when the file names none."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        (vars_,) = data["all"]["hosts"].values()
        named = vars_["marker"]
    except (OSError, UnicodeError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return None
    return named if isinstance(named, str) and ABS_PATH.match(named) else None


def load(path: str | Path) -> Inventory:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InventoryError(f"{file}: (file): no such file") from None
    except OSError as e:
        raise InventoryError(f"{file}: (file): cannot read: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InventoryError(f"{file}: (yaml): {' '.join(str(e).split())}") from None
    if not isinstance(data, dict) or set(data) != {"all"}:
        raise InventoryError(f"{file}: (top): expected exactly one key 'all'")
    group = data["all"]
    if not isinstance(group, dict) or not isinstance(group.get("hosts"), dict):
        raise InventoryError(f"{file}: all.hosts: expected a mapping of hosts")
    extra = set(group) - {"hosts"}
    if extra:
        raise InventoryError(f"{file}: all.{sorted(extra)[0]}: unknown key")
    hosts = group["hosts"]
    if len(hosts) != 1:
        raise InventoryError(f"{file}: all.hosts: expected exactly one host, found {len(hosts)}")
    (host, vars_), = hosts.items()
    prefix = f"all.hosts.{host}"
    if not isinstance(vars_, dict):
        raise InventoryError(f"{file}: {prefix}: expected a mapping of host vars")
    problems: list[str] = []
    _check(file, prefix, vars_, SCHEMA, problems)
    if problems:
        raise InventoryError(problems[0] + _why(problems[0], prefix))
    for dotted in sorted(REQUIRED):
        if not _present(vars_, dotted):
            msg = f"{file}: {prefix}.{dotted}: missing required key"
            raise InventoryError(msg + _why(msg, prefix))
    for key, value in vars_.get("limits", {}).items():
        if value <= 0:
            raise InventoryError(f"{file}: {prefix}.limits.{key}: {value} is not a positive bound")
    paths = [vars_["binaries"][role]["path"] for role in ARTIFACTS]
    if len(set(paths)) != len(paths):
        raise InventoryError(f"{file}: {prefix}.binaries: two artifacts share one path")
    if vars_["supervisor_exec"]["path"] != paths[0]:
        raise InventoryError(f"{file}: {prefix}.supervisor_exec.path: "
                             f"{vars_['supervisor_exec']['path']!r} is not binaries.supervisor.path "
                             f"{paths[0]!r} (SCOPE-2: the supervisor unit runs the installed binary)")
    return Inventory(file=file, host=str(host), vars=vars_)
