"""acceptance/test_cutover.py run for real (a pytest subprocess) against
stand-in servers on loopback: it passes when the stand-ins answer as the API
reading says, names what is wrong when they do not, and the server.env
password never appears in its output or its JUnit report. This machine has no
systemd: the suite's bus is a stand-in whose units.production and
units.candidate have this test process (which serves the stand-ins) as their
MainPID, unless a test says otherwise (PTY_STANDIN_UNITS)."""

import base64
import json
import os
import pathlib
import pwd
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import REPO
from suitecopy import suite_copy
from opencode_standin import Behaviour, StandIn

PW = "standin-pw-7c1e0b9a-Zz"
USER = "root"  # the stand-ins run in this (root) process or its child: the listener the suite identifies
RUNTIME = os.path.realpath(sys.executable)  # what /proc/<this pid>/exe is
TOKEN = base64.b64encode(f"opencode:{PW}".encode()).decode()


COPY = {"path": None}

# systemd as the stand-ins' units say it (host/unitowner.py reads only these properties)
STANDIN_BUS = '''

import json as _json
import os as _os

from pty_acceptance.host.bus import SERVICE_IFACE as _SERVICE


class _StandInBus:
    """Every unit active, its MainPID the process serving the stand-ins (the suite's
    parent), unless the copy's UNITS_FILE ({unit: {ActiveState, MainPID, InvocationID}
    or null: not loaded}, beside the copy: the clean start keeps no variable of the
    test's) says otherwise."""

    def properties(self, name, iface=None, load=False):
        copy = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
        with open(_os.path.join(_os.path.dirname(copy), "standin-units.json")) as f:
            units = _json.load(f)
        state = units.get(name, {})
        if state is None:
            return None
        if iface == _SERVICE:
            return {"MainPID": state.get("MainPID", _os.getppid()), "ControlGroup": "/standin.service",
                    "Result": state.get("Result", "success")}
        return {"ActiveState": state.get("ActiveState", "active"), "SubState": "running",
                "InvocationID": bytes.fromhex(state.get("InvocationID", "01" * 16))}


@pytest.fixture(scope="session")
def bus():
    yield _StandInBus()
'''


@pytest.fixture(scope="module", autouse=True)
def _judged_environment():
    """CUT-2 reads /proc/<pid>/environ of the identified listener: here this very
    process, whose environment is the lab's (a sandbox may set NODE_EXTRA_CA_CERTS,
    SSL_CERT_FILE: names the floor refuses). Each such name is renamed in place in
    this process's initial environment block (/proc/self/mem, env_start..env_end
    of /proc/self/stat), its first letter made "x", and put back after the module.
    os.environ (a copy Python made at start) is untouched; the suite's runs get it
    explicitly (_run). It is also what any process can do to its own block: a
    refused name there is proof, its absence only that none was left visible."""
    from pty_acceptance.spec import floor
    stat = open("/proc/self/stat", "rb").read()
    fields = stat[stat.rindex(b")") + 2:].split()
    start, end = int(fields[50 - 3]), int(fields[51 - 3])
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        block = mem.read(end - start)
        changed = bytearray(block)
        offset = 0
        for entry in block.split(b"\0"):
            name = entry.partition(b"=")[0].decode("utf-8", "surrogateescape")
            if floor.refused_variable(name):
                changed[offset] = ord("x")
            offset += len(entry) + 1
        mem.seek(start)
        mem.write(bytes(changed))
    yield
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        mem.write(block)


@pytest.fixture(autouse=True)
def _own_checkout(safe_dir):
    """The suite in a copy of its own with a run lock of its own (under a
    root-owned /run directory, not the host's), a fake host and a stand-in bus:
    suitecopy.py."""
    COPY["path"] = suite_copy(safe_dir / "checkout", f"{safe_dir}/run", fake_host=True,
                              conftest_suffix=STANDIN_BUS)
    yield
    COPY["path"] = None


def _run(tmp_path, prod_port, cand_port, env_file, extra=(), runtime=RUNTIME, units=None, candidate=None):
    """The suite's cutover module against the stand-ins; `candidate` (a forked
    StandIn) is the candidate unit's MainPID unless `units` says otherwise."""
    units = dict(units or {})
    if candidate is not None:
        units.setdefault("opencode-v2-preview.service", {"MainPID": candidate.pid})
    d = yaml.safe_load((REPO / "inventories/reference.yml").read_text())
    (vars_,) = d["all"]["hosts"].values()
    vars_["service_user"] = USER
    vars_["runtime"]["binary"] = runtime
    vars_["ports"] = {"production": prod_port, "candidate": cand_port}
    vars_["cutover"]["server_env"] = str(env_file)
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"standin": vars_}}}))
    reports = tmp_path / "reports"
    (pathlib.Path(COPY["path"]).parent / "standin-units.json").write_text(json.dumps(units))  # _StandInBus
    done = subprocess.run([sys.executable, "-m", "pytest", "acceptance/test_cutover.py",
                           f"--inventory={inv}", "--no-marker", f"--report-dir={reports}",
                           "-p", "no:cacheprovider", "-rA", *extra],
                          cwd=COPY["path"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    (xml,) = reports.glob("acceptance-standin-*.xml")
    text = xml.read_text()
    cases = {c.get("name"): (c.find("failure") is None and c.find("error") is None, c)
             for c in ET.fromstring(text).iter("testcase") if c.get("classname") != "pty-acceptance"}
    return done.stdout + done.stderr, text, cases


def _said(out: str) -> str:
    """The inner run's CUT lines and failures first, then its tail: a failure
    here under load showed only the tail (session 35)."""
    said = [l for l in out.splitlines() if "CUT-" in l and ("FAILED" in l or ":" in l[:12]) or "Error" in l]
    return "\n".join(said[:40]) + "\n...\n" + out[-2000:]


def _env(tmp_path, mode=0o600, value=PW):
    p = tmp_path / "server.env"
    p.write_text(f"# stand-in\nOPENCODE_PASSWORD={value}\n")
    os.chmod(p, mode)
    u = pwd.getpwnam(USER)
    os.chown(p, u.pw_uid, u.pw_gid)
    _aged(p)
    return p


def _aged(p) -> None:
    """CUT-2 judges a candidate only when server.env is older than its start by
    serverenv.STEADY_S (ctime, which nothing but the clock moves back): the
    stand-in starts after the file has aged that long."""
    from pty_acceptance.candidate.serverenv import STEADY_S
    import time
    until = os.lstat(p).st_ctime_ns + int((STEADY_S + 0.05) * 1e9)
    while time.time_ns() < until:
        time.sleep(0.05)


def test_cutover_passes_against_conforming_standins(tmp_path):
    prod, cand = Behaviour(None), Behaviour(PW)
    env = _env(tmp_path)  # written before the candidate starts: CUT-2 judges its age
    with StandIn(cand, forked=True) as c, StandIn(prod) as p:  # forked before production listens
        out, xml, cases = _run(tmp_path, p.port, c.port, env, candidate=c)
    assert cases and all(ok for ok, _ in cases.values()), _said(out)
    assert PW not in out and PW not in xml and TOKEN not in out and TOKEN not in xml
    assert all(auth is None for _, _, auth in prod.seen) and {m for m, _, _ in prod.seen} == {"GET"}
    assert cand.seen and all(auth and auth.startswith("Basic ") for _, _, auth in cand.seen)
    assert ("POST", "/api/plugin/await-activation") in [(m, p.split("?")[0]) for m, p, _ in cand.seen]
    assert all("location%5Bdirectory%5D=" in p for _, p, _ in cand.seen if p.startswith("/api/"))


def test_cutover_findings_name_what_is_wrong_and_never_the_password(tmp_path):
    prod, cand = Behaviour(None), Behaviour(PW)
    prod.override["/global/health"] = (503, b"down", {})  # production: read as answering 200
    cand.healthy = False
    cand.plugins = [{"id": "followup", "state": {"status": "failed", "error": "boom"}}]
    # a hostile candidate that echoes the password in an error body
    cand.override["/sw.js"] = (500, f"denied for {PW}".encode(), {})
    env = _env(tmp_path, mode=0o640)  # written before the candidate starts: CUT-2 judges its age
    with StandIn(cand, forked=True) as c, StandIn(prod) as p:  # forked before production listens
        # --showlocals --tb=long: even tracebacks with every local must not show it
        out, xml, cases = _run(tmp_path, p.port, c.port, env, candidate=c,
                               extra=("--showlocals", "--tb=long"))
    assert PW not in out and PW not in xml and TOKEN not in out and TOKEN not in xml
    assert not cases["test_production_is_healthy"][0] and "status 503" in out
    assert not cases["test_candidate_is_healthy"][0]
    assert "got status 200 and healthy=false" in out, _said(out)
    assert not cases["test_candidate_ui_answers"][0] and "<redacted>" in out
    assert not cases["test_plugins_are_active_after_activation"][0]
    assert "followup: status 'failed'; local-pty: absent" in out
    assert not cases["test_server_env_is_private_and_holds_the_password"][0]
    assert "mode 0640, expected exactly 0600" in out


def test_cutover_names_a_plugin_list_in_another_shape(tmp_path):
    prod, cand = Behaviour(None), Behaviour(PW)
    cand.plugins = [{"name": "followup", "status": "active"}, {"name": "local-pty", "status": "active"}]
    cand.activation_status = 200
    env = _env(tmp_path)  # written before the candidate starts: CUT-2 judges its age
    with StandIn(cand, forked=True) as c, StandIn(prod) as p:  # forked before production listens
        out, xml, cases = _run(tmp_path, p.port, c.port, env, candidate=c)
    assert not cases["test_plugins_are_active_after_activation"][0]
    assert "entry 0 is" in out and '{id: str, state: {status: str}}' not in out, _said(out)
    assert '{"id": str, "state": {"status": str}} or {"id": str, "status": str}' in out


def test_the_password_goes_only_to_an_identified_listener(tmp_path):
    prod, cand = Behaviour(None), Behaviour(PW)
    env = _env(tmp_path)  # written before the candidate starts: CUT-2 judges its age
    with StandIn(cand, forked=True) as c, StandIn(prod) as p:  # forked before production listens
        out, xml, cases = _run(tmp_path, p.port, c.port, env, candidate=c, runtime="/usr/bin/env")
    for name in ("test_candidate_is_healthy", "test_candidate_ui_answers",
                 "test_plugins_are_active_after_activation"):
        assert not cases[name][0], name
    assert "is not identified as the candidate runtime" in out and "password is not sent" in out
    assert cand.seen == [] and PW not in out and PW not in xml


def test_the_password_goes_only_to_the_candidate_unit_s_own_listener(tmp_path):
    """The listener runs the runtime as the service user, but the candidate unit gave
    up (failed, start limit): the process on the port is not the unit's, and is sent
    nothing; production's port answered by a process that is not opencode.service's
    fails CUT-1 (issue 37 item 3)."""
    prod, cand = Behaviour(None), Behaviour(PW)
    units = {"opencode-v2-preview.service": {"ActiveState": "failed", "MainPID": 0, "Result": "start-limit-hit"},
             "opencode.service": {"ActiveState": "inactive", "MainPID": 0}}
    env = _env(tmp_path)  # written before the candidate starts: CUT-2 judges its age
    with StandIn(cand, forked=True) as c, StandIn(prod) as p:  # forked before production listens
        out, xml, cases = _run(tmp_path, p.port, c.port, env, candidate=c, units=units)
    for name in ("test_production_is_healthy", "test_candidate_is_healthy", "test_candidate_ui_answers",
                 "test_plugins_are_active_after_activation"):
        assert not cases[name][0], name
    assert f"pid {os.getpid()} (cgroup " in out
    assert "is not opencode-v2-preview.service's own: the unit is not active" in out
    assert "(Result start-limit-hit)" in out and "password is not sent" in out
    assert "is not opencode.service's own" in out and prod.seen == []
    assert cand.seen == [] and PW not in out and PW not in xml


def test_a_listener_outside_the_unit_is_not_the_unit_s(tmp_path):
    """The candidate unit is active, but its MainPID is another process and the
    listener is not in its cgroup: named with the unit's MainPID and cgroup."""
    prod, cand = Behaviour(None), Behaviour(PW)
    units = {"opencode-v2-preview.service": {"MainPID": 1}}
    env = _env(tmp_path)  # written before the candidate starts: CUT-2 judges its age
    with StandIn(cand, forked=True) as c, StandIn(prod) as p:  # forked before production listens
        out, xml, cases = _run(tmp_path, p.port, c.port, env, candidate=c, units=units)
    assert cases["test_production_is_healthy"][0], out[-3000:]
    assert not cases["test_candidate_is_healthy"][0]
    assert "neither its MainPID nor in its cgroup" in out and "MainPID 1, ControlGroup /standin.service" in out
    assert cand.seen == []
