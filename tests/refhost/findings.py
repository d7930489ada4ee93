"""What the reference host truly fails on this kind of machine.

A conforming reference deployment still cannot pass every requirement here:
some findings belong to the kernel and to Linux itself, not to the
deployment. They are listed here, one entry per acceptance test, with the
reason. A good reference run must fail exactly these tests and no other
(tests/test_reference_host.py), the mutants' control must reproduce them
(tests/mutants/run.py), and a fault is judged only by the tests it newly
breaks. Because these tests fail, the gate never writes a marker on the
reference host: that is the suite working, not a harness defect.

When a finding stops reproducing (a kernel with Yama, a deployment that
fixes it), the control run says so: remove the entry.
"""
from __future__ import annotations

# "module::test name" (as tests/refhost/junit.Case.name gives it, without the
# "acceptance." classname prefix) -> why the reference host really fails it.
KNOWN_FINDINGS: dict[str, str] = {}


def case_key(name: str) -> str:
    """'acceptance.test_isolation::test_x[p]' -> 'test_isolation::test_x[p]'."""
    mod, _, test = name.partition("::")
    return f"{mod.rsplit('.', 1)[-1]}::{test}"


def known(name: str) -> bool:
    return case_key(name) in KNOWN_FINDINGS


def finding_ids(report) -> set[str]:
    """Requirement IDs carried by the known findings that failed in this report."""
    return {i for c in report.failed() if known(c.name) for i in c.requirements}
