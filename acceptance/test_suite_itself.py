"""The suite itself: what root runs and trusts is root's alone.

SUITE-4 the suite's checkout, the virtualenv and interpreter running it, the
        pty_acceptance package it imported, the inventory, the checklist
        (ROOT-ACCEPTANCE.md) and the report directory pass the OWN-1 chain
        check: root-owned, not group/other-writable, not a link, every
        directory from "/" down likewise; and every entry below the checkout,
        the virtualenv and the package is root's and not group/other-writable
        (a link there must itself be root's and lead to root's). Checked when
        the plugin registers (before any test ran) and again here; otherwise
        the service user chose what root ran, and the run cannot earn the marker.
        The kernel's link protections the preflight read (fs.protected_hardlinks,
        _symlinks, _fifos, _regular) are recorded here as evidence, never relied
        on (the suite refuses links, FIFOs and hard links in the user's trees
        itself); each one at 0 is a concern.
"""

import pytest

from pty_acceptance.gate import owntree
from pty_acceptance.host import hostfs
from pty_acceptance.gate.plugin import STATE
from pty_acceptance.gate.failures import fail


@pytest.mark.requirement("SUITE-4")
def test_the_suites_own_tree_is_root_controlled(pytestconfig, inv, evidence, concern):
    state = pytestconfig.stash[STATE]
    owns, skip = owntree.of_run(pytestconfig, state.report_path)
    for own in owns:
        evidence(own.what, hostfs.Node.at(own.path).describe())  # lstat, not host.file: it follows links
    for p in (state.preflight.protections if state.preflight is not None else ()):
        evidence("kernel link protection", p.line())
        if p.off:
            concern("SUITE-4", f"{p.line()} (the suite itself refuses them in the user's trees)")
    at_start = pytestconfig.stash.get(owntree.AT_START, None)
    if at_start is None:
        fail("SUITE-4: the suite's own tree was not checked when the plugin registered")
    now = owntree.problems(owns, skip)
    found = list(dict.fromkeys([f"at start: {p}" for p in at_start] + [f"now: {p}" for p in now]))
    if found:
        fail("SUITE-4: the suite's own tree is not root's alone (what root runs and "
             "trusts could be changed by another user): " + owntree.summary(found))
