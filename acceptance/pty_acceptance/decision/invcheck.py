"""`pty-acceptance inventory check`: every fact an inventory states that can
be read without running the suite, compared with this host, one line each
(issue 22: an inventory the operator can trust and fill).

    match     <key>: <value>
    differs   <key>: the inventory says X, the host says Y
    missing   <key>: ... (the host has no such thing)
    FILL-IN   <key>: where its value comes from; what the host has now, labelled
              as not a source of truth
    not read  <key>: why only a run can tell (a live session, a request), or
              why it could not be read now (systemd did not answer, ...):
              never `match` for what was not read
    invalid   <key>: the inventory's own problem (inventory.py), a value below
              the contract's floor among them (spec/floor.py)

Hashes are never taken from the host into the inventory: a pin comes from the
review's record. Where a pin is a FILL-IN placeholder the host's hash is shown
so that the operator can compare it with that record, never copy it. Every
read is the suite's own safe read (no link followed, bounded), and nothing is
run, started or written.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pty_acceptance.host import hostfs, systemd
from pty_acceptance.provenance import gitrev, manifest, node_runtime
from pty_acceptance.spec import inventory

MATCH, DIFFERS, MISSING, FILL_IN, NOT_READ, INVALID = "match", "differs", "missing", "FILL-IN", "not read", \
    "invalid"
NOT_A_SOURCE = "(the host's, not a source of truth: the pin comes from the review's record)"
# facts only a run can read, and why
ONLY_A_RUN = {
    "session_environment": "only a live session shows its environment (UNIT-6)",
    "unit_properties.session": "only a live session unit shows them (UNIT-1..7, CGROUP-1, CONC-3)",
    "isolation": "only a live session shows it (ISO-2 records it)",
    "admission": "only a flood shows the quota and the HELLO timeout (FLOOD-1)",
    "cutover": "the health paths and the plugins are requests to the servers (CUT-1, CUT-2)",
    "build.go_version": "only running the toolchain tells it (BUILD-2 records it)",
    "build.env": "the build's environment is used by BUILD-1's builds",
    "marker": "the marker is the run's to write (MARK-1)",
    "limits": "bounds of the suite's own reads",
    "session_stop": "only a live session's unit and its stop show them (CONC-3)",
    "ansible_connection": "Ansible's", "ansible_host": "Ansible's", "ansible_python_interpreter": "Ansible's",
}


@dataclass(frozen=True)
class Line:
    status: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.status:<9} {self.key}: {self.detail}"


_get = inventory.value_at


_placeholder = inventory.placeholder


def _exists(path: str) -> bool:
    """Something is at `path` (reached from / without following a link)."""
    try:
        return hostfs.Node.walked(path).exists
    except OSError:
        return False


def _node_line(key: str, path: Any, kind_test, kind: str) -> Line:
    if not isinstance(path, str):
        return Line(INVALID, key, f"{path!r} is not a path")
    try:
        node = hostfs.Node.walked(path)  # never through a link in any component
    except OSError as e:
        return Line(DIFFERS, key, f"{path}: not reached: {e.strerror or e} (not followed)")
    if node.st is None:
        return Line(MISSING, key, f"{path} does not exist on this host")
    if not kind_test(node.st.st_mode):
        return Line(DIFFERS, key, f"the inventory says a {kind} at {path}, the host has a "
                    f"{hostfs.kind_of(node.st.st_mode)}")
    return Line(MATCH, key, f"{path} ({node.describe().split(': ', 1)[1]})")


def _program_line(key: str, path: Any) -> Line:
    """A program the suite runs (a link in a system directory is how Debian
    installs go: it is executed, not judged for ownership here)."""
    if isinstance(path, str) and os.path.isfile(path) and os.access(path, os.X_OK):
        return Line(MATCH, key, f"{path} (executable)")
    return Line(MISSING, key, f"{path} is not an executable file on this host")


def _hash(path: str, limit: hostfs.Limit, user_writable: bool) -> str:
    try:
        return hostfs.sha256_file(path, limit, user_writable)
    except OSError as e:
        return f"not readable ({e.strerror or e})"


def _pin_line(key: str, pin: Any, path: Any, limit: hostfs.Limit, why: str,
              user_writable: bool = False) -> Line:
    """`user_writable`: the file lies in the service user's tree (a hard link there is not read)."""
    if not isinstance(path, str):
        return Line(NOT_READ, key, "the file it pins is not named")
    if not _exists(path):
        return Line(FILL_IN if _placeholder(pin) else MISSING, key,
                    (f"comes from {why}; " if _placeholder(pin) else "") + f"{path} does not exist on this host")
    now = _hash(path, limit, user_writable)
    if _placeholder(pin):
        return Line(FILL_IN, key, f"comes from {why}; {path} hashes to {now} now {NOT_A_SOURCE}")
    if now == pin:
        return Line(MATCH, key, f"{path} hashes to the pin {pin}")
    return Line(DIFFERS, key, f"the inventory pins {pin}, the host's {path} hashes to {now}")


def _account(key: str, name: Any, db, what: str) -> Line:
    try:
        entry = db(name)
    except (KeyError, TypeError):
        return Line(MISSING, key, f"no {what} {name!r} on this host")
    return Line(MATCH, key, f"{name} ({what} id {entry[2]})")


def _unit_line(key: str, name: Any, shown: dict[str, dict | str]) -> Line:
    props = shown.get(name) or {}
    if isinstance(props, str):
        return Line(NOT_READ, key, f"{name}: {props}")
    if props.get("LoadState") in (None, "not-found"):
        return Line(MISSING, key, f"{name} is not loaded on this host")
    return Line(MATCH, key, f"{name}: {props.get('LoadState')}, {props.get('ActiveState')}")


def _show(name: str) -> dict | str:
    """The unit's properties, or why systemd could not say (a str)."""
    try:
        unit = systemd.Unit.show(name)
    except systemd.SystemdError as e:
        return f"systemd did not answer ({str(e).splitlines()[0]})"
    return unit.last()


def check(path: str) -> list[Line]:
    """The lines for the inventory at `path` on this host."""
    try:  # walked from /, bounded, never a FIFO; its bytes are never echoed (inventory.read_text)
        data = inventory.parse(inventory.read_text(path), path)
    except inventory.InventoryError as e:
        return [Line(INVALID, "(file)", str(e))]
    try:
        ((_, vars_),) = data["all"]["hosts"].items()
        if not isinstance(vars_, dict):
            raise TypeError("host vars are not a mapping")
    except (KeyError, TypeError, ValueError, AttributeError):
        return [Line(INVALID, "(file)", f"{path}: not an inventory of one host (all: hosts: NAME: vars)")]
    out = [Line(INVALID, "(schema)", p) for p in _schema_problems(path, vars_)]
    out += [Line(INVALID, b.key, b.problem) for b in inventory.below_floor(vars_)]  # SUITE-3: the contract's floor
    lim = _limits(vars_)
    # production's and the candidate's units: CUT-1 and the rest judge a listener only as theirs
    listening_units = [k for k in ("units.production", "units.candidate")
                       if isinstance(_get(vars_, k), str) and not inventory.placeholder(_get(vars_, k))]
    shown = {n: _show(n) for n in (_get(vars_, "units.supervisor"), _get(vars_, "units.slice"),
                                   _get(vars_, "units.peer"), *(_get(vars_, k) for k in listening_units))
             if isinstance(n, str)}
    out += [_account("service_user", vars_.get("service_user"), pwd.getpwnam, "user"),
            _account("service_group", vars_.get("service_group"), grp.getgrnam, "group"),
            _account("build.user", _get(vars_, "build.user"), pwd.getpwnam, "user"),
            _node_line("pilot_root", vars_.get("pilot_root"), stat.S_ISDIR, "directory"),
            _node_line("code_root", vars_.get("code_root"), stat.S_ISDIR, "directory"),
            _node_line("build.source_dir", _get(vars_, "build.source_dir"), stat.S_ISDIR, "directory"),
            _program_line("build.go", _get(vars_, "build.go"))]
    for role in inventory.ARTIFACTS:
        b = _get(vars_, f"binaries.{role}") or {}
        out.append(_node_line(f"binaries.{role}.path", b.get("path"), stat.S_ISREG, "regular file"))
        out.append(_pin_line(f"binaries.{role}.sha256", b.get("sha256"), b.get("path"), lim["artifact_bytes"],
                             "the review's artifact hashes"))
    out += [_unit_line("units.supervisor", _get(vars_, "units.supervisor"), shown),
            _unit_line("units.slice", _get(vars_, "units.slice"), shown),
            _peer_line(_get(vars_, "units.peer"), shown),
            *(_unit_line(k, _get(vars_, k), shown) for k in listening_units),
            _node_line("units.candidate_file", _get(vars_, "units.candidate_file"), stat.S_ISREG, "regular file"),
            _node_line("socket", vars_.get("socket"), stat.S_ISSOCK, "socket")]
    out += _ports(vars_)
    out += _runtime(vars_, lim)
    out += [_node_line("cutover.server_env", _get(vars_, "cutover.server_env"), stat.S_ISREG, "regular file"),
            _node_line("plugin.bun", _get(vars_, "plugin.bun"), stat.S_ISREG, "regular file"),
            _pin_line("plugin.bun_sha256", _get(vars_, "plugin.bun_sha256"), _get(vars_, "plugin.bun"),
                      lim["artifact_bytes"], "the review's record of the bun it ran"),
            _node_line("plugin.harness", _get(vars_, "plugin.harness"), stat.S_ISREG, "regular file"),
            _pin_line("plugin.harness_sha256", _get(vars_, "plugin.harness_sha256"), _get(vars_, "plugin.harness"),
                      lim["file_bytes"], "the review's record of the harness it ran", user_writable=True),
            _node_line("plugin.plugin_dir", _get(vars_, "plugin.plugin_dir"), stat.S_ISDIR, "directory")]
    out += _source(vars_, lim)
    out += _properties(vars_, shown)
    out += [Line(NOT_READ, key, why) for key, why in ONLY_A_RUN.items() if _get(vars_, key) is not None]
    named = {line.key for line in out}  # every other placeholder (plugin.success...) its own FILL-IN line
    out += [Line(FILL_IN, key, f"comes from the review's record{inventory.why(key)}")
            for key in inventory.placeholders(vars_) if key not in named]
    return out


def _schema_problems(path: str, vars_: dict) -> list[str]:
    problems = inventory.schema_problems(path, "", vars_)
    # a FILL-IN placeholder is its own line (FILL-IN), not a schema problem
    return [p for p in problems if "'FILL-IN" not in p]


def _limits(vars_: dict) -> dict[str, hostfs.Limit]:
    given = limits if isinstance(limits := vars_.get("limits"), dict) else {}
    return {k: inventory.limit(k, given.get(k, v)) for k, v in inventory.LIMIT_DEFAULTS.items()}


def _peer_line(name: Any, shown: dict[str, dict | str]) -> Line:
    props = shown.get(name) or {}
    if isinstance(props, str):
        return Line(NOT_READ, "units.peer", f"{name}: {props}: whether it has a unit file is not known")
    if props.get("FragmentPath"):
        return Line(DIFFERS, "units.peer", f"{name} has a unit file ({props['FragmentPath']}): the suite "
                    "runs before the cutover installs it")
    return Line(MATCH, "units.peer", f"{name}: no unit file (the suite's disposable peer takes the name)")


def _ports(vars_: dict) -> list[Line]:
    out = []
    for role in ("production", "candidate"):
        port = _get(vars_, f"ports.{role}")
        if not isinstance(port, int):
            continue
        found = node_runtime.listener(port)
        status = MATCH if found.problem is None else MISSING
        out.append(Line(status, f"ports.{role}", found.problem or f"{port}: pid {found.pid} "
                        f"({found.exe_link}) listens"))
    return out


def _runtime(vars_: dict, lim: dict[str, hostfs.Limit]) -> list[Line]:
    path, pin, want = (_get(vars_, f"runtime.{k}") for k in ("binary", "sha256", "node_version"))
    out = [_node_line("runtime.binary", path, stat.S_ISREG, "regular file"),
           _pin_line("runtime.sha256", pin, path, lim["runtime_bytes"],
                     "the review's record of the approved Node 26.4 SEA build (RUNTIME-1)", user_writable=True)]
    if isinstance(path, str) and _exists(path):
        try:
            found = node_runtime.identify(path, limit=lim["runtime_bytes"]).version
        except node_runtime.RuntimeUnreadable as e:
            out.append(Line(NOT_READ, "runtime.node_version", str(e)))
        else:
            out.append(Line(MATCH if found == want else DIFFERS, "runtime.node_version",
                            f"the binary embeds {found}" + ("" if found == want else f", the inventory says {want}")))
    return out


def _source(vars_: dict, lim: dict[str, hostfs.Limit]) -> list[Line]:
    out = []
    pilot, code = vars_.get("pilot_root"), vars_.get("code_root")
    if isinstance(pilot, str) and isinstance(code, str):
        bounds = hostfs.TreeBounds(lim["file_bytes"], lim["tree_bytes"], lim["tree_entries"], lim["tree_depth"])
        try:
            digest, _ = manifest.compute(pilot, code, bounds)
        except manifest.ManifestError as e:
            out.append(Line(NOT_READ, "source_manifest_sha256", str(e)))
        else:
            pin = vars_.get("source_manifest_sha256")
            out.append(Line(MATCH if digest == pin else DIFFERS, "source_manifest_sha256",
                            f"the host's trees give {digest}" + ("" if digest == pin else f", the pin is {pin}")))
        try:
            head = gitrev.head(code)
        except (OSError, gitrev.GitError) as e:
            out.append(Line(NOT_READ, "revision", f"{code}: {e}"))
        else:
            rev = vars_.get("revision")
            out.append(Line(MATCH if head == rev else DIFFERS, "revision",
                            f"{code} is at {head}" + ("" if head == rev else f", the inventory says {rev}")))
    return out


def _properties(vars_: dict, shown: dict[str, dict | str]) -> list[Line]:
    out = []
    want = _get(vars_, "supervisor_exec.path")
    props = shown.get(_get(vars_, "units.supervisor")) or {}
    if isinstance(want, str) and isinstance(props, str):
        out.append(Line(NOT_READ, "supervisor_exec.path", f"ExecStart= not compared: {props}"))
    elif isinstance(want, str) and isinstance(props, dict) and props:
        have: Any = systemd._EXEC_PATH.findall(props.get("ExecStart", ""))
        out.append(Line(MATCH if have == [want] else DIFFERS, "supervisor_exec.path",
                        want if have == [want] else f"the inventory says {want}, ExecStart= runs {have}"))
    for role in ("supervisor", "slice"):
        name = _get(vars_, f"units.{role}")
        props = shown.get(name) or {}
        wanted = _get(vars_, f"unit_properties.{role}") or {}
        if isinstance(props, str):
            if wanted:
                out.append(Line(NOT_READ, f"unit_properties.{role}", f"{len(wanted)} properties not "
                                f"compared: {props}"))
            continue
        if props.get("LoadState") in (None, "not-found"):
            if wanted:
                out.append(Line(MISSING, f"unit_properties.{role}", f"{name} is not loaded: "
                                f"{len(wanted)} properties not compared"))
            continue
        for key, want in wanted.items():
            have = systemd.setting(props, key)  # read in full: systemd 257's <key>Ex too
            where = f"unit_properties.{role}.{key}"
            if have is None:
                out.append(Line(MISSING, where, f"{name} shows no {key}"))
            else:
                out.append(Line(MATCH if have == want else DIFFERS, where,
                                repr(have) if have == want else f"the inventory says {want!r}, "
                                f"systemctl show says {have!r}"))
    return out


def failed(lines: list[Line]) -> list[Line]:
    """What does not match: a fact that differs, is missing, unfilled or invalid,
    and one that could not be read now (only what a run alone can tell is not)."""
    return [line for line in lines if line.status in (DIFFERS, MISSING, FILL_IN, INVALID)
            or line.status == NOT_READ and line.key not in ONLY_A_RUN]


def path_of(given: str | None, default: Path) -> str:
    return os.path.normpath(given) if given else str(default)
