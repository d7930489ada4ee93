"""gate/checks.py: the acceptance tests' checking vocabulary raises the
Finding a test's failure is made of (failures.failure: 'IDS: text', reported
under the IDs), and lets a failure raised inside its blocks through."""

import pytest

from pty_acceptance.errors import Finding, Unreadable
from pty_acceptance.gate import checks, failures


def failure_text(err: Finding) -> str:
    return str(failures.failure(err).msg)


def test_expect_passes_a_truth_and_fails_the_ids_with_the_text():
    checks.expect(True, "UNIT-1", "never")
    with pytest.raises(Finding) as e:
        checks.expect([], ("ISO-1", "ISO-2"), "pid 7 is visible")
    assert e.value.requirements == ("ISO-1", "ISO-2")
    assert failure_text(e.value) == "ISO-1 ISO-2: pid 7 is visible"


def test_expect_none_joins_the_problems_after_the_subject():
    checks.expect_none([], "UNIT-2", "u.service")
    with pytest.raises(Finding) as e:
        checks.expect_none(["x", "y\x1b"], "UNIT-2", "u.service", escape=lambda t: t.replace("\x1b", "?"))
    assert failure_text(e.value) == "UNIT-2: u.service: x; y?"
    with pytest.raises(Finding) as e:
        checks.expect_none(iter(["x"]), "UNIT-2")
    assert failure_text(e.value) == "UNIT-2: x"
    with pytest.raises(Finding) as e:
        checks.expect_none(["a", "b"], "CONC-2", sep=" | ")
    assert failure_text(e.value) == "CONC-2: a | b"


def test_collect_fails_at_the_end_with_every_problem_in_order():
    with checks.collect("UNIT-3", "u") as problems:
        problems.when(False, "never")
    with pytest.raises(Finding) as e:
        with checks.collect("UNIT-3", "u") as problems:
            problems.when(1, "one")
            problems.add("two")
            problems += ["three"]
    assert failure_text(e.value) == "UNIT-3: u: one; two; three"


def test_collect_lets_a_failure_inside_through():
    with pytest.raises(Unreadable, match="first"):
        with checks.collect("UNIT-3") as problems:
            problems.add("later")
            raise Unreadable("first")


def test_reading_fails_the_ids_for_the_errors_named_only():
    with pytest.raises(Finding) as e:
        with checks.reading("UNIT-5", "cannot read PID 1", OSError, ValueError):
            raise ValueError("bad number")
    assert failure_text(e.value) == "UNIT-5: cannot read PID 1: bad number"
    assert e.value.__cause__ is None and e.value.__suppress_context__
    with pytest.raises(Finding) as e:
        with checks.reading(("UNIT-5", "UNIT-6"), "", TimeoutError):
            raise TimeoutError("no answer within 5 s")
    assert failure_text(e.value) == "UNIT-5 UNIT-6: no answer within 5 s"
    with pytest.raises(KeyError):
        with checks.reading("UNIT-5", "cannot read", OSError):
            raise KeyError("k")
