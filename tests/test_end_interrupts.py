"""SUITE-2, SUITE-5 (issue 29 item 4): an interrupt during the gate's end.

The JUnit published before the marker said READY and named a marker: a
SIGTERM during signing or the marker's write left that report, rendered
READY with no marker on the host; a SIGTERM while the bundle was written,
after the marker, left the marker with no bundle. Now the end holds SIGINT
and SIGTERM (gate/interrupts.py), publishes NOT READY and says READY only
after the marker was written and read back; an interrupt at any step takes
back what the end wrote. Each test runs the fixture project in a process of
its own, sends that process SIGTERM (or SIGINT) from inside one step of the
end, and reads every artifact on disk: JUnit, HTML, Statement, DSSE envelope
and marker each say NOT READY or are absent."""

import base64
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pty_acceptance.report import bundle, reports, verdict

from conftest import FakeBus
from gateproject import FAKE_HOST, SEPARATE_BUS, last_line
from signkeys import openssl_key

DEADLINE_S = 180

# The fixture project's conftest for a run in a process of its own: the fake
# host, the supervisor fixture's process as the unit's MainPID, and one
# function of the end wrapped to signal this very process once it returned.
CONFTEST = FAKE_HOST + SEPARATE_BUS + """
import os, signal
from pty_acceptance.decision import readiness_marker as marker, rules
from pty_acceptance.report import bundle, reports, signing

STEP = {step!r}
if STEP:
    module, name = STEP.split(".")
    owner = {{"marker": marker, "rules": rules, "bundle": bundle, "reports": reports, "signing": signing}}[module]
    real, fired = getattr(owner, name), []

    def interrupted(*a, **kw):
        out = real(*a, **kw)
        if not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.{signal})
        return out

    setattr(owner, name, interrupted)
"""

# the end, in its order: the decision, then finish.py's steps
STEPS = {
    "decide": "rules.decide",
    "publish": "reports.publish",
    "sign": "signing.sign",
    "write marker": "marker.write",
    "verify marker": "marker.verify",
    "bundle write": "bundle.write",
    "READY report": "reports.replace",
}


def end_run(project, target, step: str, sig: str = "SIGTERM"):
    """The project run in a process of its own, signing (the envelope is an artifact too)."""
    (project.path / "acceptance/conftest.py").write_text(
        CONFTEST.format(main_pid=FakeBus.main_pid, step=step, signal=sig))
    keys = target.base / "keys"  # root's alone, as a signing key must be
    keys.mkdir(mode=0o700)
    key, _ = openssl_key(keys)
    return project.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory),
                                        "--sign-key", str(key), timeout=DEADLINE_S)


def artifacts(project) -> dict[str, Path]:
    """What the run left in its report directory, by kind."""
    found = {p.name: p for p in (project.path / "reports").iterdir()}
    (xml,) = [p for n, p in found.items() if n.endswith(".xml")]
    html, statement, envelope = (Path(n) for n in bundle.names(str(xml)))
    kinds = {"junit": xml, "html": html, "statement": statement, "dsse": envelope}
    stray = set(found.values()) - set(kinds.values())
    assert not stray, f"files beside the report: {sorted(map(str, stray))}"
    return {k: p for k, p in kinds.items() if p.exists()}


def statement_result(data: bytes) -> str:
    return json.loads(data)["predicate"]["result"]


def assert_nothing_says_ready(project, target, res, cause: str) -> None:
    """Every artifact on disk says NOT READY (or is absent), the marker is absent."""
    text = "\n".join(res.outlines + res.errlines)
    assert not os.path.lexists(target.marker), "the marker stands: " + text[-3000:]
    line = last_line(res)
    assert line.startswith("NOT READY: ") and "SUITE-5" in line.split(": ", 2)[2].split(), text[-3000:]
    assert res.ret == pytest.ExitCode.INTERRUPTED, text[-3000:]
    assert "INTERNALERROR" not in text and "Traceback" not in text, text[-3000:]
    found = artifacts(project)
    root = ET.parse(found["junit"]).getroot()
    v = verdict.from_junit(root)
    assert not v.ready and v.gate == "NOT READY" and not v.values("marker")
    assert any(b.startswith("SUITE-5: interrupted by " + cause) for b in v.blockers), v.blockers
    (case,) = [c for c in root.iter("testcase") if reports.is_verdict_case(c)]
    assert "SUITE-5: interrupted by " + cause in case.find("failure").text
    html = found["html"].read_text()
    assert "NOT READY" in html and "READY: marker written" not in html
    assert statement_result(found["statement"].read_bytes()) == "FAILED"
    if "dsse" in found:  # the FAILED Statement, signed
        payload = base64.b64decode(json.loads(found["dsse"].read_text())["payload"])
        assert payload == found["statement"].read_bytes()


def test_the_same_run_uninterrupted_is_ready(project, target):
    """The control: the project, run as the tests below run it, signal aside."""
    res = end_run(project, target, step="")
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-30:])
    found = artifacts(project)
    assert set(found) == {"junit", "html", "statement", "dsse"}
    assert verdict.from_junit(ET.parse(found["junit"]).getroot()).ready
    assert statement_result(found["statement"].read_bytes()) in ("PASSED", "WARNED")


@pytest.mark.parametrize("step", list(STEPS))
def test_a_sigterm_at_each_step_of_the_end_leaves_nothing_that_says_ready(project, target, step):
    res = end_run(project, target, STEPS[step])
    assert_nothing_says_ready(project, target, res, "SIGTERM")
    assert any("SUITE-5: SIGTERM received at the end of the run" in l for l in res.outlines)


def test_a_sigint_while_the_bundle_is_written_takes_the_marker_back(project, target):
    res = end_run(project, target, STEPS["bundle write"], sig="SIGINT")
    assert_nothing_says_ready(project, target, res, "SIGINT")


def test_a_sigkill_after_publishing_leaves_a_report_that_says_not_ready(project, target):
    """SIGKILL cannot be held: killed right after the report was published,
    the report on disk is the pending one, NOT READY, naming why."""
    res = end_run(project, target, STEPS["publish"], sig="SIGKILL")
    assert res.ret == -9 or res.ret == 137 or res.ret < 0, res.ret
    assert not os.path.lexists(target.marker)
    found = artifacts(project)
    assert set(found) == {"junit"}
    v = verdict.from_junit(ET.parse(found["junit"]).getroot())
    assert not v.ready and v.blockers == [reports.PENDING]
    assert v.last_line == "NOT READY: 1 blockers: MARK-1"
