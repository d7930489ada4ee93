"""PEER-1/PEER-2's reading of the peer's InvocationID (issue 31): from the
MainPID's pidfd where systemd offers GetUnitByPIDFD (257 and later), by the
unit's name before; a process that is not the unit's MainPID, or that
GetUnitByPIDFD puts in another unit, gives no invocation to match."""

import os
import subprocess

import pytest

from pty_acceptance.supervisor import admission

BY_NAME = bytes(range(16))
BY_PIDFD = bytes(range(16, 32))


class FakeBus:
    def __init__(self, main, pidfd_answer):
        self.main, self.pidfd_answer, self.fds = main, pidfd_answer, []

    def properties(self, name, iface="org.freedesktop.systemd1.Unit", load=False):
        return {"MainPID": self.main, "InvocationID": BY_NAME} if iface.endswith("Service") else \
            {"InvocationID": BY_NAME}

    def unit_by_pidfd(self, fd):
        self.fds.append(os.readlink(f"/proc/self/fd/{fd}"))
        return self.pidfd_answer


@pytest.fixture
def child():
    p = subprocess.Popen(["/bin/sleep", "30"])
    yield p.pid
    p.kill()
    p.wait()


@pytest.mark.parametrize("answer, want, how", [
    (None, BY_NAME, "by the unit's name (no GetUnitByPIDFD on this systemd: before 257)"),
    (("peer.service", BY_PIDFD), BY_PIDFD, "GetUnitByPIDFD(pidfd of MainPID {pid}): peer.service"),
    (("other.service", BY_PIDFD), b"", "GetUnitByPIDFD: the process {pid} is in other.service, not peer.service"),
])
def test_the_invocation_comes_from_the_pidfd_where_systemd_offers_it(child, answer, want, how):
    bus = FakeBus(child, answer)
    assert admission.peer_invocation(bus, "peer.service", child) == (want, how.format(pid=child))
    assert bus.fds == ["anon_inode:[pidfd]"]  # asked about that very process


def test_a_process_that_is_not_the_mainpid_gives_no_invocation(child):
    bus = FakeBus(1, ("peer.service", BY_PIDFD))
    assert admission.peer_invocation(bus, "peer.service", child) == \
        (b"", f"peer.service's MainPID is 1, not {child}")
    assert bus.fds == []
