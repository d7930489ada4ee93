"""The fleet playbook (fleet/pty-acceptance.yml) against two reference hosts
at once through a real Ansible connection (community.docker.nsenter into
each machine's namespaces; the machines have no network to SSH over), one
good and one with a fault of the catalogue. The good host is a target as
docs/operator.md has it: the checkout copied in, its .venv made by
the play with the target's own setup (tools/setup-target.sh, offline from a
wheelhouse), the suite run by the playbook's defaults. Each host signs its
Statement with its own key (pty_acceptance_sign_key) and the summary
verifies each envelope with that host's public key (issue 32 item 3). The
good host's line says READY, signed and verified, and its marker is written;
the faulty host's says NOT READY naming the fault's requirement, its FAILED
Statement signed and verified; each host's files came back under the
playbook's names; securesystemslib verifies each envelope with its defaults;
and ansible-playbook exits non-zero."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from pty_acceptance.report import fleet, intoto

from conftest import REPO
from signkeys import openssl_key
from tests.mutants import catalogue
from tests.refhost.junit import Report
from tests.refhost.targetcheckout import CHECKOUT, WHEELS, build_wheelhouse, copy_script
from tests.refhost.run import GUEST_OUT, GUEST_PYTHON, GUEST_SRC, MARKER, deploy, new_machine, new_run_id, prepare

from leftovers import assert_nothing_left

pytestmark = [pytest.mark.refhost]

PLAYBOOK = REPO / "fleet" / "pty-acceptance.yml"
# OWN-1, caught by test_ownership early and cheaply (a chown after deployment)
FAULT = catalogue.BY_ID["supervisor-owned-by-service-user"]
KEYS = "/etc/opencode/keys"  # each host's signing key, root's alone


def host_vars(host: str, leader: int, pubkey: Path) -> dict:
    common = {
        "ansible_connection": "community.docker.nsenter",
        "ansible_nsenter_pid": leader,
        # root already; the machine has no sudo. su is util-linux's, in every Debian.
        "ansible_become_method": "su",
        "ansible_python_interpreter": "/usr/bin/python3",
        "pty_acceptance_inventory": "inventories/reference.yml",
        "pty_acceptance_sign_key": f"{KEYS}/{host}.pem",
        "pty_acceptance_sign_pubkey": str(pubkey),
    }
    if host == "good":  # a target: the playbook's defaults, the .venv by setup-target.sh
        return {**common, "pty_acceptance_setup_target": True, "pty_acceptance_wheelhouse": WHEELS}
    return {**common, "pty_acceptance_checkout": GUEST_SRC, "pty_acceptance_command": [GUEST_PYTHON, "-m", "pytest"],
            "pty_acceptance_report_dir": f"{GUEST_OUT}/reports"}


def default_keyid(pub: Path) -> str:
    from cryptography.hazmat.primitives import serialization
    from securesystemslib.signer import SSlibKey
    return SSlibKey.from_crypto(serialization.load_pem_public_key(pub.read_bytes())).keyid


def test_fleet_two_reference_hosts():
    if shutil.which("ansible-playbook") is None:
        pytest.fail("ansible-playbook is not installed (tools/setup.sh installs Debian's ansible)")
    t0 = time.monotonic()
    run_id = new_run_id()
    out = REPO / "reports" / "fleet" / f"test-{run_id}"
    out.mkdir(parents=True)
    tree = prepare(REPO)
    with tempfile.TemporaryDirectory(prefix="ptyacc-fleet-") as tmp:
        script = Path(tmp, f"{FAULT.id}.sh")
        script.write_text(catalogue.apply_script(FAULT))
        build_wheelhouse(REPO, Path(tmp, "wheelhouse"))
        keys = {}
        for host in ("good", "bad"):  # a key per host
            Path(tmp, "keys", host).mkdir(parents=True, mode=0o700)
            keys[host] = openssl_key(Path(tmp, "keys", host))
        names = {"good": f"ptyacc-{run_id.lower()}-good", "bad": f"ptyacc-{run_id.lower()}-bad"}
        machines = {}
        try:
            for host, before in (("good", []), ("bad", [script])):
                binds = [(str(Path(tmp, "wheelhouse")), WHEELS, True)] if host == "good" else []
                machines[host] = new_machine(REPO, tree, names[host], out / f"{host}-machine", before, binds=binds)

            def up(host: str) -> bool:
                m = machines[host]
                m.boot()
                if not deploy(m, [script] if host == "bad" else [], quiet=True):
                    return False
                key = m.run(["/bin/sh", "-ec", f"umask 077; mkdir -p {KEYS}; cat > {KEYS}/{host}.pem"],
                            input=keys[host][0].read_bytes())
                # the good host gets the checkout as an operator brings it (its .venv: the play's setup-target.sh)
                copied = m.run(["/bin/sh", "-ec", copy_script(GUEST_SRC)]) if host == "good" else key
                return key.returncode == 0 and copied.returncode == 0

            with ThreadPoolExecutor(max_workers=2) as pool:
                deployed = dict(zip(machines, pool.map(up, machines), strict=True))
            assert all(deployed.values()), f"deployment, the fault script or the key/checkout copy failed: {deployed}"
            t_deployed = time.monotonic()
            inventory = {"all": {"hosts": {h: host_vars(h, m.leader, keys[h][1]) for h, m in machines.items()}}}
            # the faulty host runs only the modules that catch the fault: the good
            # host's full run gets the CPU (the fault matrix proves the full suite
            # catches it too); its line then also names every ID it did not run
            inventory["all"]["hosts"]["bad"]["pty_acceptance_paths"] = list(FAULT.modules)
            Path(tmp, "hosts.yml").write_text(yaml.safe_dump(inventory))
            Path(tmp, "extra.json").write_text(json.dumps({
                "fleet_out": str(out / "fleet"),
                "fleet_summary": [sys.executable, "-m", "pty_acceptance.cli"]}))
            env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
                       ANSIBLE_LOCAL_TEMP=str(Path(tmp, "ansible-local")), ANSIBLE_FORCE_COLOR="0")
            done = subprocess.run(["ansible-playbook", "-i", str(Path(tmp, "hosts.yml")),
                                   "-e", f"@{Path(tmp, 'extra.json')}", str(PLAYBOOK)],
                                  cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=1800)
            t_played = time.monotonic()
            (out / "ansible-playbook.txt").write_text(done.stdout + done.stderr)
            markers = {h: m.guest_exists(MARKER) for h, m in machines.items()}
            venv = machines["good"].run([f"{CHECKOUT}/.venv/bin/python", "-c", "import sys; print(sys.prefix)"])
            keyids = {h: default_keyid(keys[h][1]) for h in machines}
            pubkeys = {h: keys[h][1].read_bytes() for h in machines}
        finally:
            for m in machines.values():
                m.shutdown()
    for name in names.values():
        assert_nothing_left(name)
    timing = (f"boot+deploy {t_deployed - t0:.0f} s, playbook {t_played - t_deployed:.0f} s, "
              f"total {time.monotonic() - t0:.0f} s")
    print(f"fleet test: {timing}")
    (out / "timing.txt").write_text(timing + "\n")
    log = done.stdout + done.stderr
    assert done.returncode != 0, f"ansible-playbook exited 0 with a NOT READY host:\n{log[-4000:]}"
    # the good host's .venv is the one the play made with setup-target.sh (its suite ran from it: READY below)
    assert venv.returncode == 0 and venv.stdout.decode().strip() == f"{CHECKOUT}/.venv", log[-4000:]
    summary = (out / "fleet" / "summary.txt").read_text().splitlines()
    assert len(summary) == 2, f"not one line per host: {summary}\n{log[-4000:]}"
    signed = {h: f"; Statement signed (openssl, keyid {keyids[h]}), verified" for h in keyids}
    assert f"good: READY: marker written {MARKER}{signed['good']}" in summary, f"{summary}\n{log[-4000:]}"
    bad = [line for line in summary if line.startswith("bad: ")]
    m = re.fullmatch(r"bad: NOT READY: \d+ blockers: ((?:[A-Z]+-\d+ ?)+)" + re.escape(signed["bad"]), bad[0]) \
        if bad else None
    assert m and set(FAULT.breaks) <= set(m.group(1).split()), f"{summary}\n{log[-4000:]}"
    # named because a test of it failed there, not because it was not run
    run_ids = {p.name.split(".", 1)[0] for p in (out / "fleet").glob("*/*.exit-status")}
    assert len(run_ids) == 1, run_ids  # one run, its id on every file it brought back
    rid = run_ids.pop()
    report = Report.parse(out / "fleet" / "bad" / fleet.file_name(rid, fleet.JUNIT))
    assert set(FAULT.breaks) <= report.failed_ids(), [c.name for c in report.failed()]
    for line in summary:  # the summary reached the operator's terminal too
        assert line in log, f"{line!r} not printed by ansible-playbook"
    assert markers == {"good": True, "bad": False}, markers
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1].removesuffix(signed[line.split(": ", 1)[0]])
             for line in summary}
    for host, ready, status in (("good", True, "0"), ("bad", False, "1")):
        d = out / "fleet" / host
        assert sorted(p.name for p in d.iterdir()) == sorted(fleet.file_name(rid, r)
                                                             for r in fleet.FILES + (fleet.ENVELOPE,))
        verified_by_securesystemslib(d / fleet.file_name(rid, fleet.ENVELOPE), pubkeys[host],
                                     (d / fleet.file_name(rid, fleet.STATEMENT)).read_bytes())
        predicate = json.loads((d / fleet.file_name(rid, fleet.STATEMENT)).read_text())["predicate"]
        # READY is WARNED when any test recorded a concern (the reference host's UNIT-9 does), else PASSED
        assert predicate["result"] == intoto.result(ready, predicate["warnedTests"])
        assert (d / fleet.file_name(rid, fleet.EXIT_STATUS)).read_text().strip() == status
        # nothing disagreed: the suite's own last line is the summary's
        assert (d / fleet.file_name(rid, fleet.OUTPUT)).read_text().strip().splitlines()[-1] == lines[host]


def verified_by_securesystemslib(envelope: Path, pubkey: bytes, statement: bytes) -> None:
    """An independent verifier, with its defaults (the keyid included), of what came back."""
    import base64

    from cryptography.hazmat.primitives import serialization
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    key = SSlibKey.from_crypto(serialization.load_pem_public_key(pubkey))
    doc = json.loads(envelope.read_text())
    assert Envelope.from_dict(copy.deepcopy(doc)).verify([key], 1) == {key.keyid: key}
    assert base64.b64decode(doc["payload"]) == statement
