"""The marker and the report: what the gate will write, where, and how it is
read back.

MARK-4   a marker from an earlier run was removed when this run started, at
         every marker path the run could name (only a root-owned file that
         parses as a marker is removed: anything else refused the run).
MARK-1   the marker's directory chain is root-owned and not group/other-writable,
         with no symlink in it (the gate re-walks it with O_NOFOLLOW to write).
MARK-2/3 on this host's filesystem the verifier accepts a well-formed marker
         and refuses the malformed, stale and unsafe ones.
SUITE-2  every collected test names its requirement IDs; the JUnit report is
         being written.
SCOPE-4  the report states host acceptance and says it is not source approval.
"""

import os
import re

import pytest

from pty_acceptance.decision import readiness_marker as marker
from pty_acceptance.host import hostfs, scratch
from pty_acceptance.gate.checks import collect, expect
from pty_acceptance.gate.failures import requirement_ids
from pty_acceptance.gate.plugin import STATE


@pytest.fixture
def gate_state(pytestconfig):
    return pytestconfig.stash[STATE]


@pytest.mark.requirement("MARK-4")
def test_an_earlier_marker_is_gone(gate_state, evidence):
    evidence("at session start", gate_state.removal)
    node = hostfs.Node.at(gate_state.marker)  # lstat, not host.file: Testinfra follows links
    evidence("now", node.describe())
    unknown = [s for s in gate_state.removal.split("; ") if s.startswith(("could not", "no marker looked for"))]
    expect(not unknown, "MARK-4", f"a marker path was not looked at: {'; '.join(unknown)}")
    expect(not node.exists, "MARK-4", f"a marker exists mid-run: {node.describe()}")


@pytest.mark.requirement("MARK-1")
def test_the_marker_directory_chain_is_root_controlled(gate_state, evidence):
    chain = [d for d in hostfs.ancestors(gate_state.marker) if hostfs.Node.at(d).exists]
    evidence("chain", [hostfs.Node.at(d).describe() for d in hostfs.ancestors(gate_state.marker)])
    with collect("MARK-1") as problems:
        for d in chain:
            problems += hostfs.Node.at(d).root_controlled_problems("directory")


@pytest.fixture
def scratch_root():
    """A private root-owned tree standing in for / (removed afterwards)."""
    with scratch.directory("pty-acceptance-marker-", mode=0o755) as d:
        yield d


BAD = [  # (name, how the good content is spoiled, expected rule)
    ("crlf", lambda c: c.replace(b"\n", b"\r\n"), "carriage-return"),
    ("trailing line", lambda c: c + c.splitlines(True)[1], "line-count"),
    ("one space", lambda c: c.replace(b"  /", b" /", 1), "malformed-record"),
    ("arbitrary revision", lambda c: re.sub(rb"git:[0-9a-f]{40}", b"git:" + b"0" * 40, c),
     "revision-mismatch"),
    ("no final newline", lambda c: c[:-1], "no-final-newline"),
    ("empty", lambda c: b"", "empty"),
]


@pytest.mark.requirement("MARK-2", "MARK-3")
def test_the_verifier_accepts_only_the_bound_marker(inv, scratch_root, evidence):
    paths = [b.path for b in inv.binaries_list]
    records = []
    for n, p in enumerate(paths):
        real = hostfs.under(scratch_root, p)
        os.makedirs(os.path.dirname(real), mode=0o755, exist_ok=True)
        with open(real, "wb") as f:
            f.write(f"stand-in {n}\n".encode())
        records.append((hostfs.sha256_nofollow(real), p))
    # the stand-ins' own hashes are this test's pins (the verifier never judges without them)
    exp = marker.Expectation(inv.revision, inv.source_manifest_sha256, tuple(paths), tuple(d for d, _ in records))
    good = marker.render(inv.revision, inv.source_manifest_sha256, records)
    where = inv.marker
    real = hostfs.under(scratch_root, where)
    os.makedirs(os.path.dirname(real), mode=0o755, exist_ok=True)

    def place(content, mode=0o644):
        if os.path.lexists(real):
            os.unlink(real)
        with open(real, "wb") as f:
            f.write(content)
        os.chmod(real, mode)

    place(good)
    marker.verify(where, exp, root=scratch_root)
    evidence("well-formed", "accepted")
    refused = {}
    cases = BAD + [("group-writable", None, "writable"), ("stale binary", None, "binary-mismatch")]
    for name, spoil, _rule in cases:
        if name == "group-writable":
            place(good, 0o664)
        elif name == "stale binary":
            place(good)
            with open(hostfs.under(scratch_root, paths[0]), "ab") as f:
                f.write(b"changed after the marker\n")
        else:
            place(spoil(good))
        try:
            marker.verify(where, exp, root=scratch_root)
            refused[name] = "ACCEPTED"
        except marker.MarkerRefused as e:
            refused[name] = e.reason
    evidence("refusals", refused)
    wrong = {n: got for (n, _, rule), got in zip(cases, refused.values(), strict=True)
             if got == "ACCEPTED" or (rule and got != rule)}
    expect(not wrong, "MARK-3", f"the verifier's answers were wrong: {wrong}")


@pytest.mark.requirement("SUITE-2", "SCOPE-4")
def test_every_test_names_its_requirements_in_the_report(request, gate_state, evidence):
    xmlpath = getattr(request.config.option, "xmlpath", None)
    evidence("junit", xmlpath)
    expect(xmlpath, "SUITE-2", "no JUnit report is being written")
    expect(os.access(os.path.dirname(xmlpath), os.W_OK), "SUITE-2", f"cannot write {xmlpath}")
    unnamed = [i.nodeid for i in request.session.items if not requirement_ids(i)]
    expect(not unnamed, "SUITE-2", f"tests without requirement IDs: {unnamed}")
    props = [p for i in request.session.items for p in i.user_properties if p[0] == "requirement"]
    expect(len(props) >= len(request.session.items), "SUITE-2", "requirement properties missing")
    from _pytest.junitxml import xml_key
    xml = request.config.stash.get(xml_key, None)
    names = [n for n, _ in getattr(xml, "global_properties", [])]
    evidence("report properties", names)
    expect("SCOPE-4" in names, "SCOPE-4", "the report does not state what this acceptance is not")
