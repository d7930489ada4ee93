"""`pty-acceptance fleet-summary` (pty_acceptance/report/fleet.py): one line per host
from what a fleet run fetched back; READY only when the exit status, the
JUnit verdict, the Statement and the suite's last line agree; a host that
did not report is not ready; whatever came from a host is escaped and never
followed. And the playbook fetches exactly the names the summary reads."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pty_acceptance.report import bundle, fleet, signing
from pty_acceptance.spec import checklist

from conftest import REPO
from reportsuite import as_suite, suite_of
from signkeys import openssl_key

FIXTURES = REPO / "tests/fixtures/verdict"
PLAYBOOK = REPO / "fleet/pty-acceptance.yml"
MARKER = "/etc/opencode/pty-supervisor-verified"
SECTIONS = checklist.load(REPO / "ROOT-ACCEPTANCE.md")
RUN = "20261205T041500Z-4242"  # this fleet run's id (the playbook's fleet_run_id)
SUITE = suite_of()  # the summary's suite: this checkout's (cli.this_suite)


def fixture_data(name: str) -> bytes:
    """tests/fixtures/verdict/<name>.xml as a report of this checkout's suite (reportsuite.as_suite)."""
    return as_suite((FIXTURES / f"{name}.xml").read_bytes())


def at(d: Path, role: str, run_id: str = RUN) -> Path:
    """Where the playbook puts a role's file of a run in a host's directory."""
    return d / fleet.file_name(run_id, role)


def host_dir(root: Path, host: str, fixture: str, *, status: str | None = None,
             last: str | None = None, skip: tuple[str, ...] = (), run_id: str = RUN,
             data: bytes | None = None) -> Path:
    """What the playbook leaves for a host whose suite wrote tests/fixtures/verdict/<fixture>.xml
    as this checkout's suite would (or `data`), as the report the playbook names for run `run_id`."""
    data = fixture_data(fixture) if data is None else data
    b = bundle.build(data, fleet.report_name(run_id, host), SECTIONS)
    d = root / host
    d.mkdir(parents=True, exist_ok=True)
    files = {
        fleet.EXIT_STATUS: (status if status is not None else ("0" if b.verdict.ready else "1")) + "\n",
        fleet.OUTPUT: f"... the matrix ...\n{last if last is not None else b.verdict.last_line}\n",
        fleet.ERRORS: "\n",
        fleet.JUNIT: data, fleet.HTML: b.html, fleet.STATEMENT: b.statement}
    for name, content in files.items():
        if name not in skip:
            at(d, name, run_id).write_bytes(content.encode() if isinstance(content, str) else content)
    return d


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "fleet-summary", "--run-id", RUN, *args],
                          capture_output=True, text=True, errors="surrogateescape", timeout=60,
                          stdin=subprocess.DEVNULL)


def test_one_line_per_host_and_non_zero_when_one_is_not_ready(tmp_path):
    host_dir(tmp_path, "pilot-a", "ready")
    host_dir(tmp_path, "pilot-b", "client-group-writable")
    res = cli(str(tmp_path), "pilot-a", "pilot-b")
    assert res.returncode == 1, res
    assert res.stdout.splitlines() == [
        "pilot-a: READY: marker written /etc/opencode/pty-supervisor-verified",
        "pilot-b: NOT READY: 2 blockers: OWN-1 PLUGIN-1"]
    assert (tmp_path / fleet.SUMMARY).read_text() == res.stdout


def test_every_host_ready_is_exit_zero(tmp_path):
    host_dir(tmp_path, "pilot-a", "ready")
    host_dir(tmp_path, "pilot-c", "ready")
    res = cli(str(tmp_path), "pilot-a", "pilot-c")
    assert res.returncode == 0, res
    assert len(res.stdout.splitlines()) == 2


def test_a_host_that_did_not_report_is_not_ready(tmp_path):
    host_dir(tmp_path, "pilot-a", "ready")
    host_dir(tmp_path, "pilot-b", "ready", skip=(fleet.EXIT_STATUS,))  # the run never finished
    lines, status = fleet.summarize(str(tmp_path), ["pilot-a", "pilot-b", "pilot-gone"], RUN, suite=SUITE)
    assert status == 1
    assert [str(line) for line in lines[1:]] == [
        "pilot-b: UNREACHABLE/ERROR: did not report (no exit status came back)",
        "pilot-gone: UNREACHABLE/ERROR: did not report (no result came back)"]


def test_no_host_at_all_is_not_ready(tmp_path):
    assert fleet.summarize(str(tmp_path), [], RUN, suite=SUITE) == ([], 1)


@pytest.mark.parametrize("change, expect", [
    # the host's last line claims READY: the JUnit report decides, the claim is named, escaped
    ({"last": "\x1b[2K\rREADY: marker written /etc/opencode/pty-supervisor-verified"},
     "pilot-b: NOT READY: 2 blockers: OWN-1 PLUGIN-1; the suite's last line says "
     "\\x1b[2K\\x0dREADY: marker written /etc/opencode/pty-supervisor-verified"),
    ({"status": "0"}, "pilot-b: NOT READY: 2 blockers: OWN-1 PLUGIN-1; exit status 0"),
    ({"skip": (fleet.JUNIT,)},
     "pilot-b: NOT READY: 2 blockers: OWN-1 PLUGIN-1; no JUnit report came back"),
    ({"skip": (fleet.JUNIT,), "last": "READY: marker written /x"},
     "pilot-b: UNREACHABLE/ERROR: no JUnit report came back; exit status 1; "
     "the suite's last line: READY: marker written /x"),
])
def test_a_not_ready_host_stays_not_ready_whatever_else_it_says(tmp_path, change, expect):
    host_dir(tmp_path, "pilot-b", "client-group-writable", **change)
    lines, status = fleet.summarize(str(tmp_path), ["pilot-b"], RUN, suite=SUITE)
    assert status == 1 and [str(line) for line in lines] == [expect]


@pytest.mark.parametrize("change, why", [
    ({"status": "1"}, "exit status 1"),
    ({"skip": (fleet.STATEMENT,)}, "the Statement's result is missing"),
    ({"skip": (fleet.HTML,)}, "no HTML report came back"),
    ({"last": "NOT READY: 1 blockers: OWN-1"}, "the suite's last line says NOT READY"),
])
def test_ready_needs_every_piece_to_agree(tmp_path, change, why):
    host_dir(tmp_path, "pilot-a", "ready", **change)
    lines, status = fleet.summarize(str(tmp_path), ["pilot-a"], RUN, suite=SUITE)
    assert status == 1
    assert lines[0].state == fleet.ERROR and why in lines[0].text, lines


def test_a_suite_that_did_not_start_names_its_last_error_line(tmp_path):
    d = host_dir(tmp_path, "pilot-b", "ready", status="1", last="",
                 skip=(fleet.JUNIT, fleet.HTML, fleet.STATEMENT))
    at(d, fleet.ERRORS).write_bytes(b"Failed to find executable /x/.venv/bin/pytest\x1b[8m\n")
    lines, status = fleet.summarize(str(tmp_path), ["pilot-b"], RUN, suite=SUITE)
    assert status == 1 and [str(line) for line in lines] == [
        "pilot-b: UNREACHABLE/ERROR: no JUnit report came back; exit status 1; the suite's last "
        "line: ... the matrix ...; its last error line: Failed to find executable "
        "/x/.venv/bin/pytest\\x1b[8m"]


def test_a_statement_that_says_passed_for_a_failed_run(tmp_path):
    d = host_dir(tmp_path, "pilot-b", "client-group-writable")
    at(d, fleet.STATEMENT).write_bytes(at(d, fleet.STATEMENT).read_bytes().replace(b'"FAILED"', b'"PASSED"'))
    lines, status = fleet.summarize(str(tmp_path), ["pilot-b"], RUN, suite=SUITE)
    assert status == 1 and lines[0].state == fleet.NOT_READY
    assert "the Statement's result is PASSED" in lines[0].text


def test_a_statement_about_another_report_does_not_count(tmp_path):
    d = host_dir(tmp_path, "pilot-a", "ready")
    at(d, fleet.JUNIT).write_bytes(at(d, fleet.JUNIT).read_bytes() + b"\n")  # the same verdict, other bytes
    lines, status = fleet.summarize(str(tmp_path), ["pilot-a"], RUN, suite=SUITE)
    assert status == 1 and lines[0].state == fleet.ERROR
    assert "the Statement's result is about another JUnit report" in lines[0].text


def test_a_statement_naming_the_suites_commit_is_read(tmp_path):
    """A report of a suite run from a git checkout names the suite's commit:
    the Statement's descriptor for it has a gitCommit digest, no sha256 (the
    fleet read it as unreadable: KeyError, on CI's two-host fleet)."""
    d = host_dir(tmp_path, "pilot-a", "ready")
    commit = "ab" * 20
    data = fixture_data("ready").replace(
        b'<property name="gate" value="READY" />',
        f'<property name="suite-version" value="0.1" /><property name="suite-commit" value="{commit}" />'
        '<property name="suite-modified" value="no" /><property name="gate" value="READY" />'.encode(), 1)
    b = bundle.build(data, fleet.report_name(RUN, "pilot-a"), SECTIONS)
    assert {"gitCommit": commit} in [c["digest"] for c in json.loads(b.statement)["predicate"]["configuration"]]
    at(d, fleet.JUNIT).write_bytes(data)
    at(d, fleet.STATEMENT).write_bytes(b.statement.encode() if isinstance(b.statement, str) else b.statement)
    at(d, fleet.HTML).write_bytes(b.html.encode() if isinstance(b.html, str) else b.html)
    res = cli(str(tmp_path), "pilot-a")
    assert res.stdout.splitlines() == [f"pilot-a: READY: marker written {MARKER}"], res
    assert res.returncode == 0


def _without_case(data: bytes, nodeid: str) -> bytes:
    """The report with one test case deleted and its totals fixed: every place of it still says READY."""
    import xml.etree.ElementTree as ET

    from pty_acceptance.report import verdict

    root = ET.fromstring(data)
    suite = root.find("testsuite")
    (case,) = [c for c in suite.findall("testcase") if verdict._nodeid(c)[0] == nodeid]
    suite.remove(case)
    suite.set("tests", str(len(suite.findall("testcase"))))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def test_a_ready_host_whose_report_is_not_its_suites_node_id_list_is_not_ready(tmp_path):
    """SUITE-2 (session 32's red team): a host's report with a test case deleted,
    every place of it saying READY, its Statement and last line and exit status
    agreeing: the list of what must have run is the summary's own checkout's;
    a report of another suite's tree cannot be checked and is not READY either."""
    gone = SUITE.node_ids[3]
    host_dir(tmp_path, "pilot-a", "ready", data=_without_case(fixture_data("ready"), gone))
    other = fixture_data("ready").replace(SUITE.tree.encode(), b"0" * 64 + b"  1 files")
    host_dir(tmp_path, "pilot-b", "ready", data=other)
    res = cli(str(tmp_path), "pilot-a", "pilot-b")
    assert res.returncode == 1, res
    a, b = res.stdout.splitlines()
    assert a.startswith(f"pilot-a: NOT READY: 1 blockers: SUITE-2; read back: 1 of the {len(SUITE.node_ids)} "
                        f"tests its suite's node-id list names are not among its cases: {gone}; "
                        f"the suite's last line says READY: marker written {MARKER}, exit status 0, "
                        "the Statement's result is "), a
    assert b.startswith(f"pilot-b: NOT READY: 1 blockers: SUITE-2; read back: it names suite-tree {'0' * 64}  "
                        f"1 files, not {SUITE.tree} of the checkout {REPO}: its test cases cannot be checked "
                        "against the node-id list of the suite that wrote it; re-render it with the checkout "
                        "of that suite; the suite's last line says READY"), b


def test_what_an_earlier_run_left_is_never_read(tmp_path):
    """-e fleet_out=DIR again: a host that did not answer this time still has
    the last run's READY files in its directory; they carry that run's id."""
    host_dir(tmp_path, "pilot-a", "ready", run_id="20261204T230000Z-7")
    host_dir(tmp_path, "pilot-b", "ready", run_id="20261204T230000Z-7")
    host_dir(tmp_path, "pilot-b", "ready")
    lines, status = fleet.summarize(str(tmp_path), ["pilot-a", "pilot-b"], RUN, suite=SUITE)
    assert status == 1 and [str(line) for line in lines] == [
        "pilot-a: UNREACHABLE/ERROR: did not report (no exit status came back)",
        "pilot-b: READY: marker written /etc/opencode/pty-supervisor-verified"]


def test_files_of_an_earlier_run_renamed_as_this_run_do_not_pass(tmp_path):
    """The Statement names the report of the run it is about: an earlier run's
    bundle under this run's names is not this run's verdict."""
    old = host_dir(tmp_path / "old", "pilot-a", "ready", run_id="20261204T230000Z-7")
    (tmp_path / "pilot-a").mkdir()
    for role in fleet.FILES:
        at(old, role, "20261204T230000Z-7").rename(at(tmp_path / "pilot-a", role))
    lines, status = fleet.summarize(str(tmp_path), ["pilot-a"], RUN, suite=SUITE)
    assert status == 1 and lines[0].state == fleet.ERROR
    assert f"about another run's report (it does not name {fleet.report_name(RUN, 'pilot-a')})" in lines[0].text


def test_another_hosts_files_in_this_hosts_directory_are_not_its_verdict(tmp_path):
    """Issue 38 item 6b: every file of a READY host moved into another host's
    directory; its Statement names the report the playbook gave that other host."""
    vm = host_dir(tmp_path / "elsewhere", "vm", "ready")
    (tmp_path / "prod-db-1").mkdir()
    for role in fleet.FILES:
        at(vm, role).rename(at(tmp_path / "prod-db-1", role))
    lines, status = fleet.summarize(str(tmp_path), ["prod-db-1"], RUN, suite=SUITE)
    assert status == 1 and lines[0].state == fleet.ERROR, lines
    assert (f"the Statement's result is about another host's report ({fleet.report_name(RUN, 'vm')}, "
            f"not {fleet.report_name(RUN, 'prod-db-1')})") in lines[0].text, lines


def test_a_ready_report_whose_marker_is_not_the_seeds_is_not_ready(tmp_path):
    """Issue 38 item 6b: READY with the marker written elsewhere (a fake target
    under a directory, spec/floor.py) is not the marker the cutover reads."""
    elsewhere = "/srv/fake/etc/opencode/pty-supervisor-verified"
    data = fixture_data("ready").replace(MARKER.encode(), elsewhere.encode())
    (tmp_path / "fixture.xml").write_bytes(data)
    d = tmp_path / "prod-db-1"
    d.mkdir()
    b = bundle.build(data, fleet.report_name(RUN, "prod-db-1"), SECTIONS)
    assert b.verdict.ready and b.verdict.last_line == f"READY: marker written {elsewhere}"
    for role, content in ((fleet.EXIT_STATUS, b"0\n"), (fleet.OUTPUT, f"{b.verdict.last_line}\n".encode()),
                          (fleet.ERRORS, b"\n"), (fleet.JUNIT, data), (fleet.HTML, b.html),
                          (fleet.STATEMENT, b.statement)):
        at(d, role).write_bytes(content)
    lines, status = fleet.summarize(str(tmp_path), ["prod-db-1"], RUN, suite=SUITE)
    assert status == 1 and [str(line) for line in lines] == [
        f"prod-db-1: UNREACHABLE/ERROR: the JUnit report says READY: marker written {elsewhere} but its "
        f"marker is not the seed's {MARKER}"]


def test_a_fake_projects_ready_files_under_a_fleet_hosts_name_are_not_ready(project, target, tmp_path):
    """Issue 38 item 6b, the review's reproduction: a READY run of the suite's
    fake project (suite `fake`, this machine's hostname, its marker under a
    directory), asked to write the very report the playbook names for
    prod-db-1, and its files put where the playbook puts prod-db-1's."""
    from gateproject import last_line, run

    name = fleet.report_name(RUN, "prod-db-1")
    res = run(project, target, "--junitxml", f"reports/{name}")
    assert last_line(res) == f"READY: marker written {target.marker}"
    d = tmp_path / "fleet" / "prod-db-1"
    d.mkdir(parents=True)
    stem = project.path / "reports" / name.removesuffix(".xml")
    for role, src in ((fleet.JUNIT, ".xml"), (fleet.HTML, ".html"), (fleet.STATEMENT, ".intoto.json")):
        at(d, role).write_bytes(Path(f"{stem}{src}").read_bytes())
    at(d, fleet.EXIT_STATUS).write_text("0\n")
    at(d, fleet.OUTPUT).write_text("\n".join(res.outlines) + "\n")
    at(d, fleet.ERRORS).write_text("\n")
    lines, status = fleet.summarize(str(tmp_path / "fleet"), ["prod-db-1"], RUN, suite=suite_of(project.path))
    assert status == 1 and lines[0].state == fleet.ERROR, lines
    assert lines[0].text.endswith(f"but its marker is not the seed's {MARKER}"), lines


def test_a_run_id_that_is_not_the_playbooks_is_refused(tmp_path):
    res = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "fleet-summary", "--run-id", "../x",
                          str(tmp_path), "pilot-a"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "expected the playbook's run id" in res.stderr


def test_links_and_fifos_are_not_followed_or_opened(tmp_path):
    elsewhere = host_dir(tmp_path, "elsewhere", "ready")
    d = host_dir(tmp_path, "pilot-a", "ready", skip=(fleet.JUNIT,))
    at(d, fleet.JUNIT).symlink_to(elsewhere / fleet.JUNIT)
    e = host_dir(tmp_path, "pilot-b", "ready", skip=(fleet.OUTPUT,))
    os.mkfifo(at(e, fleet.OUTPUT))  # opening it for reading would block
    (tmp_path / "pilot-c").symlink_to(elsewhere)
    lines, status = fleet.summarize(str(tmp_path), ["pilot-a", "pilot-b", "pilot-c"], RUN, suite=SUITE)
    assert status == 1
    assert [(line.state, line.text) for line in lines] == [
        (fleet.ERROR, "junit.xml: a symbolic link"),
        (fleet.ERROR, "suite-output.txt: not a regular file"),
        (fleet.ERROR, "its directory is not a directory (or a symbolic link)")]


def test_hostile_host_names_are_escaped_and_never_used_as_paths(tmp_path):
    host_dir(tmp_path, "ready-one", "ready")
    (tmp_path / "sub").mkdir()
    res = cli(str(tmp_path / "sub"), "../ready-one", "evil\x1b]0;x\x07")
    assert res.returncode == 1
    assert res.stdout.splitlines() == [
        "../ready-one: UNREACHABLE/ERROR: not a plain host name: nothing read for it",
        "evil\\x1b]0;x\\x07: UNREACHABLE/ERROR: not a plain host name: nothing read for it"]
    assert "\x1b" not in (tmp_path / "sub" / fleet.SUMMARY).read_text()


def test_a_junit_report_that_is_not_one(tmp_path):
    d = host_dir(tmp_path, "pilot-a", "ready")
    at(d, fleet.JUNIT).write_bytes(b"<html>\x1b[31m</html>")
    lines, status = fleet.summarize(str(tmp_path), ["pilot-a"], RUN, suite=SUITE)
    assert status == 1 and lines[0].state == fleet.ERROR
    assert "\x1b" not in str(lines[0])


def test_an_unusable_directory_is_exit_2(tmp_path):
    res = cli(str(tmp_path / "missing"), "pilot-a")
    assert res.returncode == 2 and "fleet-summary" in res.stderr


# ------------------------------------------------------------ signed on the host
@pytest.fixture
def keys(safe_dir) -> dict[str, tuple[Path, Path]]:
    """An openssl key pair per host (root's alone: the suite signs only with such a key)."""
    d = safe_dir / "keys"
    d.mkdir(mode=0o700)
    out = {}
    for host in ("pilot-a", "pilot-b"):
        (d / host).mkdir(mode=0o700)
        out[host] = openssl_key(d / host)
    return out


def sign_as_host(d: Path, key: Path, statement: bytes | None = None) -> None:
    """What --sign-key leaves beside the Statement, fetched as the playbook names it."""
    body = statement if statement is not None else at(d, fleet.STATEMENT).read_bytes()
    at(d, fleet.ENVELOPE).write_bytes(signing.sign(signing.Signer(str(key)), body))


def test_each_hosts_envelope_is_verified_with_its_own_key(tmp_path, keys):
    """Issue 32 item 3: a fleet run signs on each host; the summary verifies
    each envelope with the host's public key, and says so on its line."""
    sign_as_host(host_dir(tmp_path, "pilot-a", "ready"), keys["pilot-a"][0])
    sign_as_host(host_dir(tmp_path, "pilot-b", "client-group-writable"), keys["pilot-b"][0])
    res = cli(str(tmp_path), "--pubkey", f"pilot-a={keys['pilot-a'][1]}", "--pubkey",
              f"pilot-b={keys['pilot-b'][1]}", "--sign-tool", "pilot-b=openssl", "pilot-a", "pilot-b")
    assert res.returncode == 1, res
    a, b = res.stdout.splitlines()
    assert re.fullmatch(rf"pilot-a: READY: marker written {MARKER}; Statement signed \(openssl, keyid "
                        r"[0-9a-f]{64}\), verified", a), a
    assert re.fullmatch(r"pilot-b: NOT READY: 2 blockers: OWN-1 PLUGIN-1; Statement signed \(openssl, keyid "
                        r"[0-9a-f]{64}\), verified", b), b
    assert a.split("keyid ")[1] != b.split("keyid ")[1]  # a key per host


@pytest.mark.parametrize("case, why", [
    ("another host's key", "its envelope does not verify (openssl): no signature verifies"),
    ("no envelope", "no signed envelope came back"),
    ("another Statement", "its envelope signs another Statement than the one that came back"),
])
def test_a_ready_host_whose_envelope_does_not_verify_is_not_ready(tmp_path, keys, case, why):
    d = host_dir(tmp_path, "pilot-a", "ready")
    if case == "another host's key":
        sign_as_host(d, keys["pilot-b"][0])
    elif case == "another Statement":
        sign_as_host(d, keys["pilot-a"][0], b'{"_type": "https://in-toto.io/Statement/v1"}')
    res = cli(str(tmp_path), "--pubkey", f"pilot-a={keys['pilot-a'][1]}", "pilot-a")
    assert res.returncode == 1, res
    (line,) = res.stdout.splitlines()
    assert line.startswith(f"pilot-a: UNREACHABLE/ERROR: the JUnit report says READY: marker written {MARKER} "
                           f"but {why}"), line


def test_pubkey_options_name_hosts_of_the_summary(tmp_path, keys):
    host_dir(tmp_path, "pilot-a", "ready")
    for args, said in ((["--pubkey", f"pilot-x={keys['pilot-a'][1]}"], "--pubkey for pilot-x: not a host"),
                       (["--pubkey", "pilot-a"], "expected HOST=VALUE"),
                       (["--sign-tool", "pilot-a=gpg"], "without a --pubkey"),
                       (["--pubkey", f"pilot-a={tmp_path}/nope"], "No such file")):
        res = cli(str(tmp_path), *args, "pilot-a")
        assert res.returncode == 2 and said in res.stderr and res.stderr.count("\n") == 1, (args, res.stderr)


# ------------------------------------------------------------ the playbook
def test_the_playbook_writes_and_fetches_exactly_the_names_the_summary_reads():
    plays = yaml.safe_load(PLAYBOOK.read_text())
    assert [p["hosts"] for p in plays] == ["localhost", "all", "localhost"]  # the run id, the suite, the summary
    suite_play = plays[1]
    assert suite_play["become"] is True
    names = []
    for task in suite_play["tasks"]:
        for module in ("ansible.builtin.copy", "ansible.builtin.fetch"):
            if module in task:
                names += [item["name"] for item in task["loop"]]
                dest = task[module]["dest"]
                assert dest.endswith("/{{ fleet_run_id }}.{{ item.name }}") and \
                    "{{ inventory_hostname }}" in dest
    assert sorted(names) == sorted(fleet.FILES + (fleet.ENVELOPE,))
    fetch = next(t for t in suite_play["tasks"] if "ansible.builtin.fetch" in t)
    assert fetch["ansible.builtin.fetch"]["flat"] is True  # no host path below the host's directory
    run = next(t for t in suite_play["tasks"] if t["name"].startswith("Run the suite"))
    assert run["failed_when"] is False  # the suite's exit status is recorded, not a task failure
    assert "+ pa_sign)" in run["ansible.builtin.command"]["argv"]  # --sign-key KEY --sign-tool TOOL
    summary = next(t for t in plays[2]["tasks"] if "ansible.builtin.command" in t)
    assert "'--run-id', fleet_run_id" in summary["ansible.builtin.command"]["argv"]
    assert "pa_verify" in summary["ansible.builtin.command"]["argv"]  # --pubkey HOST=FILE per signing host


def test_the_playbook_prepares_a_target_with_the_targets_setup_never_the_labs():
    """Issue 32 item 3: the target's .venv is tools/setup-target.sh's (pinned,
    hashed); tools/setup.sh (apt, chromium, ansible, the unpinned test extra)
    is the lab's and is named nowhere in the fleet's files but as what not to run."""
    plays = yaml.safe_load(PLAYBOOK.read_text())
    setup = next(t for t in plays[1]["tasks"] if "setup-target.sh" in str(t.get("ansible.builtin.command")))
    assert setup["when"] == "pa_setup"
    for f in (PLAYBOOK, REPO / "fleet/hosts.example.yml"):
        text = f.read_text()
        assert "setup-target.sh" in text
        assert all("never the lab's" in line for line in text.splitlines() if "tools/setup.sh" in line), f


def test_the_fleet_is_ansible_lint_clean(tmp_path):
    """Issue 32 item 3: ansible-lint passes the playbook and the example
    inventory with every rule it has (no --profile: a profile would leave
    rules out, run-once[task] among them), no skip list, no noqa."""
    lint = shutil.which("ansible-lint")
    assert lint, "ansible-lint is not installed (tools/setup.sh installs Debian's ansible-lint)"
    shutil.copytree(REPO / "fleet", tmp_path / "fleet")  # no lint config of the checkout's, nothing written there
    for f in (tmp_path / "fleet").iterdir():
        assert "noqa" not in f.read_text(), f
    res = subprocess.run([lint, "--offline", "--nocolor", "fleet/"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, HOME=str(tmp_path), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp")))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Passed" in res.stdout + res.stderr and "0 failure(s), 0 warning(s)" in res.stdout + res.stderr


def test_the_playbook_is_valid_ansible():
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is not installed (tools/setup.sh installs Debian's ansible)"
    res = subprocess.run([playbook, "--syntax-check", "-i", "localhost,", str(PLAYBOOK)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    example = REPO / "fleet/hosts.example.yml"
    res = subprocess.run([str(Path(playbook).with_name("ansible-inventory")), "-i", str(example), "--list"],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0 and "pilot-2.example.net" in json.loads(res.stdout)["_meta"]["hostvars"], \
        res.stdout + res.stderr


def test_the_playbook_fetches_no_link_and_nothing_from_a_directory_others_may_write(tmp_path):
    """The fetch tasks and the summary for real (Ansible's local connection,
    the suite's run skipped): a link where the JUnit report should be is not
    followed to the root-only file it names, nothing comes from a
    group-writable report directory, and a host that cannot be reached (SSH
    to a closed port) is a line of its own; the run ends non-zero."""
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is not installed (tools/setup.sh installs Debian's ansible)"
    secret = tmp_path / "root-only-secret"
    secret.write_text("pty-acceptance-fleet-secret-5e1f\n")
    secret.chmod(0o600)
    stem = {h: fleet.report_name(RUN, h).removesuffix(".xml") for h in ("linked", "shared")}
    reports = {h: tmp_path / f"reports-{h}" for h in ("linked", "shared")}
    for h, d in reports.items():
        d.mkdir(mode=0o755)
        (d / f"{stem[h]}.html").write_text("<html></html>\n")
        (d / f"{stem[h]}.intoto.json").write_text('{"predicate": {"result": "PASSED"}}\n')
    (reports["linked"] / f"{stem['linked']}.xml").symlink_to(secret)
    (reports["shared"] / f"{stem['shared']}.xml").write_bytes(fixture_data("ready"))
    reports["shared"].chmod(0o775)
    out = tmp_path / "out"
    inventory = {"all": {"hosts": {h: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "ansible_become": False, "pty_acceptance_report_dir": str(d)} for h, d in reports.items()}}}
    inventory["all"]["hosts"]["gone"] = {"ansible_host": "127.0.0.1", "ansible_port": 1,
                                         "ansible_connection": "ssh"}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    # the summary command is the playbook's default: the checkout's .venv/bin/pty-acceptance
    (tmp_path / "extra.json").write_text(json.dumps({
        "fleet_run_id": RUN, "fleet_out": str(out), "fleet_hosts": sorted(reports) + ["gone"]}))
    for h in [*reports, "gone"]:
        (out / h).mkdir(parents=True)
    for h in reports:  # what the skipped tasks would have recorded: a run that claims READY
        at(out / h, fleet.EXIT_STATUS).write_text("0\n")
        at(out / h, fleet.OUTPUT).write_text(f"READY: marker written {MARKER}\n")
        at(out / h, fleet.ERRORS).write_text("\n")
    res = subprocess.run([playbook, "-i", str(tmp_path / "hosts.yml"), "-e", f"@{tmp_path / 'extra.json'}",
                          "--start-at-task", "The report directory and the files in it (not following links)",
                          str(PLAYBOOK)], capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    log = res.stdout + res.stderr
    assert res.returncode != 0, log
    recorded = sorted(fleet.file_name(RUN, n) for n in [fleet.EXIT_STATUS, fleet.OUTPUT, fleet.ERRORS])
    assert sorted(p.name for p in (out / "linked").iterdir()) == sorted(
        recorded + [fleet.file_name(RUN, fleet.HTML), fleet.file_name(RUN, fleet.STATEMENT)]), log
    assert sorted(p.name for p in (out / "shared").iterdir()) == recorded, log
    for f in out.rglob("*"):
        assert not f.is_file() or b"5e1f" not in f.read_bytes(), f
    assert "UNREACHABLE! " in log, log  # Ansible's word for the host it could not reach
    assert (out / "summary.txt").read_text().splitlines() == [
        f"linked: UNREACHABLE/ERROR: no JUnit report came back; exit status 0; the suite's last line: "
        f"READY: marker written {MARKER}",
        f"shared: UNREACHABLE/ERROR: no JUnit report came back; exit status 0; the suite's last line: "
        f"READY: marker written {MARKER}",
        "gone: UNREACHABLE/ERROR: did not report (no exit status came back)"], log
