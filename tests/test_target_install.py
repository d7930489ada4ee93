"""A target host's own install, tried on a fresh reference host with no
network (docs/operator.md, "Installing the suite", issue 22): the suite's checkout copied in
as an operator would bring it, `tools/setup-target.sh --wheelhouse DIR` from a
wheelhouse that `tools/wheelhouse.sh` built on this (connected) machine, then
the suite from that install: READY with a marker, and the host's packages
untouched (no apt, no dpkg: the install is the .venv alone)."""

import pytest

from conftest import REPO
from tests.refhost.targetcheckout import CHECKOUT, WHEELS, build_wheelhouse, copy_script
from tests.refhost.run import GUEST_SRC, MARKER, deploy, new_machine, new_run_id, prepare, said_of

from leftovers import assert_nothing_left

pytestmark = [pytest.mark.refhost]

PACKAGES = "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' | sort | sha256sum"


def test_the_offline_target_install_runs_the_suite_ready(tmp_path):
    wheels = tmp_path / "wheelhouse"
    build_wheelhouse(REPO, wheels)
    run_id = new_run_id()
    name = f"ptyacc-{run_id.lower()}-target"
    out = REPO / "reports" / "reference" / f"target-install-{run_id}"
    out.mkdir(parents=True)
    m = new_machine(REPO, prepare(REPO), name, out, binds=[(str(wheels), WHEELS, True)])
    try:
        m.boot()
        assert deploy(m, [], quiet=True), "the reference deployment failed"
        before = m.run(["/bin/sh", "-c", PACKAGES]).stdout
        assert m.run(["/bin/sh", "-ec", copy_script(GUEST_SRC)]).returncode == 0
        offline = m.run(["/bin/sh", "-c", "python3 -I -c 'import socket; socket.create_connection"
                         "((\"pypi.org\", 443), timeout=3)'"])
        assert offline.returncode != 0, "the reference host reaches the network: not an offline test"
        setup = m.run(["/bin/sh", f"{CHECKOUT}/tools/setup-target.sh", "--wheelhouse", WHEELS],
                      cwd=CHECKOUT, env={"PYTHONDONTWRITEBYTECODE": "1"})
        (out / "setup-target.txt").write_bytes(setup.stdout)
        assert setup.returncode == 0, setup.stdout.decode(errors="replace")[-3000:]
        suite = m.run([f"{CHECKOUT}/.venv/bin/pytest", "acceptance/", "--inventory",
                       "inventories/reference.yml"], cwd=CHECKOUT, env={"PYTHONDONTWRITEBYTECODE": "1"})
        (out / "suite-output.txt").write_bytes(suite.stdout)
        output = suite.stdout.decode(errors="replace")
        lines = output.strip().splitlines()
        assert lines and lines[-1] == f"READY: marker written {MARKER}", said_of(output)
        assert m.guest_exists(MARKER)
        assert m.run(["/bin/sh", "-c", PACKAGES]).stdout == before, "the install changed the host's packages"
    finally:
        m.shutdown()
    assert_nothing_left(name)
