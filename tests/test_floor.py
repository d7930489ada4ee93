"""The contract's floor (spec/floor.py, issue 38 item 5, SUITE-3): an inventory
may make a check stricter, never weaker. The review's reproduction (a filled
target.yml whose session unit keeps privileges and devices, whose success
patterns match anything, naming another supervisor unit and socket) is
refused at load, every weakening named by its key; each weakening alone is
refused naming its key; each stricter value loads; the shipped inventories
load; `inventory check` lists what is below the floor; and a run on such an
inventory runs nothing and ends NOT READY naming the key."""

import pytest
import yaml

from pty_acceptance.decision import invcheck
from pty_acceptance.spec import inventory

from conftest import REPO
from gateproject import assert_refused, run

SESSION = "unit_properties.session"


# (spec/floor.py is imported where a test needs it: the reproductions run, and
# fail, on a checkout without it)


def _filled() -> dict:
    """inventories/target.yml with every FILL-IN filled, as an operator fills it."""
    data = yaml.safe_load((REPO / "inventories/target.yml").read_text())
    host = data["all"]["hosts"]["pilot"]
    host["runtime"]["sha256"] = "ab" * 32
    host["units"]["candidate"] = "opencode-v2-candidate.service"
    host["plugin"].update(bun_sha256="cd" * 32, harness_sha256="ef" * 32)
    host["plugin"]["success"] = {"last_line": "^PASS ", "result_file": r"^smoke-result-\d+\.json$"}
    return data


def _set(data: dict, dotted: str, value) -> dict:
    node = data["all"]["hosts"]["pilot"]
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    return data


def _load(tmp_path, data: dict):
    f = tmp_path / "target.yml"
    f.write_text(yaml.safe_dump(data))
    return f, lambda: inventory.load(f)


REVIEWED = {  # the review's weakened inventory, value by value
    f"{SESSION}.NoNewPrivileges": "no",
    f"{SESSION}.CapabilityBoundingSet": "cap_sys_admin cap_sys_ptrace",
    f"{SESSION}.PrivateDevices": "no",
    f"{SESSION}.DevicePolicy": "auto",
    f"{SESSION}.ProtectProc": "default",
    f"{SESSION}.SystemCallFilter": "",
    f"{SESSION}.InaccessiblePaths": "",
    "plugin.success.last_line": ".",
    "plugin.success.result_file": ".",
    "units.supervisor": "another-supervisor.service",
    "socket": "/run/another/supervisor.sock",
}


def test_the_reviews_weakened_inventory_is_refused_at_load_naming_every_key(tmp_path):
    data = _filled()
    for key, value in REVIEWED.items():
        _set(data, key, value)
    f, load = _load(tmp_path, data)
    with pytest.raises(inventory.InventoryError) as e:
        load()
    said = str(e.value)
    assert said.startswith(f"{f}: ") and "\n" not in said
    for key in REVIEWED:
        assert f"all.hosts.pilot.{key}: " in said, (key, said)
    assert said.endswith(f"({len(REVIEWED)} values below the contract's floor: an inventory may make a check "
                         "stricter, never weaker (SUITE-3, spec/floor.py))"), said


WEAKER = [
    (f"{SESSION}.NoNewPrivileges", "no"),
    (f"{SESSION}.CapabilityBoundingSet", "cap_sys_admin cap_sys_ptrace"),
    (f"{SESSION}.AmbientCapabilities", "cap_net_raw"),
    (f"{SESSION}.SupplementaryGroups", "docker"),
    (f"{SESSION}.RestrictSUIDSGID", "no"),
    (f"{SESSION}.PrivateDevices", "no"),
    (f"{SESSION}.DevicePolicy", "auto"),
    (f"{SESSION}.Delegate", "yes"),
    (f"{SESSION}.ProtectControlGroups", "private"),
    (f"{SESSION}.ProtectProc", "default"),
    (f"{SESSION}.ProtectProc", "ptraceable"),
    (f"{SESSION}.ProcSubset", "all"),
    (f"{SESSION}.RestrictNamespaces", "no"),
    (f"{SESSION}.RestrictAddressFamilies", ""),
    (f"{SESSION}.RestrictAddressFamilies", "~AF_PACKET"),
    (f"{SESSION}.RestrictAddressFamilies", "AF_UNIX AF_NETLINK"),
    (f"{SESSION}.SystemCallArchitectures", ""),
    (f"{SESSION}.SystemCallFilter", ""),
    (f"{SESSION}.SystemCallFilter", "~@mount"),
    (f"{SESSION}.SystemCallFilter", "@system-service @privileged"),
    (f"{SESSION}.LockPersonality", "no"),
    (f"{SESSION}.RestrictRealtime", "no"),
    (f"{SESSION}.ProtectKernelTunables", "no"),
    (f"{SESSION}.ProtectKernelModules", "no"),
    (f"{SESSION}.ProtectKernelLogs", "no"),
    (f"{SESSION}.Environment", "PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/byk TERM=xterm-256color "
                               "LANG=C.UTF-8 LD_PRELOAD=/tmp/x.so"),
    (f"{SESSION}.Environment", "PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/byk LANG=C.UTF-8"),
    (f"{SESSION}.Environment", "PATH=/tmp/bin HOME=/home/byk TERM=xterm-256color LANG=C.UTF-8"),
    (f"{SESSION}.ProtectSystem", "no"),
    (f"{SESSION}.PrivateTmp", "no"),
    (f"{SESSION}.InaccessiblePaths", ""),
    (f"{SESSION}.InaccessiblePaths", "/run/opencode-pty -/run/dbus -/run/user"),
    (f"{SESSION}.BindPaths", "/run/dbus"),
    (f"{SESSION}.BindReadOnlyPaths", "/run/dbus/system_bus_socket"),
    (f"{SESSION}.BindReadOnlyPaths", "/var/run/docker.sock:/run/d.sock"),
    (f"{SESSION}.KillMode", "process"),
    (f"{SESSION}.KillSignal", "9"),
    (f"{SESSION}.KillSignal", "1"),
    (f"{SESSION}.FinalKillSignal", "15"),
    (f"{SESSION}.SendSIGKILL", "no"),
    (f"{SESSION}.TimeoutStopUSec", "infinity"),
    (f"{SESSION}.TimeoutStopUSec", "1min"),
    (f"{SESSION}.CollectMode", "inactive"),
    (f"{SESSION}.Type", "simple"),
    ("plugin.success.last_line", "."),
    ("plugin.success.last_line", ".*"),
    ("plugin.success.last_line", "^"),
    ("plugin.success.last_line", "[A-Z]"),
    ("plugin.success.result_file", "."),
    ("plugin.success.result_file", r"\.json$"),
    ("units.supervisor", "another-supervisor.service"),
    ("units.slice", "system.slice"),
    ("units.peer", "opencode.service"),
    ("units.production", "opencode-v2-preview.service"),  # the seed's CUTOVER names opencode.service
    ("socket", "/run/another/supervisor.sock"),  # not the supervisor's RuntimeDirectory=
    ("socket", "/tmp/supervisor.sock"),
    ("socket", "/run/supervisor.sock"),
    ("binaries.launcher.path", "/usr/local/bin/opencode-pty-launcher"),
    ("marker", "/etc/opencode/another-marker"),
    ("marker", "/srv/etc/opencode/pty-supervisor-verified"),  # under another root than the binaries
    # server.env's variables: what changes what the runtime or the loader loads, even listed (issue 37 item 2)
    ("cutover.environment", ["OPENCODE_PASSWORD", "NODE_OPTIONS"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "NODE_PATH"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "NODE_EXTRA_CA_CERTS"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "LD_PRELOAD"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "LD_LIBRARY_PATH"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "LD_AUDIT"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "GLIBC_TUNABLES"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "GCONV_PATH"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "MALLOC_CHECK_"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "OPENSSL_CONF"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "BUN_OPTIONS"]),
    ("cutover.environment", ["OPENCODE_PASSWORD", "UV_USE_IO_URING"]),
    ("cutover.environment", ["OPENCODE_LOG_LEVEL"]),  # CUT-3's password not among them
]


@pytest.mark.parametrize("key,value", WEAKER, ids=[f"{k}={v!r}" for k, v in WEAKER])
def test_each_weakening_is_refused_at_load_naming_its_key(tmp_path, key, value):
    f, load = _load(tmp_path, _set(_filled(), key, value))
    with pytest.raises(inventory.InventoryError) as e:
        load()
    said = str(e.value)
    assert said.startswith(f"{f}: all.hosts.pilot.{key}: "), said
    assert "\n" not in said, said
    if key == "marker" and "malformed value" in said:  # MARKER_PATH's shape refuses it first (MARK-4)
        return
    # a socket elsewhere is also one the session units' InaccessiblePaths= does not name
    assert f"({1 + (key == 'socket')} values below the contract's floor" in said, said


STRICTER = [
    (f"{SESSION}.DevicePolicy", "strict"),
    (f"{SESSION}.ProtectControlGroups", "strict"),
    (f"{SESSION}.ProtectProc", "noaccess"),
    (f"{SESSION}.ProtectSystem", "strict"),
    (f"{SESSION}.PrivateTmp", "disconnected"),
    (f"{SESSION}.RestrictAddressFamilies", "AF_UNIX"),
    (f"{SESSION}.RestrictAddressFamilies", "none"),
    (f"{SESSION}.SystemCallFilter", "@basic-io @file-system @process @signal"),
    (f"{SESSION}.InaccessiblePaths", "/run/opencode-pty /run/docker.sock /run/dbus /run/user -/run/containerd"),
    (f"{SESSION}.TimeoutStopUSec", "3s"),
    ("plugin.success.last_line", r"^PASS 10/10 checks \(pty-plugin-smoke\)$"),
    ("plugin.success.result_file", r"^smoke-result-[0-9]{3}\.json$"),
    ("socket", "/run/opencode-pty/another.sock"),  # another name in the supervisor's RuntimeDirectory=
]


@pytest.mark.parametrize("key,value", STRICTER, ids=[f"{k}={v!r}" for k, v in STRICTER])
def test_each_stricter_value_loads(tmp_path, key, value):
    _, load = _load(tmp_path, _set(_filled(), key, value))
    inv = load()
    node = inv
    for part in key.split("."):
        node = getattr(node, part)
    assert node == value


@pytest.mark.parametrize("name", ["reference.yml", "reference-python.yml", "reference-trixie.yml",
                                  "reference-trixie-python.yml"])
def test_the_shipped_inventories_still_load(name):
    assert inventory.load(REPO / "inventories" / name).host == "reference"
    assert inventory.below_floor(yaml.safe_load((REPO / "inventories" / name).read_text())["all"]["hosts"]
                                 ["reference"]) == []


def test_the_shipped_target_inventory_filled_in_loads(tmp_path):
    from pty_acceptance.spec import floor

    _, load = _load(tmp_path, _filled())
    assert load().marker == floor.MARKER


def test_the_seeds_paths_under_one_root_load_as_a_fake_target_does(target):
    """The suite's own fake targets lay the seed's paths out under a directory
    (as verify-marker --root reads one): one root for the binaries and the marker."""
    from pty_acceptance.spec import floor

    inv = inventory.load(target.inventory)
    root = inv.marker.removesuffix(floor.MARKER)
    assert root and [b.path for b in inv.binaries_list] == [root + p for p in floor.BINARIES.values()]


def test_inventory_check_lists_what_is_below_the_floor(target):
    data = yaml.safe_load(target.inventory.read_text())
    data["all"]["hosts"]["fake"]["plugin"]["success"]["last_line"] = "."
    data["all"]["hosts"]["fake"]["units"]["slice"] = "system.slice"
    target.inventory.write_text(yaml.safe_dump(data))
    invalid = {line.key: line.detail for line in invcheck.check(str(target.inventory))
               if line.status == invcheck.INVALID}
    assert "below the contract's floor" in invalid["plugin.success.last_line"]
    assert "is not the seed's opencode-pty.slice" in invalid["units.slice"]


def test_a_run_on_an_inventory_below_the_floor_runs_nothing_and_names_the_key(project, target):
    data = yaml.safe_load(target.inventory.read_text())
    data["all"]["hosts"]["fake"]["plugin"]["success"]["result_file"] = "."
    target.inventory.write_text(yaml.safe_dump(data))
    res = run(project, target)
    assert_refused(res, target, "SUITE-3")
    out = "\n".join(res.outlines)
    assert "all.hosts.fake.plugin.success.result_file: '.' matches" in out, out[-3000:]
    assert res.parseoutcomes().get("passed", 0) == 0


def test_timespans_as_systemctl_prints_them():
    from pty_acceptance.spec import floor

    assert [floor.timespan_s(v) for v in ("5s", "1min 30s", "500ms", "2h", "infinity", "", "5 parsecs")] == \
        [5.0, 90.0, 0.5, 7200.0, None, None, None]


def test_server_envs_variables_within_the_floor_load(tmp_path):
    """cutover.environment may list what the review did (not the floor's): it loads as a
    tuple; without the key only the password is allowed."""
    wanted = ["OPENCODE_PASSWORD", "OPENCODE_LOG_LEVEL", "PATH", "XDG_CONFIG_HOME"]
    _, load = _load(tmp_path, _set(_filled(), "cutover.environment", wanted))
    assert load().cutover.environment == tuple(wanted)
    data = _filled()
    data["all"]["hosts"]["pilot"]["cutover"].pop("environment")
    _, load = _load(tmp_path, data)
    assert load().cutover.environment == ("OPENCODE_PASSWORD",)


def test_a_name_systemd_would_not_take_is_the_schemas_to_name(tmp_path):
    f, load = _load(tmp_path, _set(_filled(), "cutover.environment", ["OPENCODE_PASSWORD", "A B"]))
    with pytest.raises(inventory.InventoryError, match=r"cutover.environment\[1\]: malformed value 'A B'"):
        load()
