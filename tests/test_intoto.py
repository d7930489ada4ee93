"""The in-toto Statement (issue 13 item 3) against a JSON schema of the
test-result v0.1 predicate written from its specification
(tests/schemas/in-toto-test-result-v0.1.schema.json): for real JUnit reports
of the reference host (a READY run and a fault run, trimmed to a few cases)
and, in test_verdict.py, for the gate's own runs."""

import copy
import json

import jsonschema
import pytest

from pty_acceptance.report import bundle, intoto
from pty_acceptance.spec import checklist

from conftest import REPO
from statement_schema import SCHEMA, validate

FIXTURES = REPO / "tests/fixtures/verdict"
SECTIONS = checklist.load(REPO / "ROOT-ACCEPTANCE.md")


def statement_of(name: str) -> dict:
    made, _ = bundle.from_file(str(FIXTURES / name), SECTIONS)
    return json.loads(made.statement)


def test_the_schema_is_a_valid_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_a_ready_reference_run_with_concerns_gives_a_warned_statement():
    """READY with CONCERN rows (the reference host's UNIT-9 exposure scores...)
    is WARNED, never PASSED: a policy accepting READY accepts PASSED and WARNED."""
    st = statement_of("ready.xml")
    validate(st)
    assert st["_type"] == intoto.STATEMENT_TYPE and st["predicateType"] == intoto.PREDICATE_TYPE
    assert st["predicate"]["warnedTests"] and st["predicate"]["result"] == "WARNED"
    names = [s["name"] for s in st["subject"]]
    assert names[:3] == ["/usr/local/libexec/opencode-pty-supervisor",
                         "/usr/local/libexec/opencode-pty-launcher",
                         "/usr/local/libexec/opencode-pty-client"]
    # this report predates the runtime's hash in the report: the gate's own
    # runs (test_verdict.py) show the fourth subject
    assert len(names) == 3
    assert all(s["annotations"] == {"digestSource": "read at session start, not at marker time"}
               for s in st["subject"])
    assert st["predicate"]["failedTests"] == []
    assert any("exposure" in t for t in st["predicate"]["warnedTests"])


def test_a_fault_run_gives_a_failed_statement():
    st = statement_of("client-group-writable.xml")
    validate(st)
    assert st["predicate"]["result"] == "FAILED"
    assert "acceptance/test_ownership.py::test_binary_is_a_root_owned_regular_file[client]" \
        in st["predicate"]["failedTests"]


@pytest.mark.parametrize("breaks", [
    lambda s: s["predicate"].update(result="OK"),
    lambda s: s["predicate"].pop("configuration"),
    lambda s: s["subject"][0].pop("digest"),
    lambda s: s["subject"][0]["digest"].update(sha256="F" * 64),
    lambda s: s.update(subject=[]),
    lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"),
    lambda s: s["predicate"].update(passedTest=[]),
    lambda s: s["predicate"]["configuration"].append({"name": "no digest, uri or content"}),
], ids=["result", "no-configuration", "subject-digest", "uppercase-sha256", "no-subject",
        "statement-v0.1", "misspelt-field", "descriptor-without-identity"])
def test_the_schema_refuses_a_broken_statement(breaks):
    st = copy.deepcopy(statement_of("ready.xml"))
    breaks(st)
    with pytest.raises(jsonschema.ValidationError):
        validate(st)


def test_the_result_word():
    assert intoto.result(True, []) == "PASSED"
    assert intoto.result(True, ["acceptance/test_hardening.py::test_exposure"]) == "WARNED"
    assert intoto.result(False, []) == "FAILED" and intoto.result(False, ["x"]) == "FAILED"


@pytest.mark.parametrize("name", ["ready.xml", "client-group-writable.xml"])
def test_the_statement_names_the_host_it_judged(name):
    """Issue 38 item 10: on the JUnit report's descriptor, the inventory's name
    for the host and the machine's own (the report's `inventory` property and
    hostname attribute), read back by `verify-statement`."""
    import xml.etree.ElementTree as ET

    st = statement_of(name)
    validate(st)
    (junit,) = [c for c in st["predicate"]["configuration"] if c["name"] == name]
    machine = ET.parse(FIXTURES / name).getroot().find("testsuite").get("hostname")
    assert junit["annotations"] == {"host": "reference", "hostname": machine}
    assert intoto.host_of(st) == ("reference", machine)
