"""Inventory loading: the shipped inventories load; every kind of bad value is
one line naming the file and the key, and pytest stops with status 4."""

import dataclasses
import subprocess
import xml.etree.ElementTree as ET
import sys
from typing import Annotated

import pytest
import yaml

from pty_acceptance.spec import inventory

from conftest import REPO
from suitecopy import suite_copy


RUNTIME_PIN = "ab" * 32  # what an operator fills in for target.yml's placeholders
BUN_PIN, HARNESS_PIN = "cd" * 32, "ef" * 32


def test_shipped_target_inventory_refuses_to_load_until_the_runtime_pin_is_filled_in():
    """RUNTIME-1: the seeds state no hash of the approved SEA, so the shipped
    target inventory carries a placeholder that stops every run, naming RUNTIME-1."""
    path = REPO / "inventories/target.yml"
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(path)
    # units.candidate comes first in the file (CUT-1, CUT-2, RUNTIME-1, ISO-1: issue 37 item 3)
    assert str(e.value).startswith(f"{path}: all.hosts.pilot.units.candidate: FILL-IN 'FILL-IN")
    assert "all.hosts.pilot.runtime.sha256: FILL-IN 'FILL-IN" in str(e.value)
    assert "RUNTIME-1" in str(e.value) and "\n" not in str(e.value)


def test_every_fill_in_of_the_shipped_target_inventory_is_named_as_one_in_its_one_line():
    """Issue 32 item 6: not the first placeholder alone, and not as a
    "malformed value": each FILL-IN key, with the requirement it is for."""
    path = REPO / "inventories/target.yml"
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(path)
    said = str(e.value)
    keys = ("units.candidate", "runtime.sha256", "plugin.bun_sha256", "plugin.harness_sha256",
            "plugin.success.last_line", "plugin.success.result_file")
    for key in keys:
        assert f"all.hosts.pilot.{key}: FILL-IN 'FILL-IN" in said, (key, said)
    assert "malformed" not in said and "\n" not in said
    assert said.endswith(f"({len(keys)} FILL-IN values: each from the review's record, never from the live host)")


FILLED = {"runtime.sha256": RUNTIME_PIN, "plugin.bun_sha256": BUN_PIN, "plugin.harness_sha256": HARNESS_PIN}


@pytest.mark.parametrize("filled, key", [
    ({"runtime.sha256": RUNTIME_PIN}, "plugin.bun_sha256"),
    ({"runtime.sha256": RUNTIME_PIN, "plugin.bun_sha256": BUN_PIN}, "plugin.harness_sha256"),
    (FILLED, "plugin.success.last_line"),
    ({**FILLED, "plugin.success.last_line": "^PASS "}, "plugin.success.result_file"),
])
def test_shipped_target_inventory_refuses_to_load_until_the_plugin_pins_are_filled_in(tmp_path, filled, key):
    """PLUGIN-1: bun and the harness are pinned from the review; the shipped
    target inventory's placeholders stop every run, naming PLUGIN-1."""
    data = yaml.safe_load((REPO / "inventories/target.yml").read_text())
    _set(data, "units.candidate", "opencode-v2-candidate.service")
    for dotted, value in filled.items():
        _set(data, dotted, value)
    f = tmp_path / "target.yml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(f)
    assert str(e.value).startswith(f"{f}: all.hosts.pilot.{key}: FILL-IN 'FILL-IN"), str(e.value)
    assert "PLUGIN-1" in str(e.value) and ("never from the live host" in str(e.value)
                                           or "the review's record" in str(e.value))


def test_shipped_target_inventory_loads(tmp_path):
    f = tmp_path / "target.yml"
    f.write_text(yaml.safe_dump(_good()))
    inv = inventory.load(f)
    assert inv.host == "pilot"
    assert inv.revision.startswith("2ac698d6")
    assert inv.source_manifest_sha256.startswith("fff146df")
    assert [b.sha256[:8] for b in inv.binaries_list] == ["ff03df72", "d833c859", "fb8739d9"]
    assert inv.ports == inventory.Ports(production=4096, candidate=14102)
    assert inv.service_user == "byk"


def test_shipped_reference_inventory_loads():
    path = REPO / "inventories/reference.yml"
    if not path.exists():
        pytest.fail("inventories/reference.yml is missing")
    assert inventory.load(path).host == "reference"


def test_reference_python_inventory_is_reference_yml_but_the_implementations_two_values():
    """inventories/reference-python.yml (tests/reference/expected.py --write,
    for `pty-acceptance reference --supervisor python`) is reference.yml with
    only source_manifest_sha256 and binaries.supervisor.sha256 replaced, plus
    its header comment: every other pin is shared by the two implementations."""
    go_text = (REPO / "inventories/reference.yml").read_text()
    py_text = (REPO / "inventories/reference-python.yml").read_text()
    header = [line for line in py_text.splitlines() if line.startswith("#")]
    assert any("GENERATED" in line and "expected.py --write" in line for line in header), header
    assert any("--supervisor python" in line for line in header), header

    def body(text):
        return [line for line in text.splitlines() if not line.lstrip().startswith("#")]

    go, py = body(go_text), body(py_text)
    assert len(go) == len(py)
    differ = [(a, b) for a, b in zip(go, py, strict=True) if a != b]
    assert all(a.lstrip().startswith(("source_manifest_sha256: ", "supervisor: {path: ")) for a, _ in differ), \
        differ
    strip = {"source_manifest_sha256", "supervisor_sha256"}

    def values(path):
        host = yaml.safe_load(path.read_text())["all"]["hosts"]["reference"]
        host["supervisor_sha256"] = host["binaries"]["supervisor"].pop("sha256")
        return host

    g, p = values(REPO / "inventories/reference.yml"), values(REPO / "inventories/reference-python.yml")
    assert {k: v for k, v in g.items() if k not in strip} == {k: v for k, v in p.items() if k not in strip}
    assert inventory.load(REPO / "inventories/reference-python.yml").host == "reference"


def _good():
    data = yaml.safe_load((REPO / "inventories/target.yml").read_text())
    data["all"]["hosts"]["pilot"]["runtime"]["sha256"] = RUNTIME_PIN
    data["all"]["hosts"]["pilot"]["units"]["candidate"] = "opencode-v2-candidate.service"
    data["all"]["hosts"]["pilot"]["plugin"].update(bun_sha256=BUN_PIN, harness_sha256=HARNESS_PIN)
    data["all"]["hosts"]["pilot"]["plugin"]["success"] = {"last_line": "^PASS ",
                                                          "result_file": r"^smoke-result-\d+\.json$"}
    return data


def _set(data, dotted, value):
    node = data["all"]["hosts"]["pilot"]
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return data


BAD = [
    ("unknown key", "colour", "blue", "all.hosts.pilot.colour: unknown key"),
    ("unknown nested key", "binaries.supervisor.mode", "0755", "binaries.supervisor.mode: unknown key"),
    ("wrong type", "ports.production", "4096", "ports.production: expected int"),
    ("bool for int", "ports.candidate", True, "ports.candidate: expected int"),
    ("short revision", "revision", "2ac698d6", "revision: malformed value"),
    ("upper-case hash", "binaries.client.sha256", "FB" * 32, "binaries.client.sha256: malformed"),
    ("relative path", "pilot_root", "home/byk", "pilot_root: malformed"),
    ("missing key", "marker", KeyError, "marker: missing required key"),
    ("missing nested key", "binaries.launcher.sha256", KeyError, "binaries.launcher.sha256: missing"),
    ("bad unit name", "units.slice", "opencode pty", "units.slice: malformed"),
    ("list for mapping", "build", ["x"], "build: expected a mapping"),
    ("node version without v", "runtime.node_version", "26.4.0", "runtime.node_version: malformed"),
    ("runtime pin upper-case", "runtime.sha256", "AB" * 32, "runtime.sha256: malformed"),
    ("string for list", "cutover.plugins", "followup", "cutover.plugins: expected a list"),
    ("empty list", "cutover.candidate_ui", [], "cutover.candidate_ui: expected at least 1"),
    ("bad list item", "cutover.plugins", ["followup", "Local PTY"], "cutover.plugins[1]: malformed"),
    ("relative URL path", "cutover.candidate_health", "api/health", "cutover.candidate_health: malformed"),
    ("string for bool", "isolation.session_network", "yes", "isolation.session_network: expected bool"),
    ("missing runtime", "runtime", KeyError, "runtime: missing required key"),
    ("missing server_env", "cutover.server_env", KeyError, "cutover.server_env: missing"),
    ("missing runtime pin", "runtime.sha256", KeyError,
     "runtime.sha256: missing required key (RUNTIME-1: the SHA-256 of the exact Node 26.4 SEA"),
    ("placeholder runtime pin", "runtime.sha256", "FILL-IN", "runtime.sha256: FILL-IN 'FILL-IN' (RUNTIME-1"),
    ("missing supervisor ExecStart pin", "supervisor_exec", KeyError, "supervisor_exec: missing required key"),
    ("supervisor ExecStart without argv", "supervisor_exec.argv", [], "supervisor_exec.argv: expected at least 1"),
    ("supervisor ExecStart runs another program", "supervisor_exec.path",
     "/usr/local/libexec/opencode-pty-supervisor.copy",
     "supervisor_exec.path: '/usr/local/libexec/opencode-pty-supervisor.copy' is not binaries.supervisor.path"),
    ("missing bun", "plugin.bun", KeyError, "plugin.bun: missing required key"),
    ("missing harness", "plugin.harness", KeyError, "plugin.harness: missing required key"),
    ("relative harness", "plugin.harness", "pty-plugin-smoke.ts", "plugin.harness: malformed"),
    ("missing bun pin", "plugin.bun_sha256", KeyError,
     "plugin.bun_sha256: missing required key (PLUGIN-1: the SHA-256 of the bun"),
    ("missing harness pin", "plugin.harness_sha256", KeyError,
     "plugin.harness_sha256: missing required key (PLUGIN-1: the SHA-256 of the smoke harness"),
    ("short harness pin", "plugin.harness_sha256", "ef" * 31, "plugin.harness_sha256: malformed value"),
    ("string for harness args", "plugin.fresh_args", "--helper {helper}", "plugin.fresh_args: expected a list"),
    ("success line not a regex", "plugin.success.last_line", "PASS (",
     "plugin.success.last_line: not a regular expression"),
    ("no success report", "plugin.success", KeyError, "plugin.success: missing required key"),
    ("missing session variable", "session_environment.TERM", KeyError,
     "session_environment.TERM: missing"),
    ("extra session variable", "session_environment.SHELL", "/bin/sh",
     "session_environment.SHELL: unknown key"),
    ("newline in a session value", "session_environment.LANG", "C\nX", "session_environment.LANG: malformed"),
    ("missing admission", "admission", KeyError, "admission: missing required key"),
    ("missing HELLO timeout", "admission.hello_timeout_s", KeyError, "admission.hello_timeout_s: missing"),
    ("no quota", "admission.unauth_quota", 0, "admission.unauth_quota: 0 is not a positive bound"),
    ("string for a quota", "admission.unauth_quota", "8", "admission.unauth_quota: expected int"),
]


@pytest.mark.parametrize("name,key,value,expect", BAD, ids=[b[0] for b in BAD])
def test_bad_inventory_is_one_line_naming_file_and_key(tmp_path, name, key, value, expect):
    f = tmp_path / "inv.yml"
    f.write_text(yaml.safe_dump(_set(_good(), key, value)))
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(f)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{f}: ")
    assert expect in msg


@pytest.mark.parametrize("text,expect", [
    ("all: [1]", "all.hosts"),
    ("all: {hosts: {a: {}, b: {}}}", "exactly one host"),
    ("nothing: 1", "(top)"),
    ("all: {hosts: {a: {x: 1}}, vars: {}}", "all.vars: unknown key"),
    ("all: {hosts: {a: [1", "(yaml)"),
])
def test_malformed_structure(tmp_path, text, expect):
    f = tmp_path / "inv.yml"
    f.write_text(text)
    with pytest.raises(inventory.InventoryError, match=None) as e:
        inventory.load(f)
    assert expect in str(e.value) and str(e.value).startswith(str(f))


def test_missing_file(tmp_path):
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(tmp_path / "nope.yml")
    assert str(e.value) == f"{tmp_path / 'nope.yml'}: (file): no such file"


def test_an_inventory_that_does_not_load_runs_nothing_and_says_why_first_and_last(tmp_path, safe_dir):
    """Issue 22: not a usage error any more: the preflight names the inventory's
    problem, no test runs, the JUnit report is written and leads with it (the
    real suite, in a copy with a run lock of its own and a fake host:
    suitecopy.py)."""
    f = tmp_path / "inv.yml"
    f.write_text(yaml.safe_dump(_set(_good(), "revision", "xyz")))
    copy = suite_copy(safe_dir / "checkout", f"{safe_dir}/run", fake_host=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "acceptance/", f"--inventory={f}",
                           f"--report-dir={tmp_path / 'r'}"],
                          cwd=copy, capture_output=True, text=True, timeout=120)
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    assert done.returncode != 0, done.stdout + done.stderr
    said = f"NOT READY: preflight: inventory: {f}: all.hosts.pilot.revision: malformed value"
    assert lines[-2].startswith(said) and lines[-1].startswith("NOT READY: "), lines[-3:]
    assert "passed" not in done.stdout and " failed" not in done.stdout
    (report,) = (tmp_path / "r").glob("acceptance-*.xml")
    first = ET.parse(report).getroot().find("./testsuite/properties/property")
    assert first.get("name") == "preflight" and "revision: malformed value" in first.get("value")



FREE = ("unit_properties.supervisor", "unit_properties.slice", "build.env")  # mappings of any keys


def _keys(node, dotted=""):
    """Every key of the host vars, dotted, sections and leaves alike."""
    for key, value in node.items():
        here = f"{dotted}{key}"
        yield here
        if isinstance(value, dict) and here not in FREE:
            yield from _keys(value, here + ".")


def _reference_keys():
    return list(_keys(yaml.safe_load((REPO / "inventories/reference.yml").read_text())["all"]["hosts"]["reference"]))


def _without(tmp_path, dotted):
    data = yaml.safe_load((REPO / "inventories/reference.yml").read_text())
    node = data["all"]["hosts"]["reference"]
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    del node[last]
    f = tmp_path / "inv.yml"
    f.write_text(yaml.safe_dump(data))
    return f


def _key(dotted):
    """The schema's Key for a dotted key of the inventory."""
    sec = inventory.SCHEMA
    *parents, last = dotted.split(".")
    for p in parents:
        sec = sec.keys[p].spec
    return sec.keys[last]


@pytest.mark.parametrize("dotted", _reference_keys())
def test_each_key_of_the_reference_inventory_is_required_exactly_when_the_dataclasses_say(tmp_path, dotted):
    """Issue 23: the required keys are the fields without a default (one edit
    per key): removing any one key of inventories/reference.yml is refused
    naming that key when it is required, and otherwise loads, the attribute
    then its field's default."""
    f = _without(tmp_path, dotted)
    if _key(dotted).required:  # required, in a section that is there
        with pytest.raises(inventory.InventoryError) as e:
            inventory.load(f)
        assert str(e.value).startswith(f"{f}: all.hosts.reference.{dotted}: missing required key"), str(e.value)
        return
    holder = inventory.load(f)
    *parents, last = dotted.split(".")
    for p in parents:
        holder = getattr(holder, p)
    (field,) = [x for x in dataclasses.fields(holder) if x.name == last]
    default = field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
    assert getattr(holder, last) == default


def test_the_optional_keys_are_those_with_a_default():
    """Every required key is in the reference inventory; of its keys, these alone may be left out."""
    assert inventory.REQUIRED <= set(_reference_keys())
    session = {f"unit_properties.session.{k}" for k in inventory.section_of(inventory.SessionUnitProperties).keys}
    assert set(_reference_keys()) - inventory.REQUIRED - session == {
        "ansible_connection", "build.go_version", "plugin.deadline_s", "cutover.environment",
        "unit_properties", "unit_properties.supervisor", "unit_properties.slice", "unit_properties.session",
        "session_stop", "session_stop.term_grace_s", "session_stop.timeout_s"}
    # an optional section's own keys are required where it is given
    assert all(_key(k).required for k in session)


def test_a_field_without_a_default_is_a_required_key():
    """What makes a key required is its dataclass field alone."""
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Section:
        must: Annotated[str, inventory.ABS_PATH]
        listed: Annotated[tuple[str, ...], inventory.AtLeast(0)]
        may: int = 3
    keys = inventory.section_of(Section).keys
    assert keys["must"].required and keys["listed"].required and not keys["may"].required
    assert keys["must"].spec == inventory.Leaf(str, inventory.ABS_PATH)
    assert keys["listed"].spec == inventory.ListOf(inventory.Leaf(str), 0)


def test_the_inventory_is_read_as_frozen_attributes():
    """Issue 23: attribute access a type checker follows, and nothing a test can change."""
    inv = inventory.load(REPO / "inventories/reference.yml")
    assert inv.units.supervisor == "opencode-pty-supervisor.service"
    assert inv.binaries.client.path == "/usr/local/libexec/opencode-pty-client"
    assert inv.plugin.args == ("--helper", "/usr/local/libexec/opencode-pty-client", "--isolated-supervisor")
    assert inv.plugin.deadline_s == 60 and inv.limits.runtime_bytes == 512 << 20
    assert inv.session_environment.as_dict() == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/byk",
                                                 "TERM": "xterm-256color", "LANG": "C.UTF-8"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        inv.units.supervisor = "other.service"
    with pytest.raises(TypeError):
        inv.unit_properties.supervisor["User"] = "root"
