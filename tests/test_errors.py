"""The one error vocabulary (errors.py) and the one way it becomes a failure
(gate/failures.py, by the plugin's hooks): no traceback, the message beginning
with requirement IDs, the JUnit case reported under the error's own IDs."""

import xml.etree.ElementTree as ET

import pytest

from pty_acceptance import errors
from pty_acceptance.gate import failures

PROJECT_TESTS = '''
import pytest
from pty_acceptance import errors

@pytest.mark.requirement("PEER-2")
def test_own_ids():
    raise errors.Finding("the impostor got HELLO_OK", requirements=("PEER-3",))

@pytest.mark.requirement("OWN-1")
def test_the_tests_ids():
    raise errors.Unreadable("cannot lstat /usr/local/bin/x")

@pytest.mark.requirement("UNIT-1")
def test_a_message_naming_its_ids():
    raise errors.Refused("SUITE-4: the session unit 'x' is not ours")

@pytest.fixture
def broken():
    raise errors.Unreadable("systemd did not answer")

@pytest.mark.requirement("CONC-2")
def test_in_a_fixture(broken):
    pass

@pytest.mark.requirement("CONC-3")
def test_a_plain_error_keeps_its_traceback():
    raise KeyError("not ours")

def test_unmarked():  # the suite's own tests name no requirement: their tracebacks stay
    raise errors.Finding("a unit test's error")
'''


@pytest.fixture
def ran(pytester):
    pytester.makeconftest('pytest_plugins = ["pty_acceptance.gate.plugin"]\n')
    pytester.makepyfile(test_x=PROJECT_TESTS)
    res = pytester.runpytest("test_x.py", "-p", "no:cacheprovider", "--junitxml=out.xml")  # not an acceptance run
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")}
    return res, cases


def _message(case) -> str:
    bad = case.find("failure") if case.find("failure") is not None else case.find("error")
    return bad.get("message") + "\n" + (bad.text or "")


def _ids(case) -> list[str]:
    return [p.get("value") for p in case.iter("property") if p.get("name") == "requirement"]


def test_an_error_names_its_own_ids_and_the_case_carries_them(ran):
    res, cases = ran
    text = _message(cases["test_own_ids"])
    assert "PEER-3: the impostor got HELLO_OK" in text
    assert "Traceback" not in text and "raise errors" not in text, text
    assert "PEER-3" in _ids(cases["test_own_ids"])


def test_an_error_without_ids_is_named_by_the_test(ran):
    _, cases = ran
    assert "OWN-1: cannot lstat /usr/local/bin/x" in _message(cases["test_the_tests_ids"])
    assert "SUITE-4: the session unit 'x' is not ours" in _message(cases["test_a_message_naming_its_ids"])
    assert "UNIT-1: SUITE-4" not in _message(cases["test_a_message_naming_its_ids"])


def test_an_error_in_a_fixture_is_the_same_failure(ran):
    res, cases = ran
    case = cases["test_in_a_fixture"]
    assert case.find("error") is not None
    assert "CONC-2: systemd did not answer" in _message(case)
    res.assert_outcomes(failed=5, errors=1)


def test_other_exceptions_are_not_touched(ran):
    _, cases = ran
    assert "KeyError" in _message(cases["test_a_plain_error_keeps_its_traceback"])
    assert 'raise errors.Finding("a unit test' in _message(cases["test_unmarked"])


def test_headline():
    assert errors.Finding("x").headline() == "SUITE-3: x"
    assert errors.Finding("x").headline(["PEER-1", "PEER-2"]) == "PEER-1 PEER-2: x"
    assert errors.Finding("x", requirements=["UNIT-4"]).headline(["PEER-1"]) == "UNIT-4: x"
    assert errors.Finding("PEER-2 (slice): x").headline(["PEER-1"]) == "PEER-2 (slice): x"
    f = failures.failure(errors.Refused("no", requirements=("SUITE-4",)))
    assert (f.msg, f.pytrace, f.requirements) == ("SUITE-4: no", False, ("SUITE-4",))


def test_every_library_error_is_an_acceptance_error():
    import importlib
    import pkgutil

    import pty_acceptance

    loose = []
    for m in pkgutil.walk_packages(pty_acceptance.__path__, "pty_acceptance."):
        if ".probes" in m.name or m.name == "pty_acceptance.supervisor.protocol":
            continue  # standalone: staged beside the agent, importing nothing of the package
        mod = importlib.import_module(m.name)
        for name, obj in vars(mod).items():
            if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == mod.__name__ \
                    and not issubclass(obj, errors.AcceptanceError):
                loose.append(f"{m.name}.{name}")
    assert not loose, f"errors the library raises outside the vocabulary (errors.py): {loose}"
