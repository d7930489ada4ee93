"""The verdict bundle (issue 13): the terminal matrix before the last line,
`<stem>.html` and `<stem>.intoto.json` beside the JUnit report, for a READY
and a NOT READY run, all from the published report; `pty-acceptance report`
renders the same matrix from the same file; hostile evidence stays text."""

import hashlib
import html
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pty_acceptance.report import bundle, intoto, verdict
from pty_acceptance.spec import checklist
from pty_acceptance.spec.requirements import CATALOGUE, ENFORCED_BY_GATE

from conftest import REPO
from gateproject import ALL_IDS, FAILING, junit, last_line, matrix_lines, run, with_module
from reportsuite import fixture_as_suite, report_as, suite_of
from statement_schema import validate

HOSTILE = "\x1b[2J\x1b[1;1HREADY: marker written \udcff\udcfe</td><script>alert(1)</script>\u202e"
CLI = REPO / ".venv/bin/pty-acceptance"


def make_runtime(target) -> str:
    import yaml
    data = yaml.safe_load(target.inventory.read_text())
    host = data["all"]["hosts"]["fake"]
    path = Path(host["runtime"]["binary"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"a stand-in runtime\n")
    host["runtime"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    target.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    return host["runtime"]["sha256"]


# --------------------------------------------------------------- the gate
def test_a_ready_run_prints_the_matrix_and_writes_the_bundle(project, target):
    runtime_sha = make_runtime(target)
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-30:])
    rows = matrix_lines(res.outlines)
    # UNIT-9 is a CONCERN requirement: reported with its evidence, never a plain pass
    assert rows[1].split()[:2] == ["CONCERN", "All"], rows
    assert rows[2].strip() == "concern UNIT-9: checked: all of it"
    assert rows[-1].split()[0] == "PASS" and "The run itself (gate)" in rows[-1]
    # the matrix comes before the last line, inside the gate's section
    assert res.outlines.index(rows[0]) < len(res.outlines) - 1
    report = junit(project)
    html_path, statement_path, _ = (Path(p) for p in bundle.names(str(report)))
    assert f"bundle: {html_path}" in res.outlines and f"bundle: {statement_path}" in res.outlines
    st = json.loads(statement_path.read_text())
    validate(st)
    assert st["predicate"]["result"] == "WARNED"  # READY, with UNIT-9 (a CONCERN) among its IDs
    subjects = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    expected = {b: hashlib.sha256(Path(b).read_bytes()).hexdigest() for b in target.binaries}
    assert subjects == {**expected, **{n: runtime_sha for n in subjects if n.endswith("opencode2-node")}}
    assert len(subjects) == 4
    assert all("annotations" not in s for s in st["subject"]), "a subject was not read at marker time"
    junit_desc = [c for c in st["predicate"]["configuration"] if c["name"] == report.name]
    assert junit_desc[0]["digest"]["sha256"] == hashlib.sha256(report.read_bytes()).hexdigest()
    names = {Path(c["name"]).name for c in st["predicate"]["configuration"]}
    # and the suite that judged (issue 38 item 2): its files and its virtualenv; no commit,
    # the fixture project has no .git (test_a_ready_bundle_names_the_suite_that_judged)
    assert names == {report.name, "inventory.yml", "ROOT-ACCEPTANCE.md", "bun", "pty-plugin-smoke.ts",
                     "opencode-pty-acceptance files", "opencode-pty-acceptance virtualenv"}
    # PLUGIN-1: bun and the smoke harness, by the pins PLUGIN-1 ran them under (issue 21 item 3)
    plugin = {c["name"]: (c["digest"]["sha256"], c["annotations"]["role"])
              for c in st["predicate"]["configuration"] if c.get("annotations", {}).get("requirement") == "PLUGIN-1"}
    assert plugin == {"/nonexistent/bun": ("cd" * 32, "the plugin smoke bun"),
                      "/nonexistent/pty-plugin-smoke.ts": ("ef" * 32, "the plugin smoke harness")}
    assert st["predicate"]["passedTests"] == ["acceptance/test_all.py::test_other"]
    assert st["predicate"]["warnedTests"] == ["acceptance/test_all.py::test_everything"]
    assert st["predicate"]["failedTests"] == []
    text = html_path.read_text()
    assert f"READY: marker written {target.marker}" in text


def test_a_runtime_behind_a_link_is_not_hashed_through_it(project, target):
    """SUITE-4: the runtime lies in the service user's tree; a directory of
    its path made a link is not followed (the subject is the inventory's
    claim, marked as such), and what was not read blocks (RUNTIME-1, MARK-3)."""
    make_runtime(target)
    import yaml
    path = Path(yaml.safe_load(target.inventory.read_text())["all"]["hosts"]["fake"]["runtime"]["binary"])
    elsewhere = target.base / "elsewhere"
    path.parent.rename(elsewhere)
    path.parent.symlink_to(elsewhere)
    res = run(project, target)
    assert last_line(res) == "NOT READY: 2 blockers: RUNTIME-1 MARK-3", "\n".join(res.outlines[-20:])
    st = json.loads(Path(bundle.names(str(junit(project)))[1]).read_text())
    validate(st)
    assert st["predicate"]["result"] == "FAILED"
    (runtime,) = [s for s in st["subject"] if s["name"] == str(path)]
    assert runtime["annotations"] == {"digestSource": "the inventory's claim; not read by the gate"}
    props = [p.get("value") for p in ET.parse(junit(project)).getroot().iter("property")
             if p.get("name") == "runtime-at-marker-time"]
    assert props[0].startswith(f"not readable: {path}: ") and "symlink" in props[0], props


def test_a_failing_run_shows_must_fix_and_a_failed_statement(project, target):
    with_module(project, f"""
import pytest

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything():
    pass

@pytest.mark.requirement("PEER-4")
def test_peer_replacement():
    assert False, "a start after MainPID replacement was accepted"
""")
    res = run(project, target)
    assert last_line(res).startswith("NOT READY: ")
    rows = matrix_lines(res.outlines)
    assert rows[1].split()[0] == "MUST-FIX" and rows[1].endswith("failing: PEER-4"), rows
    assert not os.path.lexists(target.marker)
    st = json.loads(Path(bundle.names(str(junit(project)))[1]).read_text())
    validate(st)
    assert st["predicate"]["result"] == "FAILED"
    assert st["predicate"]["failedTests"] == ["acceptance/test_all.py::test_peer_replacement"]
    html = Path(bundle.names(str(junit(project)))[0]).read_text()
    assert "a start after MainPID replacement was accepted" in html


def test_a_concern_is_a_concern_row_and_never_changes_the_verdict(project, target):
    with_module(project, f"""
import pytest

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything(concern):
    concern("ISO-3", "signal reach recorded: kill(2) reaches 3 processes")
""")
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}"
    rows = matrix_lines(res.outlines)
    assert rows[1].split()[0] == "CONCERN", rows
    assert rows[2].strip() == "concern ISO-3: signal reach recorded: kill(2) reaches 3 processes"
    st = json.loads(Path(bundle.names(str(junit(project)))[1]).read_text())
    assert st["predicate"]["result"] == "WARNED"  # READY with a CONCERN row: never PASSED
    assert st["predicate"]["warnedTests"] == ["acceptance/test_all.py::test_everything"]


def test_the_report_command_prints_what_the_gate_printed(project, target, tmp_path):
    with_module(project, f"""
import pytest

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything(concern):
    concern("UNIT-9", "exposure 2.1 OK")

@pytest.mark.requirement("CUT-1", "OWN-2")
def test_cut():
    assert False
""")
    res = run(project, target)
    gate_rows = matrix_lines(res.outlines)
    report = junit(project)
    out = subprocess.run([str(CLI), "report", str(report), "--checklist",
                          str(project.path / "ROOT-ACCEPTANCE.md"), "--out-dir", str(tmp_path)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert matrix_lines(lines) == gate_rows
    assert lines[-1].endswith(f"recorded verdict of {_stamp(report)}: {last_line(res)} "
                              "(as that run recorded it; this command wrote no marker)"), lines[-1]
    assert lines[-1].startswith(f"re-rendered from {report}: host ")
    again = tmp_path / Path(bundle.names(report.name)[1]).name
    first = Path(bundle.names(str(report))[1])
    assert json.loads(again.read_text()) == json.loads(first.read_text())


def _not_ready_report(project, target, tmp_path) -> Path:
    """A copy of the report of a fixture project run that one failing test made NOT READY."""
    with_module(project, FAILING)
    res = run(project, target)
    assert last_line(res) == "NOT READY: 1 blockers: OWN-2"
    report = tmp_path / "edited.xml"
    report.write_bytes(junit(project).read_bytes())
    return report


def _edit_to_say_ready(report: Path) -> None:
    """The review's edit of a NOT READY report (issue 38 item 6a): its
    blockers removed, `gate` READY, a `marker` property added, the verdict
    case's failure dropped; the test case that failed still fails."""
    tree = ET.parse(report)
    suite = tree.getroot().find("testsuite")
    props = suite.find("properties")
    for p in list(props):
        if p.get("name", "").split(".")[0] in ("blocker", "gate"):
            props.remove(p)
    ET.SubElement(props, "property", name="gate", value="READY")
    ET.SubElement(props, "property", name="marker", value="/etc/opencode/pty-supervisor-verified (written)")
    (case,) = [c for c in suite.findall("testcase") if c.get("classname") == "pty-acceptance"]
    for f in case.findall("failure"):
        case.remove(f)
    suite.set("failures", str(int(suite.get("failures")) - 1))
    tree.write(report, encoding="utf-8", xml_declaration=True)


def test_an_edited_not_ready_report_re_renders_not_ready_and_says_which_case(project, target, tmp_path):
    """Issue 38 item 6a: the edited report re-rendered READY, exit 0, its HTML
    title READY over a MUST-FIX matrix. READY needs every place of the report
    to agree; the re-render says which did not."""
    report = _not_ready_report(project, target, tmp_path)
    _edit_to_say_ready(report)
    out = tmp_path / "out"
    # with the checkout of the suite that wrote it (with this one: another suite's tree, SUITE-2 below)
    done = report_as(project.path, report, "--checklist", project.path / "ROOT-ACCEPTANCE.md", "--out-dir", out)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    which = ("blocker: SUITE-2: read back, this report is not READY: 1 of its 2 test cases did not pass: "
             "acceptance/test_all.py::test_supervisor_inputs (failed)")
    assert which in lines, lines
    assert ": NOT READY: 1 blockers: SUITE-2 (as that run recorded it" in lines[-1], lines[-1]
    page = (out / "edited.html").read_text()
    title = page[page.index("<title>") + 7:page.index("</title>")]
    assert "NOT READY" in title, title
    assert json.loads((out / "edited.intoto.json").read_text())["predicate"]["result"] == "FAILED"


@pytest.mark.parametrize("edit,which", [
    ("gate", "its gate property says NOT READY"),
    ("marker", "it names no marker written"),
    ("case", "1 of its 1 test cases did not pass: acceptance/test_a.py::t1 (failed)"),
    ("verdict", "its verdict case is missing"),
], ids=["gate", "marker", "failing case", "verdict case"])
def test_a_report_ready_in_all_places_but_one_is_not_ready_and_says_which(edit, which):
    case = _case("t1", ["PEER-1"], '<failure message="no">x</failure>' if edit == "case" else "")
    gate = "NOT READY" if edit == "gate" else "READY"
    props = f'<property name="gate" value="{gate}"/>' \
        + ("" if edit == "marker" else '<property name="marker" value="/m (written)"/>')
    v = verdict.from_junit(_report(case + ("" if edit == "verdict" else VERDICT_PASSED), props))
    assert not v.ready
    assert v.blockers == [verdict.DISAGREES + which]
    assert v.last_line == "NOT READY: 1 blockers: SUITE-2"
    assert verdict.rows(v, SECTIONS[:1])[-1].failing == ["SUITE-2"]


def _stamp(report: Path) -> str:
    return ET.parse(report).getroot().find("testsuite").get("timestamp")


def test_a_bundle_that_cannot_be_written_takes_the_marker_back(project, target):
    # something else writes under the bundle's name while the run goes on (an
    # earlier run's file there is removed before any test: report_name.py)
    with_module(project, f"""
import pytest
from pathlib import Path

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything():
    Path("reports/fixed.html").write_text("already here\\n")
""")
    res = run(project, target, "--junitxml", "reports/fixed.xml")
    assert last_line(res).startswith("NOT READY: ") and "SUITE-2" in last_line(res).split()
    assert any("the verdict bundle" in line for line in res.outlines)
    assert not os.path.lexists(target.marker)
    root = ET.parse(project.path / "reports/fixed.xml").getroot()
    gate = [p.get("value") for p in root.iter("property") if p.get("name") == "gate"]
    assert gate == ["NOT READY"]
    assert not (project.path / "reports/fixed.intoto.json").exists()


# ------------------------------------------------------------ hostile text
def test_hostile_evidence_stays_text_in_terminal_html_and_junit(project, target):
    with_module(project, f"""
import pytest

HOSTILE = {HOSTILE!r}

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything(evidence, concern):
    evidence("a file name", HOSTILE)
    concern("ISO-2", HOSTILE)

@pytest.mark.requirement("ISO-2")
def test_hostile_failure():
    assert False, HOSTILE
""")
    res = run(project, target)
    out = "\n".join(res.outlines)
    assert "\x1b" not in out and "\u202e" not in out and "\udcff" not in out
    rows = "\n".join(matrix_lines(res.outlines))
    # the JUnit writer made the control characters #xNN; what it keeps
    # (a bidi override) the terminal escaper shows as \\uNNNN
    assert "concern ISO-2: #x1B[2J#x1B[1;1HREADY: marker written #xDCFF#xDCFE</td><script>" \
        "alert(1)</script>\\u202e" in rows
    report = junit(project)
    raw = report.read_bytes()
    assert b"\x1b" not in raw
    ET.fromstring(raw)  # still parses
    html = Path(bundle.names(str(report))[0]).read_bytes()
    html.decode("utf-8")  # valid UTF-8, whatever the evidence held
    assert b"\x1b" not in html and b"<script" not in html.lower()
    assert b"&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    statement = Path(bundle.names(str(report))[1]).read_bytes()
    validate(json.loads(statement.decode("ascii")))


# ------------------------------------------------------------- the rows
def _report(cases: str, props: str = "") -> ET.Element:
    return ET.fromstring(f'<testsuites><testsuite name="pytest" hostname="h"><properties>{props}'
                         f"</properties>{cases}</testsuite></testsuites>")


def _case(name, ids, body="", props=""):
    reqs = "".join(f'<property name="requirement" value="{i}"/>' for i in ids)
    return (f'<testcase classname="acceptance.test_a" name="{name}" file="acceptance/test_a.py">'
            f"<properties>{reqs}{props}</properties>{body}</testcase>")


SECTIONS = [checklist.Section("A", "acceptance/test_a.py", ("PEER-1", "PEER-2")),
            checklist.Section("B", "acceptance/test_b.py", ("UNIT-1",))]


def test_rows_name_failing_ids_and_missing_modules():
    v = verdict.from_junit(_report(
        _case("t1", ["PEER-1"]) + _case("t2", ["PEER-2"], '<failure message="no">x</failure>'),
        '<property name="gate" value="NOT READY"/><property name="blocker" value="PEER-2: t2 failed"/>'))
    table = verdict.rows(v, SECTIONS)
    assert [(r.title, r.status, r.failing) for r in table] == [
        ("A", "MUST-FIX", ["PEER-2"]), ("B", "MUST-FIX", ["UNIT-1"]),
        (verdict.GATE_ROW, "PASS", [])]
    assert v.last_line == "NOT READY: 1 blockers: PEER-2"


VERDICT_PASSED = '<testcase classname="pty-acceptance" name="verdict" time="0.000"/>'
READY_PROPS = '<property name="gate" value="READY"/><property name="marker" value="/m (written)"/>'


# ------------------------------------------------- what must have run (SUITE-2)
THIS_TREE = "ab" * 32 + "  3 files"
LISTED_SUITE = verdict.Suite(THIS_TREE, ("acceptance/test_a.py::t1", "acceptance/test_a.py::t2"), "the checkout /c")
TREE_PROP = f'<property name="suite-tree" value="{THIS_TREE}"/>'


@pytest.mark.parametrize("cases, props, which", [
    (_case("t1", ["PEER-1"]), TREE_PROP,
     "1 of the 2 tests its suite's node-id list names are not among its cases: acceptance/test_a.py::t2"),
    (_case("t1", ["PEER-1"]) + _case("t2", ["PEER-2"]) + _case("t3", ["PEER-2"]), TREE_PROP,
     "1 of its test cases are not in its suite's node-id list: acceptance/test_a.py::t3"),
    (_case("t1", ["PEER-1"]) + _case("t2", ["PEER-2"]), "",
     f"it names no suite-tree, not {THIS_TREE} of the checkout /c: its test cases cannot be checked against "
     "the node-id list of the suite that wrote it; re-render it with the checkout of that suite"),
    (_case("t1", ["PEER-1"]) + _case("t2", ["PEER-2"]), f'<property name="suite-tree" value="{"cd" * 32}  3 files"/>',
     f"it names suite-tree {'cd' * 32}  3 files, not {THIS_TREE} of the checkout /c: its test cases cannot be "
     "checked against the node-id list of the suite that wrote it; re-render it with the checkout of that suite"),
    (_case("t1", ["PEER-1"]) + _case("t2", ["PEER-2"]),
     TREE_PROP + f'<property name="suite-tree.2" value="{"cd" * 32}  3 files"/>',
     f"it names 2 suite-trees ({THIS_TREE}, {'cd' * 32}  3 files), not {THIS_TREE} of the checkout /c: its test "
     "cases cannot be checked against the node-id list of the suite that wrote it; re-render it with the checkout "
     "of that suite"),
], ids=["a listed test missing", "a test not listed", "no suite-tree", "another suite-tree", "two suite-trees"])
def test_a_re_render_is_ready_only_when_the_cases_are_its_suites_node_id_list(cases, props, which):
    """SUITE-2: a report that says READY in every place of it, its cases not
    those of the suite's node-id list (one deleted, one added), or naming
    another suite's tree or none, is NOT READY when re-rendered, and says which."""
    root = _report(cases + VERDICT_PASSED, READY_PROPS + props)
    assert verdict.from_junit(root).ready  # every place of the file agrees: only the list can tell
    v = verdict.from_junit(root, LISTED_SUITE)
    assert not v.ready and v.blockers == [verdict.DISAGREES + which]
    assert v.last_line == "NOT READY: 1 blockers: SUITE-2"
    good = _report(_case("t1", ["PEER-1"]) + _case("t2", ["PEER-2"]) + VERDICT_PASSED, READY_PROPS + TREE_PROP)
    assert verdict.from_junit(good, LISTED_SUITE).ready


def _edit_to_say_ready_without_the_failing_case(report: Path) -> None:
    """The red team's edit of a NOT READY report (session 32): its blockers
    removed, `gate` READY, a `marker` added, the verdict case's failure
    dropped, and the failing test case deleted with the totals fixed: every
    place of the file says READY."""
    _edit_to_say_ready(report)
    tree = ET.parse(report)
    suite = tree.getroot().find("testsuite")
    for c in suite.findall("testcase"):
        if c.find("failure") is not None or c.find("error") is not None:
            suite.remove(c)
    suite.set("failures", "0")
    suite.set("errors", "0")
    suite.set("tests", str(len(suite.findall("testcase"))))
    tree.write(report, encoding="utf-8", xml_declaration=True)


def test_a_report_whose_failing_case_was_deleted_re_renders_not_ready(project, target, tmp_path):
    """The red team's reproduction (session 32): the edited report re-rendered
    READY, exit 0 (and would have been signed READY). Re-rendered with this
    checkout, it names another suite's tree: NOT READY, both trees named;
    re-rendered with the checkout of the suite that wrote it (the fixture
    project), the deleted test is named missing."""
    report = _not_ready_report(project, target, tmp_path)
    _edit_to_say_ready_without_the_failing_case(report)
    assert verdict.from_junit(ET.parse(report).getroot()).ready  # every place of it agrees
    checklist_of = ("--checklist", project.path / "ROOT-ACCEPTANCE.md")
    here = subprocess.run([str(CLI), "report", str(report), *map(str, checklist_of), "--out-dir",
                           str(tmp_path / "here")], capture_output=True, text=True, check=False)
    assert here.returncode == 1, here.stdout + here.stderr
    lines = here.stdout.splitlines()
    assert ": NOT READY: 1 blockers: SUITE-2 (as that run recorded it" in lines[-1], lines[-1]
    tree = [p.get("value") for p in ET.parse(report).getroot().iter("property") if p.get("name") == "suite-tree"]
    assert (f"blocker: SUITE-2: read back, this report is not READY: it names suite-tree {tree[0]}, not "
            f"{suite_of().tree} of the checkout {REPO}: its test cases cannot be checked against the node-id "
            "list of the suite that wrote it; re-render it with the checkout of that suite") in lines, lines
    there = report_as(project.path, report, *checklist_of, "--out-dir", tmp_path / "there")
    assert there.returncode == 1, there.stdout + there.stderr
    lines = there.stdout.splitlines()
    assert ("blocker: SUITE-2: read back, this report is not READY: 1 of the 2 tests its suite's node-id list "
            "names are not among its cases: acceptance/test_all.py::test_supervisor_inputs") in lines, lines
    assert ": NOT READY: 1 blockers: SUITE-2 (as that run recorded it" in lines[-1], lines[-1]
    assert json.loads((tmp_path / "there/edited.intoto.json").read_text())["predicate"]["result"] == "FAILED"


def test_a_ready_report_re_renders_ready_with_the_checkout_of_its_suite(project, target, tmp_path):
    """The control: a genuine READY report re-renders READY with the checkout
    that wrote it: this checkout's (a fixture report rewritten as this
    suite's), and the fixture project's run with that project."""
    ready = fixture_as_suite("ready", tmp_path)
    done = subprocess.run([str(CLI), "report", str(ready), "--out-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "READY: marker written /etc/opencode/pty-supervisor-verified" in done.stdout.splitlines()[-1]
    assert not [l for l in done.stdout.splitlines() if l.startswith("blocker: ")]
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}"
    there = report_as(project.path, junit(project), "--checklist", project.path / "ROOT-ACCEPTANCE.md",
                      "--out-dir", tmp_path / "there")
    assert there.returncode == 0, there.stdout + there.stderr
    assert f"READY: marker written {target.marker}" in there.stdout.splitlines()[-1]


def test_a_concern_severity_id_is_never_a_plain_pass():
    v = verdict.from_junit(_report(
        _case("t1", ["PEER-1", "PEER-2", "UNIT-9"], props='<property name="evidence" value="exposure: 9.6 UNSAFE"/>')
        + VERDICT_PASSED,
        '<property name="gate" value="READY"/><property name="marker" value="/m (written)"/>'))
    sections = [checklist.Section("A", "acceptance/test_a.py", ("PEER-1", "PEER-2", "UNIT-9"))]
    (row, gate_row) = verdict.rows(v, sections)
    assert (row.status, row.concerns) == ("CONCERN", ["UNIT-9: exposure: 9.6 UNSAFE"])
    assert v.ready and v.last_line == "READY: marker written /m"


def test_a_report_that_says_ready_without_a_marker_is_not_ready():
    v = verdict.from_junit(_report(_case("t1", ["PEER-1"]) + VERDICT_PASSED, '<property name="gate" value="READY"/>'))
    assert not v.ready
    # issue 38 item 6a: the re-render says which place disagrees, as a SUITE-2 blocker of its own
    assert verdict.rows(v, SECTIONS[:1])[-1].failing == ["SUITE-2"]
    assert v.blockers == [verdict.DISAGREES + "it names no marker written"]


@pytest.mark.parametrize("case", ["", '<testcase classname="pty-acceptance" name="verdict">'
                                      '<failure message="NOT READY: 1 blockers: MARK-1">MARK-1: x</failure></testcase>',
                                  VERDICT_PASSED * 2], ids=["no verdict case", "it failed", "two of them"])
def test_ready_properties_without_one_passing_verdict_case_are_not_ready(case):
    """SUITE-2: READY is said in the properties and by the gate's one verdict
    case; a report where they disagree is not READY (and the case is never
    one of the checklist's tests)."""
    v = verdict.from_junit(_report(_case("t1", ["PEER-1", "PEER-2"]) + case, READY_PROPS))
    assert not v.ready and v.last_line.startswith("NOT READY: ")
    assert [c.nodeid for c in v.cases] == ["acceptance/test_a.py::t1"]


def test_every_catalogue_id_is_in_some_row():
    sections = checklist.load(REPO / "ROOT-ACCEPTANCE.md")
    v = verdict.from_junit(_report(""))
    ids = {i for r in verdict.rows(v, sections) for i in r.ids}
    assert ids == {r.id for r in CATALOGUE}
    assert ENFORCED_BY_GATE <= set(verdict.rows(v, sections)[-1].ids)


def test_a_statement_has_no_subject_it_did_not_read():
    v = verdict.from_junit(_report(
        _case("t1", ["PEER-1"]),
        f'<property name="binary-at-marker-time" value="{"a" * 64}  /x/sup"/>'
        f'<property name="runtime-at-marker-time" value="not readable: /x/node: ENOENT"/>'
        f'<property name="pin" value="{"b" * 64}  /x/node"/><property name="pin" value="revision {"c" * 40}"/>'))
    st = intoto.statement(v, "r.xml", "d" * 64)
    assert st["subject"] == [
        {"name": "/x/sup", "digest": {"sha256": "a" * 64}},
        {"name": "/x/node", "digest": {"sha256": "b" * 64},
         "annotations": {"digestSource": "the inventory's claim; not read by the gate"}}]
    assert st["predicate"]["result"] == "FAILED"


def test_report_makes_an_out_dir_that_does_not_exist_and_says_in_one_line_where_it_cannot(tmp_path):
    """Issue 32 item 6: `report --out-dir` naming a folder that does not exist
    ended in a traceback; it is made. One that cannot be (a file in its
    place) is one line on stderr, exit status 2."""
    fixture = fixture_as_suite("ready", tmp_path / "fixture")  # a READY report of this checkout's suite
    out = tmp_path / "not" / "yet"
    done = subprocess.run([str(CLI), "report", str(fixture), "--out-dir", str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(n).name for n in bundle.names("ready.xml")[:2])
    (tmp_path / "a-file").write_text("")
    done = subprocess.run([str(CLI), "report", str(fixture), "--out-dir", str(tmp_path / "a-file" / "x")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"report: --out-dir {tmp_path / 'a-file' / 'x'}: ")


def _glance(name: str) -> tuple[str, str, dict]:
    """(the page's first screen, the whole page, the Statement) of a fixture report."""
    sections = checklist.load(REPO / "ROOT-ACCEPTANCE.md")
    made, _ = bundle.from_file(str(REPO / f"tests/fixtures/verdict/{name}.xml"), sections)
    page = made.html.decode()
    return page[page.index('id="verdict"'):page.index('id="matrix"')], page, json.loads(made.statement)


@pytest.mark.parametrize("name, result", [("ready", "WARNED"), ("client-group-writable", "FAILED")])
def test_the_html_says_at_a_glance_host_counts_and_the_statements_result(name, result):
    """Issue 32 item 5: the first screen names the inventory's host (not the
    machine's hostname), counts the tests as the Statement does, says its
    result (WARNED for a READY run with concerns), and lists the IDs with concerns."""
    import re

    head, _, st = _glance(name)
    pred = st["predicate"]
    assert pred["result"] == result
    host = re.search(r"<tr><th>Host</th><td>(.*?)</td></tr>", head).group(1)
    assert host.startswith("<b>reference</b> (inventory <code>inventories/reference.yml</code>)"), host
    assert host.endswith("the machine calls itself vm")  # named as the machine's, never as the host
    tests = re.search(r"<tr><th>Tests</th><td>(.*?)</td></tr>", head).group(1)
    total = len(pred["passedTests"]) + len(pred["warnedTests"]) + len(pred["failedTests"])
    assert re.sub(r"<[^>]+>", "", tests) == (f"{total} tests: {len(pred['passedTests'])} passed, "
                                             f"{len(pred['warnedTests'])} passed with concerns, "
                                             f"{len(pred['failedTests'])} failed, 0 not run")
    assert f"<b>{result}</b>" in re.search(r"<tr><th>in-toto Statement</th><td>(.*?)</td></tr>", head).group(1)
    assert 'href="#req-UNIT-9">UNIT-9</a>' in re.search(r"<tr><th>Concerns</th><td>(.*?)</td></tr>", head).group(1)


def test_a_test_that_carries_a_concern_is_never_a_plain_green_pass():
    """Issue 32 item 5: the matrix marked their rows CONCERN while the case
    list showed them as green "passed"."""
    _, page, st = _glance("ready")
    warned = st["predicate"]["warnedTests"]
    assert warned
    for nodeid in warned:
        shown = html.escape(nodeid, quote=True)
        assert f'class="PASS">passed: {shown}</h3>' not in page
        assert f'class="CONCERN">passed with concerns: {shown}</h3>' in page
    for nodeid in st["predicate"]["passedTests"]:
        assert f'class="PASS">passed: {html.escape(nodeid, quote=True)}</h3>' in page


def test_the_first_causes_say_why_a_single_test_failed():
    head, _, _ = _glance("client-group-writable")
    causes = head[head.index('id="causes"'):head.index('id="blockers"')]
    assert "OWN-1: client binary is not root-controlled" in causes and "PLUGIN-1: run 1/10 exited 1" in causes


def test_report_names_the_inventorys_host_not_the_machines(tmp_path):
    done = subprocess.run([str(CLI), "report", str(REPO / "tests/fixtures/verdict/ready.xml"), "--out-dir",
                           str(tmp_path)], capture_output=True, text=True, check=False)
    assert ": host reference's recorded verdict of " in done.stdout.splitlines()[-1], done.stdout[-500:]


def test_a_ready_bundle_names_the_suite_that_judged(project, target):
    """Issue 38 item 2: the suite's version, commit and tree digest in a READY
    bundle, read back by third-party readers: the JUnit report's suite
    properties by junitparser and xunitparser, the Statement by its schema
    (jsonschema), the HTML's first screen; each equal to what
    `pty-acceptance suite-identity` says of the checkout, and to git itself."""
    import junitparser
    import xunitparser

    from pty_acceptance.provenance import suite_identity

    make_runtime(target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(project.path)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "the reviewed suite"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-30:])
    report = junit(project)
    want = suite_identity.read(project.path, [str(Path(sys.prefix) / f"lib/python{sys.version_info[0]}."
                                                   f"{sys.version_info[1]}/site-packages")])
    assert want.commit == commit and want.modified == "no" and want.version.startswith("0.")
    tree = f"{want.tree_digest}  {len(want.listing)} files"
    # JUnit, read by junitparser ...
    xml = junitparser.JUnitXml.fromfile(str(report))
    suite = next(iter(xml))
    props = {p.name: p.value for p in suite.properties()}
    assert props["suite-version"] == want.version
    assert props["suite-commit"] == commit and props["suite-modified"] == "no"
    assert props["suite-tree"] == tree
    assert props["suite-distributions"].split("  ", 1)[0] == want.distributions_digest
    assert "pytest==9.2.0" in props["suite-distributions"].split()
    # ... and by xunitparser (which refuses a suite-level property name given twice)
    with open(report, "rb") as f:
        ts, _ = xunitparser.parse(f)
    assert (ts.properties["suite-version"], ts.properties["suite-commit"], ts.properties["suite-tree"]) == \
        (want.version, commit, tree)
    # the Statement, valid against the test-result schema, names the same suite
    html_path, statement_path, _ = (Path(p) for p in bundle.names(str(report)))
    st = json.loads(statement_path.read_text())
    validate(st)
    config = {c["name"]: c for c in st["predicate"]["configuration"]}
    files = config["opencode-pty-acceptance files"]
    assert files["digest"] == {"sha256": want.tree_digest}
    assert files["annotations"]["version"] == want.version
    assert config["opencode-pty-acceptance commit"]["digest"] == {"gitCommit": commit}
    assert config["opencode-pty-acceptance commit"]["annotations"]["modified"] == "no"
    assert config["opencode-pty-acceptance virtualenv"]["digest"] == {"sha256": want.distributions_digest}
    assert "pytest==9.2.0" in config["opencode-pty-acceptance virtualenv"]["annotations"]["distributions"]
    # the HTML's first screen
    text = html_path.read_text()
    row = text[text.index('<td id="suite">'):].split("</td>", 1)[0]
    assert want.version in row and commit in row and want.tree_digest in row and "modified: no" in row
    # the command line says the same of the checkout
    said = subprocess.run([str(CLI), "suite-identity", "--root", str(project.path), "--list"],
                          capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    assert f"suite-tree: {tree}" in said and f"suite-commit: {commit}" in said
    assert said[-len(want.listing):] == list(want.listing)  # --list: the lines the digest is over


def test_a_modified_checkout_is_said_in_the_bundle(project, target):
    """A tracked file changed after the commit: the report says so (the gate
    judges the files, not the commit: the run can still be READY)."""
    make_runtime(target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(project.path)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "the reviewed suite"], check=True)
    with (project.path / "acceptance/test_all.py").open("a") as f:
        f.write("# changed after the review\n")
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-30:])
    props = {p.get("name"): p.get("value") for p in ET.parse(junit(project)).getroot().iter("property")}
    assert props["suite-modified"] == "yes: 1 tracked files differ from the commit: acceptance/test_all.py"
