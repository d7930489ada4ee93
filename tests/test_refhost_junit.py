"""The reference harness's JUnit reader: outcomes, requirement IDs, and the
first line of each failure's message (what a CI log shows of a failed run)."""

from tests.refhost.junit import MESSAGE_MAX, Report

XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<properties><property name="blocker" value="HELPER-4: acceptance/test_helper.py::t: call failed"/></properties>
<testcase classname="acceptance.test_helper" name="t">
  <properties><property name="requirement" value="HELPER-4"/></properties>
  <failure message="AssertionError: HELPER-4: the command holds fd 3&#10;assert not [...]">trace</failure>
</testcase>
<testcase classname="acceptance.test_pty" name="long"><error message="{long}"/></testcase>
<testcase classname="acceptance.test_pty" name="ok">
  <properties><property name="requirement" value="PTY-1"/></properties>
</testcase>
<testcase classname="pty-acceptance" name="verdict">
  <properties><property name="requirement" value="MARK-1"/></properties>
  <failure message="NOT READY: 1 blockers: HELPER-4">HELPER-4: acceptance/test_helper.py::t: call failed</failure>
</testcase>
</testsuite></testsuites>
"""


def test_failures_carry_their_first_message_line(tmp_path):
    path = tmp_path / "acceptance-x.xml"
    path.write_text(XML.replace("{long}", "x" * 1000))
    r = Report.parse(path)
    bad = {c.name: c for c in r.failed()}
    assert set(bad) == {"acceptance.test_helper::t", "acceptance.test_pty::long"}
    helper = bad["acceptance.test_helper::t"]
    assert (helper.outcome, helper.requirements) == ("failure", ("HELPER-4",))
    assert helper.message == "AssertionError: HELPER-4: the command holds fd 3"
    assert bad["acceptance.test_pty::long"].message == "x" * MESSAGE_MAX
    assert [c.message for c in r.cases if c.outcome == "passed"] == [""]
    assert r.blocker_ids() == {"HELPER-4"}
    assert r.verdict == "failure"  # the gate's own case: not one of the checklist's failures
