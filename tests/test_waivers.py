"""Waivers (issue 13 item 4): a reviewed waiver turns a CONCERN row into an
ACKNOWLEDGED one and changes nothing else; a waiver for a MUST-FIX ID, for an
ID with no concern, an expired one, or a waiver file that fails OWN-1's chain
check is itself a blocker."""

import datetime
import json
import os
from pathlib import Path

from pty_acceptance.report import bundle

from gateproject import ALL_IDS, junit, last_line, matrix_lines, run, with_module

TODAY = datetime.datetime.now(datetime.timezone.utc).date()
LATER = (TODAY + datetime.timedelta(days=30)).isoformat()

MODULE = f"""
import pytest

@pytest.mark.requirement(*{ALL_IDS!r})
def test_everything(concern):
    concern("ISO-3", "signal reach recorded")

@pytest.mark.requirement("PEER-4")
def test_peer():
    pass
"""


def waiver_file(target, *waivers, mode=0o644) -> Path:
    path = target.base / "waivers.yml"
    lines = ["waivers:"]
    for i, expires in waivers:
        lines += [f"  - id: {i}", "    reason: reviewed for the pilot", "    who: A. Reviewer",
                  f"    expires: {expires}"]
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, mode)
    return path


def test_waivers_for_every_concern_acknowledge_the_row(project, target):
    with_module(project, MODULE)
    path = waiver_file(target, ("ISO-3", LATER), ("UNIT-9", LATER))
    res = run(project, target, "--waivers", str(path))
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-20:])
    rows = matrix_lines(res.outlines)
    assert rows[1].split()[0] == "ACKNOWLEDGED", rows
    assert f"            waiver ISO-3: reviewed for the pilot (acknowledged by A. Reviewer, until {LATER})" in rows
    html = Path(bundle.names(str(junit(project)))[0]).read_text()
    assert 'class="ACKNOWLEDGED"' in html
    st = json.loads(Path(bundle.names(str(junit(project)))[1]).read_text())
    assert st["predicate"]["result"] == "WARNED"  # acknowledged concerns are still concerns
    assert str(path) in [c["name"] for c in st["predicate"]["configuration"]]


def test_a_waiver_for_part_of_the_concerns_leaves_the_row_a_concern(project, target):
    with_module(project, MODULE)
    res = run(project, target, "--waivers", str(waiver_file(target, ("ISO-3", LATER))))
    assert last_line(res).startswith("READY: ")
    assert matrix_lines(res.outlines)[1].split()[0] == "CONCERN"


def test_a_waiver_for_a_failing_id_blocks(project, target):
    with_module(project, MODULE.replace("    pass\n", "    assert False\n"))
    res = run(project, target, "--waivers", str(waiver_file(target, ("PEER-4", LATER))))
    assert last_line(res).startswith("NOT READY: ")
    assert any("a waiver for PEER-4 (by A. Reviewer), which is MUST-FIX in this run" in line
               for line in res.outlines)


def test_a_waiver_for_an_id_without_a_concern_blocks(project, target):
    with_module(project, MODULE)
    res = run(project, target, "--waivers", str(waiver_file(target, ("PEER-4", LATER))))
    assert last_line(res) == "NOT READY: 1 blockers: PEER-4"
    assert any("recorded no concern in this run" in line for line in res.outlines)
    assert not os.path.lexists(target.marker)


def test_an_expired_waiver_blocks(project, target):
    with_module(project, MODULE)
    yesterday = (TODAY - datetime.timedelta(days=1)).isoformat()
    res = run(project, target, "--waivers", str(waiver_file(target, ("ISO-3", yesterday))))
    assert last_line(res) == "NOT READY: 1 blockers: ISO-3"
    assert any(f"the waiver for ISO-3 by A. Reviewer expired on {yesterday}" in line
               for line in res.outlines)


def test_a_waiver_file_others_can_write_blocks(project, target):
    with_module(project, MODULE)
    res = run(project, target, "--waivers", str(waiver_file(target, ("ISO-3", LATER), mode=0o664)))
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1"
    assert any("fails the OWN-1 chain check" in line and "writable by group" in line
               for line in res.outlines)


def test_a_waiver_file_behind_a_link_blocks(project, target):
    with_module(project, MODULE)
    real = waiver_file(target, ("ISO-3", LATER))
    link = target.base / "waivers-link.yml"
    link.symlink_to(real)
    res = run(project, target, "--waivers", str(link))
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1"
    assert not os.path.lexists(target.marker)


def test_a_malformed_waiver_blocks(project, target):
    with_module(project, MODULE)
    path = waiver_file(target, ("ISO-3", "someday"))
    res = run(project, target, "--waivers", str(path))
    assert last_line(res) == "NOT READY: 1 blockers: SUITE-3"
