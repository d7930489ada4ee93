"""The name a run publishes under (report/report_name.py, issue 38 item 6c):
no run leaves an older verdict under the name it was asked to write. With a
fixed `--junitxml reports/latest.xml`, a later failing run could not publish
(O_EXCL) and `latest.*` kept saying READY; two runs in the same UTC second
did the same with the suite's own name. Now the name asked for is the run's
(an earlier run's files under it removed before any test), and the suite's
own name is never one in use."""

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pty_acceptance.gate import plugin
from pty_acceptance.report import bundle, reports, verdict

from gateproject import FAILING, last_line, run, with_module
from signkeys import openssl_key



def _verdict(path: Path) -> verdict.Verdict:
    return verdict.from_junit(reports.parse(path.read_bytes(), str(path)))


def _result(xml: Path) -> str:
    return json.loads(Path(bundle.names(str(xml))[1]).read_text())["predicate"]["result"]


def test_a_later_failing_run_asked_for_the_same_name_replaces_the_ready_files(project, target, safe_dir):
    """The review's reproduction: READY under reports/latest.xml (signed), then
    a failing run asked for reports/latest.xml. Every latest.* file says what
    the later run found, and the earlier run's signed envelope is gone."""
    keys = safe_dir / "keys"
    keys.mkdir(mode=0o700)
    key, _ = openssl_key(keys)
    latest = project.path / "reports/latest.xml"
    first = run(project, target, "--junitxml", "reports/latest.xml", "--sign-key", str(key))
    assert last_line(first) == f"READY: marker written {target.marker}"
    assert _verdict(latest).ready and _result(latest) in ("PASSED", "WARNED")
    assert Path(bundle.names(str(latest))[2]).exists()
    with_module(project, FAILING)
    second = run(project, target, "--junitxml", "reports/latest.xml")
    assert last_line(second) == "NOT READY: 1 blockers: OWN-2", "\n".join(second.outlines[-30:])
    v = _verdict(latest)
    assert not v.ready and v.last_line == "NOT READY: 1 blockers: OWN-2"
    html, statement, envelope = bundle.names(str(latest))
    assert "NOT READY" in Path(html).read_text().split("</title>")[0]
    assert _result(latest) == "FAILED"
    assert not os.path.lexists(envelope), "the earlier run's signed READY Statement still stands"
    said = dict((p.get("name"), p.get("value")) for p in ET.parse(latest).getroot().iter("property"))
    assert said["report-name"].startswith(f"{latest}: the name asked for; what an earlier run left under it "
                                          "was removed before any test: latest.xml, latest.html"), said
    assert sorted(p.name for p in latest.parent.iterdir()) == ["latest.html", "latest.intoto.json", "latest.xml"]


def test_a_run_killed_before_it_published_leaves_no_older_verdict_under_the_name(project, target):
    """The name is claimed before any test: a run that ends before the end
    (here its registration refuses a later option) finds the name already
    the run's. A failing registration with the name claimed leaves nothing
    under it, never the earlier READY files."""
    latest = project.path / "reports/latest.xml"
    assert last_line(run(project, target, "--junitxml", "reports/latest.xml")).startswith("READY: ")
    res = run(project, target, "--junitxml", "reports/latest.xml", "--sign-tool", "nonesuch")
    assert "NOT READY" in "\n".join(res.outlines + res.errlines) and res.ret != 0
    assert not any(os.path.lexists(p) for p in (latest, *bundle.names(str(latest)))), \
        sorted(p.name for p in latest.parent.iterdir())


def test_something_else_under_the_name_asked_for_is_named_and_not_removed(project, target):
    (project.path / "reports").mkdir(exist_ok=True)
    (project.path / "reports/latest.html").mkdir()
    res = run(project, target, "--junitxml", "reports/latest.xml")
    said = "\n".join(res.outlines + res.errlines)
    assert res.ret != 0 and "reports/latest.html is a directory, not a report an earlier run wrote" in said, said
    assert (project.path / "reports/latest.html").is_dir()
    assert not os.path.lexists(target.marker)


def test_two_runs_in_the_same_utc_second_each_publish_their_own(project, target, monkeypatch):
    """The suite's own name carries the UTC second: the second run of that
    second takes the next free name, publishes its NOT READY there, and the
    first run's READY stays its own."""
    second = (2026, 12, 5, 4, 15, 0, 5, 339, 0)
    monkeypatch.setattr(plugin.time, "gmtime", lambda *a: plugin.time.struct_time(second))
    assert last_line(run(project, target)) == f"READY: marker written {target.marker}"
    with_module(project, FAILING)
    res = run(project, target)
    assert last_line(res) == "NOT READY: 1 blockers: OWN-2", "\n".join(res.outlines[-30:])
    reports_dir = project.path / "reports"
    first, again = reports_dir / "acceptance-fake-20261205T041500Z.xml", \
        reports_dir / "acceptance-fake-20261205T041500Z-2.xml"
    assert _verdict(first).ready and not _verdict(again).ready
    assert _result(again) == "FAILED"
    assert f"bundle: {again.with_suffix('.html')}" in res.outlines


def test_the_suites_own_name_skips_every_name_whose_bundle_is_taken(safe_dir):
    from pty_acceptance.report import report_name

    d = safe_dir / "reports"
    d.mkdir()
    (d / "acceptance-h-S.intoto.json").write_text("{}")
    (d / "acceptance-h-S-2.xml").write_text("<x/>")
    path, said = report_name.unique(str(d), "h", "S")
    assert path == f"{d}/acceptance-h-S-3.xml" and "(the 2 before it were taken)" in said


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_link_or_fifo_under_the_name_is_refused_never_followed(safe_dir, kind):
    from pty_acceptance.report import report_name

    d = safe_dir / "reports"
    d.mkdir()
    target = safe_dir / "elsewhere.xml"
    target.write_text("keep me")
    if kind == "link":
        (d / "latest.xml").symlink_to(target)
    else:
        os.mkfifo(d / "latest.intoto.json")
    with pytest.raises(report_name.NameRefused):
        report_name.claim(str(d / "latest.xml"))
    assert target.read_text() == "keep me" and len(list(d.iterdir())) == 1
