"""A pytest plugin (`-p fakehost`, tests/ on PYTHONPATH) for the suite's own
tests that run real acceptance modules on this machine against stand-ins:
this machine is not a systemd host, so the preflight's host checks
(preflight.host_findings, whose own tests are tests/test_preflight.py) find
nothing wrong here. Never used on a target: `-p` itself blocks the marker
(runshape.py)."""

from pty_acceptance.decision import preflight
from pty_acceptance.host import stopguard

preflight.host_findings = lambda inv: []


class _NoUnits:  # SUITE-5's stop guard: no unit of the suite's runs here
    def call(self, method, *args):
        return ([],)

    def close(self):
        pass


stopguard.connect = _NoUnits
