"""SUITE-4: the paths the inventory names in the service user's trees (the
runtime, the candidate unit file) and the inventory itself are reached by
hostfs's walk from / like everything else: a link in any component is
refused, never followed (not only the last component); the inventory is
read bounded, never as a FIFO (which would block the run), and a malformed
one is described, never echoed.

Whatever could hang runs in a child process with a deadline."""

import os

import pytest

from pty_acceptance.candidate import runtimeunit
from pty_acceptance.decision import invcheck
from pty_acceptance.provenance import node_runtime
from pty_acceptance.spec import inventory

from childrun import in_child

TOKEN = "pty-acceptance-walked-secret-51f0"
UNIT = "[Service]\nExecStart=/opt/node/bin/opencode2-node serve\n"


@pytest.fixture
def hop(safe_dir):
    """safe_dir/hop: a link to safe_dir/real, a directory holding the files."""
    real = safe_dir / "real"
    real.mkdir()
    (safe_dir / "hop").symlink_to(real)
    return safe_dir / "hop"


def test_the_runtime_is_not_read_through_a_directory_link(hop):
    (hop / "opencode2-node").write_bytes(b"\x7fELF" + b"\0" * 64)
    with pytest.raises(node_runtime.RuntimeUnreadable, match="hop is a symlink, not a directory"):
        node_runtime.identify(str(hop / "opencode2-node"))


def test_the_runtime_is_not_matched_through_a_directory_link(hop):
    target = hop / "python"
    target.write_bytes(b"x")
    st = os.stat(target)
    same, why = node_runtime.same_file(str(target), (st.st_dev, st.st_ino))
    assert not same and "hop is a symlink" in why, why
    assert node_runtime.same_file(str(hop.parent / "real/python"), (st.st_dev, st.st_ino))[0]


def test_the_candidate_unit_is_not_read_through_a_directory_link(hop):
    (hop / "opencode-v2.service").write_text(UNIT)
    with pytest.raises(runtimeunit.HandoffError, match="hop is a symlink, not a directory"):
        runtimeunit.runtime_unit_text(str(hop / "opencode-v2.service"))
    assert node_runtime.unit_file_text(str(hop.parent / "real/opencode-v2.service")) == UNIT


def test_the_candidate_unit_is_bounded_and_never_opened_as_a_fifo(safe_dir):
    big = safe_dir / "big.service"
    big.write_text("#" * (node_runtime.MAX_UNIT_FILE + 1))
    with pytest.raises(node_runtime.UnitFileError, match="over the suite's bound on a unit file"):
        node_runtime.unit_file_text(str(big))
    os.mkfifo(safe_dir / "fifo.service")
    done = in_child("from pty_acceptance.provenance import node_runtime\n"
                    f"try:\n    node_runtime.unit_file_text({str(safe_dir / 'fifo.service')!r})\n"
                    "except node_runtime.UnitFileError as e:\n    print(e)\n")
    assert "fifo.service is a FIFO, not a regular file" in done.stdout, done.stdout + done.stderr


def _inventory(tmp, text: str):
    p = tmp / "inv.yml"
    p.write_text(text)
    return p


def test_the_inventory_is_not_read_through_a_directory_link(hop, target):
    (hop / "inv.yml").write_bytes(target.inventory.read_bytes())
    with pytest.raises(inventory.InventoryError, match="hop is a symlink, not a directory"):
        inventory.load(hop / "inv.yml")
    assert inventory.marker_named(hop / "inv.yml") is None
    assert inventory.load(hop.parent / "real/inv.yml").host == "fake"


def test_an_inventory_that_is_a_fifo_is_refused_without_blocking(safe_dir):
    fifo = safe_dir / "inv.yml"
    os.mkfifo(fifo)
    done = in_child("from pty_acceptance.spec import inventory\n"
                    f"print(inventory.marker_named({str(fifo)!r}))\n"
                    f"try:\n    inventory.load({str(fifo)!r})\n"
                    "except inventory.InventoryError as e:\n    print(e)\n")
    assert done.stdout.splitlines() == ["None", f"{fifo}: (file): {fifo} is a FIFO, not a regular file (not read)"], \
        done.stdout + done.stderr


def test_an_inventory_over_its_bound_is_not_read(safe_dir):
    big = _inventory(safe_dir, "#" * (1 << 20) + "\n")
    with pytest.raises(inventory.InventoryError, match="over the suite's bound on an inventory file"):
        inventory.load(big)


@pytest.mark.parametrize("text", [
    f"all:\n  hosts: [\n{TOKEN}: {{\n",                     # a flow sequence never closed
    f"all:\n  hosts:\n    h: {{marker: *{TOKEN}}}\n",         # an alias never defined
    f"all: !{TOKEN} x\n",                                      # a tag no constructor knows
    f"{TOKEN}\n  : - : x\n",
])
def test_a_malformed_inventory_is_described_never_echoed(safe_dir, text):
    """A file that is not an inventory may be anything (a root-only secret
    given as --inventory): YAML's complaint and where, never the file's text."""
    p = _inventory(safe_dir, text)
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(p)
    said = str(e.value)
    assert said.startswith(f"{p}: (yaml): ") and " at line " in said, said
    assert TOKEN not in said, said
    lines = invcheck.check(str(p))
    assert len(lines) == 1 and TOKEN not in str(lines[0]), lines


def test_a_long_value_is_shown_short_and_escaped(target):
    text = target.inventory.read_text().replace("marker: ", "marker: \"x\\e[2J" + "y" * 500 + "\"\n      _was: ", 1)
    p = _inventory(target.base, text)
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(p)
    said = str(e.value)
    assert "\x1b" not in said and "y" * 100 not in said and "characters)" in said, said
