"""What a target host is expected to be.

The inventory is Ansible/testinfra YAML (``all: hosts: NAME: vars``) with one
host, read into frozen dataclasses: `Inventory` and its sections (`Units`,
`Runtime`, `Plugin`, `Limits`, ...). Their fields are the schema (issue 23):
a field's annotation is the key's YAML type (str, int, bool; a list is
``tuple[str, ...]``, a free mapping ``Mapping[str, str]``, a section a nested
dataclass), its ``Annotated`` extras the key's format (a regex), a list's least
length (`AtLeast`), why the operator fills a pin in (`Why`) and a bound that
must be positive (`POSITIVE`); a field without a default is a required key. So
a key is added in one place, and every consumer reads it as an attribute a
type checker follows (``inv.units.supervisor``), never a string look-up.

Loading validates every key against that schema; any problem is one line that
names the file and the key (``<file>: <key>: <problem>``, InventoryError),
raised before any test runs (the preflight's inventory check). A `FILL-IN`
placeholder is named as one, each of them in the one line (the requirement
each is for), so the operator fills them in from the review's record at once.

The file is read as root before anything judged it (SUITE-4): walked from /
(hostfs: a link in any component is refused, never followed; a FIFO or a
device is never opened, so it cannot block the run), at most
INVENTORY_LIMIT, and what is wrong with it is said without its bytes: YAML's
complaint and where (line, column), never the text around it, a value at
most SHOWN characters, escaped (a file that is not an inventory may be
anything, a root-only secret among them).
"""

from __future__ import annotations

import os
import re
import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import yaml

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs
from pty_acceptance.host.systemd import EXACT, SYSCALLS, WORDS
from pty_acceptance.host.terminal import escape
from pty_acceptance.spec import floor

HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
ABS_PATH = re.compile(r"^/[^\0]*$")
MARKER_NAME = "pty-supervisor-verified"
# A marker path (MARK-4): absolute, no empty, "." or ".." component, its last
# component MARKER_NAME. The suite writes a marker and removes one only there:
# `--marker /etc/shadow` or an inventory's `marker: /etc/passwd` names no marker.
MARKER_PATH = re.compile(r"^(?:/(?!\.\.?(?:/|$))[^/\0\n]+)*/" + re.escape(MARKER_NAME) + r"\Z")
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|slice|socket|target)$")
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
PACKAGE = re.compile(r"^\./[A-Za-z0-9_./-]+$")
NODE_VERSION = re.compile(r"^v\d+\.\d+\.\d+$")
GO_VERSION = re.compile(r"^go\d+\.\d+(\.\d+)?$")
URL_PATH = re.compile(r"^/[A-Za-z0-9._~/%-]*$")
PLUGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
ENV_VALUE = re.compile(r"^[^\0\n]*$")
PATTERN = re.compile(r"^(?!FILL-IN)[^\0\n]+$")  # a regular expression (compiled when loaded)


FILL_IN = "FILL-IN"  # how a shipped inventory's placeholders begin: the operator fills them in


def placeholder(value: Any) -> bool:
    """A value the operator has yet to fill in (from the review's record)."""
    return isinstance(value, str) and value.startswith(FILL_IN)


class InventoryError(AcceptanceError):
    """One line: ``<file>: <key>: <problem>``."""


INVENTORY_LIMIT = hostfs.Limit(1 << 20, "the suite's bound on an inventory file")
SHOWN = 80  # characters of a value a problem shows


def shown(value: Any) -> str:
    """A value of the file in a problem: its repr, escaped, at most SHOWN characters."""
    text = escape(repr(value))
    return text if len(text) <= SHOWN else text[:SHOWN] + f"... ({len(text)} characters)"


def read_text(path: str | Path) -> str:
    """The inventory file's text: walked from /, at most INVENTORY_LIMIT,
    UTF-8; InventoryError names what is wrong, never the content."""
    file = str(path)
    try:
        return hostfs.read_text(os.path.abspath(file), INVENTORY_LIMIT)
    except FileNotFoundError:
        raise InventoryError(f"{file}: (file): no such file") from None
    except OSError as e:
        raise InventoryError(f"{file}: (file): {hostfs.unread(e, file)}") from None


_QUOTED = re.compile("'(?!<)[^']*'|\"(?!<)[^\"]*\"")  # a quoted piece of the file ('<token>' names stay)


def yaml_problem(e: yaml.YAMLError) -> str:
    """What YAML found wrong and where, without the file's text (its snippet,
    a quoted piece of it)."""
    if isinstance(e, yaml.MarkedYAMLError):
        what = _QUOTED.sub("'...'", e.problem or e.context or "malformed")
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return escape(what)[:200] + where
    if isinstance(e, yaml.reader.ReaderError):
        return f"{e.reason} at character {e.position}"
    return f"not YAML ({type(e).__name__})"


def parse(text: str, file: str) -> Any:
    """The YAML document in `text`; InventoryError (yaml_problem) when it is not one."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InventoryError(f"{file}: (yaml): {yaml_problem(e)}") from None


# ---------------------------------------------------------------- field extras


@dataclass(frozen=True)
class AtLeast:
    """A list key's least number of entries (a list key needs one unless told)."""
    entries: int


@dataclass(frozen=True)
class Why:
    """What a key is for, appended to any problem with it: the operator fills
    these in, and the refusal says from where (RUNTIME-1, PLUGIN-1)."""
    text: str


class _Positive:
    """A bound that must be above zero (SUITE-4: a bound of 0 reads nothing)."""


POSITIVE = _Positive()

# Inventory.file and Inventory.host are set by `load`, not keys of the file.
NOT_A_KEY = types.MappingProxyType({"key": False})


def _empty() -> Mapping[str, str]:
    return types.MappingProxyType({})


# ---------------------------------------------------------------- the sections


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """One installed binary of the supervisor stack (SCOPE-1, BUILD-1..3,
    MARK-2): its path, the SHA-256 the review recorded, its Go package."""
    path: Annotated[str, ABS_PATH]
    sha256: Annotated[str, HEX64]
    package: Annotated[str, PACKAGE]

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True, kw_only=True)
class Binary(Artifact):
    """An artifact with its role (`Inventory.binaries_list`, in ARTIFACTS order)."""
    role: str


@dataclass(frozen=True, kw_only=True)
class Binaries:
    """The three artifacts, by role; their order is the marker's (MARK-2)."""
    supervisor: Artifact
    launcher: Artifact
    client: Artifact


@dataclass(frozen=True, kw_only=True)
class Build:
    """BUILD-1..3: the double build of the artifacts, as an unprivileged user."""
    source_dir: Annotated[str, ABS_PATH]
    go: Annotated[str, ABS_PATH]
    user: Annotated[str, NAME]
    go_version: Annotated[str | None, GO_VERSION] = None  # BUILD-2 records it when given
    env: Mapping[str, str] = field(default_factory=_empty)  # added to the build's own environment


@dataclass(frozen=True, kw_only=True)
class Units:
    """The systemd units (UNIT-*, CUT-4); the peer is the suite's disposable
    stand-in until the cutover installs candidate_file (PEER-*). production
    and candidate run what listens on ports.production and ports.candidate
    before the cutover: a listener is judged only when it is its unit's own
    (CUT-1, CUT-2, RUNTIME-1, ISO-1: host/unitowner.py)."""
    supervisor: Annotated[str, UNIT_NAME]
    slice: Annotated[str, UNIT_NAME]
    peer: Annotated[str, UNIT_NAME]
    production: Annotated[str, UNIT_NAME]
    candidate: Annotated[str, UNIT_NAME, Why(
        "CUT-1, CUT-2, RUNTIME-1, ISO-1: the unit that runs the candidate on ports.candidate before the "
        "cutover (the seeds name none): its listener is judged only when it is that unit's own")]
    candidate_file: Annotated[str, ABS_PATH]


@dataclass(frozen=True, kw_only=True)
class Ports:
    """Loopback ports: the released server (production) and the candidate (CUT-1, RUNTIME-1)."""
    production: int
    candidate: int


@dataclass(frozen=True)
class Judged:
    """A session unit property's requirement, and how its value is compared with
    what `systemctl show --all` prints: EXACT, WORDS (the same words in any
    order, each as often) or SYSCALLS (the same system calls, once systemd's
    @groups are expanded as `systemd-analyze syscall-filter` lists them)."""
    requirement: str
    how: str = EXACT



@dataclass(frozen=True, kw_only=True)
class SessionUnitProperties:
    """What a live session unit must show (TARGET-CONTRACT section 1, "Session unit
    properties"), each property with the requirement it belongs to; from the
    contract and the reviewed supervisor's source, never from the live host.
    User= and Group= are service_user and service_group (UNIT-2), Slice=,
    BindsTo= and After= the units' (UNIT-8), RuntimeMaxSec= the runtime the
    START asked for (PROTO-1): they are judged there, not listed here."""
    Type: Annotated[str, Judged("UNIT-1")]
    SupplementaryGroups: Annotated[str, Judged("UNIT-2", WORDS)]
    CapabilityBoundingSet: Annotated[str, Judged("UNIT-3", WORDS)]
    AmbientCapabilities: Annotated[str, Judged("UNIT-3", WORDS)]
    NoNewPrivileges: Annotated[str, Judged("UNIT-3")]
    RestrictSUIDSGID: Annotated[str, Judged("UNIT-3")]
    PrivateDevices: Annotated[str, Judged("UNIT-4")]
    DevicePolicy: Annotated[str, Judged("UNIT-4")]
    Delegate: Annotated[str, Judged("UNIT-4")]
    ProtectControlGroups: Annotated[str, Judged("UNIT-4")]
    ProtectProc: Annotated[str, Judged("UNIT-5")]
    ProcSubset: Annotated[str, Judged("UNIT-5")]
    RestrictNamespaces: Annotated[str, Judged("UNIT-5")]
    RestrictAddressFamilies: Annotated[str, Judged("UNIT-5", WORDS)]
    SystemCallArchitectures: Annotated[str, Judged("UNIT-5", WORDS)]
    SystemCallFilter: Annotated[str, Judged("UNIT-5", SYSCALLS)]
    LockPersonality: Annotated[str, Judged("UNIT-5")]
    RestrictRealtime: Annotated[str, Judged("UNIT-5")]
    ProtectKernelTunables: Annotated[str, Judged("UNIT-5")]
    ProtectKernelModules: Annotated[str, Judged("UNIT-5")]
    ProtectKernelLogs: Annotated[str, Judged("UNIT-5")]
    Environment: Annotated[str, Judged("UNIT-6", WORDS)]
    ProtectSystem: Annotated[str, Judged("UNIT-7")]
    PrivateTmp: Annotated[str, Judged("UNIT-7")]
    InaccessiblePaths: Annotated[str, Judged("UNIT-7", WORDS)]
    BindPaths: Annotated[str, Judged("UNIT-7", WORDS)]
    BindReadOnlyPaths: Annotated[str, Judged("UNIT-7", WORDS)]
    KillMode: Annotated[str, Judged("CGROUP-1")]
    KillSignal: Annotated[str, Judged("CONC-3")]
    FinalKillSignal: Annotated[str, Judged("CONC-3")]
    SendSIGKILL: Annotated[str, Judged("CONC-3")]
    TimeoutStopUSec: Annotated[str, Judged("CONC-3")]
    CollectMode: Annotated[str, Judged("CONC-3")]

    def judged(self, requirement: str) -> dict[str, tuple[str, str]]:
        """{property: (value, how)} of the properties `requirement` judges."""
        return {f.name: (getattr(self, f.name), j.how) for f, j in _judged() if j.requirement == requirement}


def _judged() -> list[tuple[Any, Judged]]:
    hints = get_type_hints(SessionUnitProperties, include_extras=True)
    return [(f, next(e for e in get_args(hints[f.name])[1:] if isinstance(e, Judged)))
            for f in fields(SessionUnitProperties)]


@dataclass(frozen=True, kw_only=True)
class UnitProperties:
    """CUT-4 (optional): `systemctl show` values each unit must have, from the
    contract, never from the live host; `session` those of every live session
    unit (UNIT-1..7, CGROUP-1, CONC-3: a run without them fails each)."""
    supervisor: Mapping[str, str] = field(default_factory=_empty)
    slice: Mapping[str, str] = field(default_factory=_empty)
    session: SessionUnitProperties | None = None


@dataclass(frozen=True, kw_only=True)
class SupervisorExec:
    """SCOPE-2, CUT-4: the supervisor unit's one ExecStart= (program and argv, as
    systemd's D-Bus ExecStart reports them); the program is binaries.supervisor.path."""
    path: Annotated[str, ABS_PATH]
    argv: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """RUNTIME-1: the candidate runtime (the process listening on ports.candidate)."""
    binary: Annotated[str, ABS_PATH]
    sha256: Annotated[str, HEX64, Why(  # the exact SEA build, from the review
        "RUNTIME-1: the SHA-256 of the exact Node 26.4 SEA runtime.binary the review approved; "
        "no pin, no runtime gate")]
    node_version: Annotated[str, NODE_VERSION]


@dataclass(frozen=True, kw_only=True)
class Cutover:
    """CUT-1..3: what the suite reads over loopback HTTP and from server.env."""
    production_health: Annotated[str, URL_PATH]
    candidate_health: Annotated[str, URL_PATH]
    candidate_ui: Annotated[tuple[str, ...], URL_PATH]
    plugins: Annotated[tuple[str, ...], PLUGIN_NAME]
    server_env: Annotated[str, ABS_PATH]
    directory: Annotated[str, ABS_PATH]  # location[directory] of every /api/* request
    # CUT-3, RUNTIME-2: the variables server.env may set (from the review's record);
    # one the floor refuses (spec/floor.py LOADS_CODE: NODE_*, LD_*, ...) never loads
    environment: Annotated[tuple[str, ...], floor.ENV_NAME] = (floor.PASSWORD_VARIABLE,)


@dataclass(frozen=True, kw_only=True)
class PluginSuccess:
    """PLUGIN-1: the harness's own success report, which a run must show
    besides exit 0 (TARGET-CONTRACT 9): its last non-empty output line matches
    `last_line`, and it leaves `results_per_run` files whose names match
    `result_file` in its fresh working directory (regular expressions)."""
    last_line: Annotated[str, PATTERN, Why(
        "PLUGIN-1: the harness's success line as the review's record of its runs shows it")]
    result_file: Annotated[str, PATTERN, Why(
        "PLUGIN-1: the name of the result file one harness run writes, from the review's record")]
    results_per_run: Annotated[int, POSITIVE] = 1


@dataclass(frozen=True, kw_only=True)
class Plugin:
    """PLUGIN-1: the review's smoke harness and the bun that runs it
    (TARGET-CONTRACT 9); {helper} and {workdir} in the arguments are filled in
    by the suite."""
    bun: Annotated[str, ABS_PATH]
    bun_sha256: Annotated[str, HEX64, Why(
        "PLUGIN-1: the SHA-256 of the bun the review ran the smoke harness under, from the "
        "review's record, never from the live host")]
    harness: Annotated[str, ABS_PATH]
    harness_sha256: Annotated[str, HEX64, Why(
        "PLUGIN-1: the SHA-256 of the smoke harness the review ran, from the review's record, "
        "never from the live host")]
    plugin_dir: Annotated[str, ABS_PATH]  # the auto-discovered plugin directory
    args: Annotated[tuple[str, ...], AtLeast(0)]        # the ten runs
    fresh_args: Annotated[tuple[str, ...], AtLeast(0)]  # the run against the fresh helper
    success: PluginSuccess  # what a passing run shows besides exit 0
    deadline_s: int = 120  # each run's bound


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """ISO-2: the pilot's declared session behaviour (recorded, compared)."""
    session_workspace_writable: bool
    session_network: bool


@dataclass(frozen=True, kw_only=True)
class SessionEnvironment:
    """UNIT-6: the value of each variable of the fixed environment a session's
    command gets (TARGET-CONTRACT section 1: these four, no other)."""
    PATH: Annotated[str, ENV_VALUE]
    HOME: Annotated[str, ENV_VALUE]
    TERM: Annotated[str, ENV_VALUE]
    LANG: Annotated[str, ENV_VALUE]

    def as_dict(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True)
class Admission:
    """FLOOD-1: how the supervisor admits unauthenticated connections, from its
    reviewed source (TARGET-CONTRACT 2 says "their own small quota and rate
    limit" and gives no numbers)."""
    unauth_quota: Annotated[int, POSITIVE]     # unauthenticated connections held at once
    hello_timeout_s: Annotated[int, POSITIVE]  # how long a connection may stay silent before HELLO


@dataclass(frozen=True, kw_only=True)
class Limits:
    """SUITE-4 (optional, key by key): bounds on root's reads and copies of what
    the service user can write. A refusal names the key and its value, so that
    an operator raises it deliberately. A real host fits the defaults: the Node
    SEA runtime is about 120 MB, bun 107 MB, a Go source tree a few MB."""
    # one file of the pilot or code tree (manifest, go.sum, build copy)
    file_bytes: Annotated[int, POSITIVE] = 32 << 20
    tree_bytes: Annotated[int, POSITIVE] = 256 << 20      # the manifest's files together; the build's source copy, each
    tree_entries: Annotated[int, POSITIVE] = 50_000       # entries walked for the manifest; copied for a build, each
    tree_depth: Annotated[int, POSITIVE] = 32             # directories below either walk's top (MAX_TREE_DEPTH)
    runtime_bytes: Annotated[int, POSITIVE] = 512 << 20   # the candidate's runtime binary (RUNTIME-1)
    artifact_bytes: Annotated[int, POSITIVE] = 256 << 20  # an installed binary, a build's output


@dataclass(frozen=True, kw_only=True)
class SessionStop:
    """CONC-3, CGROUP-1 (optional): how a session unit is stopped (TARGET-CONTRACT
    section 1: TimeoutStopSec= a few seconds; TERM, then KILL), from the reviewed
    supervisor's source, never from the live host. The suite waits on a stop
    only as long as these allow (timeout_s capped at 30 s), whatever the host says."""
    # a stopped command sees SIGTERM and runs at least this long before SIGKILL (it
    # gets the unit's TimeoutStopSec at least, 2 s more where script(1) waits)
    term_grace_s: Annotated[int, POSITIVE] = 2
    timeout_s: Annotated[int, POSITIVE] = 10  # a session unit's TimeoutStopSec, at most


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """The host the inventory file describes; every field but file and host is a key of its vars."""
    file: str = field(metadata=NOT_A_KEY)
    host: str = field(metadata=NOT_A_KEY)
    ansible_connection: str | None = None
    ansible_host: str | None = None
    ansible_python_interpreter: Annotated[str | None, ABS_PATH] = None
    service_user: Annotated[str, NAME]
    service_group: Annotated[str, NAME]
    pilot_root: Annotated[str, ABS_PATH]
    code_root: Annotated[str, ABS_PATH]
    revision: Annotated[str, HEX40]
    source_manifest_sha256: Annotated[str, HEX64]
    binaries: Binaries
    build: Build
    units: Units
    socket: Annotated[str, ABS_PATH]
    marker: Annotated[str, MARKER_PATH, Why(
        f"an absolute path ending in /{MARKER_NAME}: the suite writes and removes a marker nowhere else, MARK-4")]
    ports: Ports
    unit_properties: UnitProperties = field(default_factory=UnitProperties)
    supervisor_exec: SupervisorExec
    runtime: Runtime
    cutover: Cutover
    plugin: Plugin
    isolation: Isolation
    session_environment: SessionEnvironment
    admission: Admission
    limits: Limits = field(default_factory=Limits)
    session_stop: SessionStop = field(default_factory=SessionStop)
    # SUITE-5 (optional): the whole run's bound, in seconds, from session start to the
    # verdict; past it the run ends NOT READY, naming the test it was in. A good
    # reference host's run takes about three minutes; a target host's builds and
    # harness runs take longer: the default leaves room for them.
    run_bound_s: Annotated[int, POSITIVE] = 1800

    @property
    def binaries_list(self) -> list[Binary]:
        out = []
        for role in ARTIFACTS:
            a: Artifact = getattr(self.binaries, role)
            out.append(Binary(role=role, path=a.path, sha256=a.sha256, package=a.package))
        return out

    def limit(self, key: str) -> hostfs.Limit:
        """A bound of `limits:` (its default where the inventory sets none),
        named by its key for the message that refuses a file over it."""
        return limit(key, getattr(self.limits, key))

    def tree_bounds(self) -> hostfs.TreeBounds:
        return hostfs.TreeBounds(self.limit("file_bytes"), self.limit("tree_bytes"),
                                 self.limit("tree_entries"), self.limit("tree_depth"))


# ---------------------------------------------------------------- the schema, derived


@dataclass(frozen=True)
class Leaf:
    """A scalar key (or a list's entry, a mapping's value): its type and format."""
    kind: type
    rx: re.Pattern[str] | None = None


@dataclass(frozen=True)
class ListOf:
    """A list key: every entry is checked against `leaf`."""
    leaf: Leaf
    min_len: int = 1


@dataclass(frozen=True)
class MapOf:
    """A mapping of any keys, each value checked against `leaf`."""
    leaf: Leaf


@dataclass(frozen=True)
class Key:
    """One key of a section: what its value must be, whether it must be there,
    why it matters (Why) and whether it is a bound (POSITIVE)."""
    spec: Leaf | ListOf | MapOf | Section
    required: bool
    why: str = ""
    positive: bool = False


@dataclass(frozen=True)
class Section:
    """A dataclass's keys, by name, in field order."""
    cls: type
    keys: dict[str, Key]


def _spec(hint: Any, extras: tuple[Any, ...]) -> Leaf | ListOf | MapOf | Section:
    rx = next((e for e in extras if isinstance(e, re.Pattern)), None)
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):  # X | None: an optional key whose default is None
        (hint,) = [a for a in get_args(hint) if a is not type(None)]
        origin = get_origin(hint)
    if isinstance(hint, type) and is_dataclass(hint):
        return section_of(hint)
    if origin is tuple and get_args(hint)[1:] == (Ellipsis,):
        least = next((e.entries for e in extras if isinstance(e, AtLeast)), 1)
        return ListOf(Leaf(get_args(hint)[0], rx), least)
    if origin is Mapping and get_args(hint)[0] is str:
        return MapOf(Leaf(get_args(hint)[1], rx))
    if hint in (str, int, bool):
        return Leaf(hint, rx)
    raise TypeError(f"{hint!r}: not a type an inventory key can have")


def section_of(cls: type) -> Section:
    """The keys of a section dataclass: each field's type and extras, required
    when the field has no default. The one schema (issue 23): what `load`
    refuses (the preflight's inventory check, before any test runs) and what
    a consumer reads are the same fields, so they cannot drift apart."""
    hints = get_type_hints(cls, include_extras=True)
    keys = {}
    for f in fields(cls):
        if not f.metadata.get("key", True):
            continue
        hint = hints[f.name]
        extras: tuple[Any, ...] = ()
        if get_origin(hint) is Annotated:
            hint, *rest = get_args(hint)
            extras = tuple(rest)
        keys[f.name] = Key(_spec(hint, extras), f.default is MISSING and f.default_factory is MISSING,
                           next((e.text for e in extras if isinstance(e, Why)), ""), POSITIVE in extras)
    return Section(cls, keys)


def _required(sec: Section) -> set[str]:
    out = set()
    for name, key in sec.keys.items():
        if key.required:
            out.add(name)
            if isinstance(key.spec, Section):
                out |= {f"{name}.{sub}" for sub in _required(key.spec)}
    return out


SCHEMA = section_of(Inventory)
# every key a loadable inventory must have, dotted ("binaries.client.sha256"): a
# field without a default, in a section that is required too
REQUIRED = frozenset(_required(SCHEMA))
ARTIFACTS = tuple(f.name for f in fields(Binaries))  # the roles, in the marker's order (MARK-2)
SESSION_ENV = tuple(f.name for f in fields(SessionEnvironment))  # UNIT-6: the fixed list
LIMIT_DEFAULTS = {f.name: f.default for f in fields(Limits)}
# limits.tree_depth's greatest value: a build's copy lies two levels below the
# directory the run removes (work/src), and the removal is bounded in depth too
MAX_TREE_DEPTH = hostfs.REMOVE_DEPTH - 4


def limit(key: str, value: int) -> hostfs.Limit:
    """`limits.<key>` = `value`, in its unit, for the message that refuses what is over it."""
    unit = "entries" if key.endswith("_entries") else "levels" if key.endswith("_depth") else "bytes"
    return hostfs.Limit(value, f"limits.{key}", unit)


# the requirements session unit properties belong to, in the fields' order
SESSION_PROPERTY_REQUIREMENTS = tuple(dict.fromkeys(j.requirement for _, j in _judged()))


def _whys(sec: Section, dotted: str = "") -> dict[str, str]:
    out = {}
    for name, key in sec.keys.items():
        if key.why:
            out[f"{dotted}{name}"] = f" ({key.why})"
        if isinstance(key.spec, Section):
            out.update(_whys(key.spec, f"{dotted}{name}."))
    return out


# Why a key matters, appended to a problem with it: the operator fills these in.
WHY = _whys(SCHEMA)


# ---------------------------------------------------------------- validation


def _check(file: str, key: str, value: Any, spec: Any, problems: list[str]) -> None:
    if isinstance(spec, (Section, MapOf)):
        if not isinstance(value, dict):
            problems.append(f"{file}: {key}: expected a mapping, got {type(value).__name__}")
            return
        for k, v in value.items():
            sub = f"{key}.{k}"
            if not isinstance(k, str):
                problems.append(f"{file}: {sub}: keys must be strings")
            elif isinstance(spec, MapOf):
                _check(file, sub, v, spec.leaf, problems)
            elif k in spec.keys:
                _check(file, sub, v, spec.keys[k].spec, problems)
            else:
                problems.append(f"{file}: {sub}: unknown key")
        return
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            problems.append(f"{file}: {key}: expected a list, got {type(value).__name__}")
        elif len(value) < spec.min_len:
            problems.append(f"{file}: {key}: expected at least {spec.min_len} entries")
        else:
            for i, item in enumerate(value):
                _check(file, f"{key}[{i}]", item, spec.leaf, problems)
        return
    typ, rx = spec.kind, spec.rx
    if placeholder(value):
        problems.append(f"{file}: {key}: {FILL_IN} {shown(value)}")
    elif typ is int and isinstance(value, bool) or not isinstance(value, typ):
        problems.append(f"{file}: {key}: expected {typ.__name__}, got {type(value).__name__} {shown(value)}")
    elif rx is not None and not rx.match(value):
        problems.append(f"{file}: {key}: malformed value {shown(value)} (must match {rx.pattern})")
    elif rx is PATTERN:
        try:
            re.compile(value)
        except re.error as e:
            problems.append(f"{file}: {key}: not a regular expression: {e}")


def schema_problems(file: str, key: str, vars_: Any) -> list[str]:
    """Every problem of type, format or an unknown key in the host vars
    `vars_` (a missing key is not one), each ``<file>: <key>.<sub>: ...``, in
    the file's order; `inventory check` lists them for a file that may not load."""
    problems: list[str] = []
    _check(file, key, vars_, SCHEMA, problems)
    return problems


def placeholders(vars_: Any, dotted: str = "") -> list[str]:
    """The dotted keys whose value is a FILL-IN placeholder, in the file's order."""
    if placeholder(vars_):
        return [dotted]
    if isinstance(vars_, dict):
        return [k for name, v in vars_.items() for k in placeholders(v, f"{dotted}.{name}" if dotted else str(name))]
    if isinstance(vars_, list):
        return [k for i, v in enumerate(vars_) for k in placeholders(v, f"{dotted}[{i}]")]
    return []


def why(dotted: str) -> str:
    """Why the operator fills `dotted` in (" (<ID>: ...)"), or ""."""
    return WHY.get(dotted, "")


def _is_fill_in(problem: str) -> bool:
    return f": {FILL_IN} '{FILL_IN}" in problem


def _missing(vars_: dict[str, Any], sec: Section, dotted: str = "") -> list[str]:
    """The required keys `vars_` lacks, where the section holding them is there."""
    out = []
    for name, key in sec.keys.items():
        if name not in vars_:
            if key.required:
                out.append(f"{dotted}{name}")
        elif isinstance(key.spec, Section):
            out += _missing(vars_[name], key.spec, f"{dotted}{name}.")
    return out


def _not_positive(vars_: dict[str, Any], sec: Section, dotted: str) -> str | None:
    """The first bound (in the file's order) that is not above zero."""
    for name, value in vars_.items():
        key = sec.keys[name]
        if isinstance(key.spec, Section):
            found = _not_positive(value, key.spec, f"{dotted}.{name}")
            if found:
                return found
        elif key.positive and value <= 0:
            return f"{dotted}.{name}: {value} is not a positive bound"
    return None


def _build(sec: Section, vars_: dict[str, Any], **given: Any) -> Any:
    """The section's dataclass from validated vars: lists as tuples, mappings
    read-only, an absent optional key its field's default."""
    kw = dict(given)
    for name, value in vars_.items():
        spec = sec.keys[name].spec
        if isinstance(spec, Section):
            value = _build(spec, value)
        elif isinstance(spec, ListOf):
            value = tuple(value)
        elif isinstance(spec, MapOf):
            value = types.MappingProxyType(dict(value))
        kw[name] = value
    return sec.cls(**kw)


_ABSENT = object()


def value_at(vars_: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """The value at a dotted key ("plugin.bun"), `default` when it is not there."""
    node: Any = vars_
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _why(problem: str, prefix: str) -> str:
    return next((why for key, why in WHY.items() if f"{prefix}.{key}:" in problem), "")


def marker_named(path: str | Path) -> str | None:
    """The marker path the inventory file names, read whether or not the rest
    of the file validates: a run removes that marker before anything else
    (MARK-4). None when the file names none."""
    try:
        data = parse(read_text(path), str(path))
        (vars_,) = data["all"]["hosts"].values()
        named = vars_["marker"]
    except (InventoryError, KeyError, TypeError, ValueError, AttributeError):
        return None
    return named if isinstance(named, str) and ABS_PATH.match(named) else None


def load(path: str | Path) -> Inventory:
    file = str(path)
    data = parse(read_text(path), file)
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
    problems = schema_problems(file, prefix, vars_)
    unfilled = [p for p in problems if _is_fill_in(p)]
    if len(unfilled) < len(problems):
        first = next(p for p in problems if not _is_fill_in(p))
        raise InventoryError(first + _why(first, prefix)
                             + (f"; and {len(unfilled)} {FILL_IN} values not filled in" if unfilled else ""))
    if unfilled:  # every one named: the operator fills them in from the review's record at once
        raise InventoryError(f"{file}: " + "; ".join(p.removeprefix(f"{file}: ") + _why(p, prefix) for p in unfilled)
                             + f" ({len(unfilled)} {FILL_IN} values: each from the review's record, "
                             "never from the live host)")
    missing = sorted(_missing(vars_, SCHEMA))
    if missing:
        msg = f"{file}: {prefix}.{missing[0]}: missing required key"
        raise InventoryError(msg + _why(msg, prefix))
    bound = _not_positive(vars_, SCHEMA, prefix)
    if bound:
        raise InventoryError(f"{file}: {bound}")
    inv: Inventory = _build(SCHEMA, vars_, file=file, host=str(host))
    paths = [b.path for b in inv.binaries_list]
    if len(set(paths)) != len(paths):
        raise InventoryError(f"{file}: {prefix}.binaries: two artifacts share one path")
    if inv.limits.tree_depth > MAX_TREE_DEPTH:
        raise InventoryError(f"{file}: {prefix}.limits.tree_depth: {inv.limits.tree_depth} is past "
                             f"{MAX_TREE_DEPTH}: a build's source copy that deep could not be removed "
                             f"(the run removes what it made {hostfs.REMOVE_DEPTH} levels deep)")
    if inv.supervisor_exec.path != paths[0]:
        raise InventoryError(f"{file}: {prefix}.supervisor_exec.path: "
                             f"{inv.supervisor_exec.path!r} is not binaries.supervisor.path "
                             f"{paths[0]!r} (SCOPE-2: the supervisor unit runs the installed binary)")
    below = below_floor(vars_)
    if below:  # every one named: a weaker inventory is refused whole (SUITE-3)
        raise InventoryError(f"{file}: " + "; ".join(f"{prefix}.{b.key}: {escape(b.problem)}" for b in below)
                             + f" ({len(below)} values below the contract's floor: an inventory may make a "
                             "check stricter, never weaker (SUITE-3, spec/floor.py))")
    return inv


def below_floor(vars_: dict[str, Any]) -> list[floor.Below]:
    """The host vars' values below the contract's floor (spec/floor.py), in
    the floor's order; a value of the wrong type is the schema's to name, not
    this. `load` refuses an inventory with any; `inventory check` lists them."""
    def text(dotted: str) -> Any:
        got = value_at(vars_, dotted)
        return got if isinstance(got, str) and not placeholder(got) else None

    binaries = {role: text(f"binaries.{role}.path") for role in floor.BINARIES}
    units = {role: text(f"units.{role}") for role in floor.UNITS}
    out = floor.names_problems({k: v for k, v in binaries.items() if v}, text("marker") or floor.MARKER,
                               {k: v for k, v in units.items() if v})
    socket = text("socket")
    if socket is not None:
        out += floor.socket_problems(socket, text("unit_properties.supervisor.RuntimeDirectory"))
    session = value_at(vars_, "unit_properties.session")
    if isinstance(session, dict):
        env = value_at(vars_, "session_environment")
        grace = value_at(vars_, "session_stop.term_grace_s", SessionStop.term_grace_s)
        most = value_at(vars_, "session_stop.timeout_s", SessionStop.timeout_s)
        out += floor.session_problems(
            {k: v for k, v in session.items() if isinstance(v, str)}, socket or floor.SOCKET,
            {k: v for k, v in env.items() if isinstance(v, str)} if isinstance(env, dict) else {},
            (grace, most) if isinstance(grace, int) and isinstance(most, int) else (0, 0))
    environment = value_at(vars_, "cutover.environment")
    if isinstance(environment, list):
        out += floor.environment_problems(environment)
    last_line, result_file = text("plugin.success.last_line"), text("plugin.success.result_file")
    if last_line is not None and result_file is not None:
        out += floor.pattern_problems(last_line, result_file)
    return out
