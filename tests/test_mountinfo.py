"""UNIT-7's reading of a session's mount table (host/mountinfo.py): which host
sockets a namespace shows, and where. The tables are cut from a live reference
host (systemd 252): a session unit with the contract's InaccessiblePaths=, and
the same session with an administrator's BindPaths=/BindReadOnlyPaths= drop-in."""
import pytest

from pty_acceptance.host import mountinfo

HOST = """\
464 444 0:88 / / rw,relatime shared:100 - overlay overlay rw
465 464 0:91 / /tmp rw,nosuid,nodev shared:200 - tmpfs tmpfs rw
470 464 0:108 / /run rw,nosuid,nodev shared:205 - tmpfs tmpfs rw,mode=755
471 470 0:108 /host /run/host ro,nosuid,nodev,noexec shared:205 - tmpfs tmpfs rw,mode=755
569 470 0:120 / /run/lock rw,nosuid,nodev,noexec,relatime shared:218 - tmpfs tmpfs rw,size=5120k
"""

# the session's table as systemd 252 leaves it: each InaccessiblePaths= entry a
# bind of /run/host/inaccessible/{dir,sock} (the same tmpfs as /run) on top
SESSION = """\
1277 1235 0:88 / / rw,relatime shared:456 master:100 - overlay overlay rw
1278 1277 0:91 / /tmp rw,nosuid,nodev shared:473 master:200 - tmpfs tmpfs rw
1292 1277 0:108 / /run rw,nosuid,nodev shared:486 master:205 - tmpfs tmpfs rw,mode=755
1293 1292 0:108 /host /run/host ro,nosuid,nodev,noexec shared:487 master:205 - tmpfs tmpfs rw,mode=755
1298 1292 0:120 / /run/lock rw,nosuid,nodev,noexec,relatime shared:492 master:218 - tmpfs tmpfs rw,size=5120k
1290 1292 0:108 /host/inaccessible/dir /run/dbus ro,nosuid,nodev,noexec shared:494 master:205 - tmpfs tmpfs rw
1291 1292 0:108 /host/inaccessible/sock /run/docker.sock ro,nosuid,nodev,noexec shared:495 master:205 - tmpfs tmpfs rw
1299 1292 0:108 /host/inaccessible/dir /run/opencode-pty ro,nosuid,nodev,noexec shared:497 master:205 - tmpfs tmpfs rw
1305 1292 0:108 /host/inaccessible/dir /run/user ro,nosuid,nodev,noexec shared:500 master:205 - tmpfs tmpfs rw
1338 1278 0:91 /systemd-private-fca8-opencode-pty-13bf.service-rNgJse/tmp /tmp rw shared:474 - tmpfs tmpfs rw
1340 1277 0:88 /var/tmp/systemd-private-fca8-opencode-pty-13bf.service-drPM3Q/tmp /var/tmp rw - overlay o rw
"""
BINDS = """\
1341 1340 0:108 /dbus/system_bus_socket /var/tmp/bus.sock rw,nosuid,nodev shared:837 master:205 - tmpfs tmpfs rw
1344 1340 0:108 /opencode-pty /var/tmp/sup ro,nosuid,nodev shared:838 master:205 - tmpfs tmpfs rw
"""
SOCKETS = ("/run/opencode-pty/supervisor.sock", "/run/docker.sock", "/run/dbus/system_bus_socket",
           "/run/user/1000/bus")


def _shown(session_text: str) -> dict[str, list[str]]:
    host, session = mountinfo.parse(HOST), mountinfo.parse(session_text)
    return {p: [at for at, _ in mountinfo.exposures(session, mountinfo.place(host, p))] for p in SOCKETS}


def test_a_socket_is_placed_by_its_filesystem_and_the_path_inside():
    host = mountinfo.parse(HOST)
    assert mountinfo.place(host, "/run/dbus/system_bus_socket") == mountinfo.Place((0, 108), "/dbus/system_bus_socket")
    assert mountinfo.place(host, "/run/lock/x") == mountinfo.Place((0, 120), "/x")
    assert mountinfo.place(host, "/run") == mountinfo.Place((0, 108), "/")
    # the host itself shows each socket where it is
    assert [at for at, _ in mountinfo.exposures(host, mountinfo.place(host, "/run/docker.sock"))] == \
        ["/run/docker.sock"]


def test_the_contracts_session_shows_no_host_socket():
    """/run holds every socket, but each path to one is covered (a test that only
    knew the mount points would see /run and call all four reachable)."""
    assert _shown(SESSION) == {p: [] for p in SOCKETS}


def test_a_bind_of_a_socket_or_of_its_directory_shows_it_at_the_new_path():
    shown = _shown(SESSION + BINDS)
    assert shown == {"/run/opencode-pty/supervisor.sock": ["/var/tmp/sup/supervisor.sock"],
                     "/run/docker.sock": [], "/run/dbus/system_bus_socket": ["/var/tmp/bus.sock"],
                     "/run/user/1000/bus": []}


def test_a_bind_of_a_whole_filesystem_elsewhere_shows_every_socket():
    shown = _shown(SESSION + "1400 1340 0:108 / /var/tmp/run rw - tmpfs tmpfs rw\n")
    assert shown["/run/user/1000/bus"] == ["/var/tmp/run/user/1000/bus"]
    assert shown["/run/dbus/system_bus_socket"] == ["/var/tmp/run/dbus/system_bus_socket"]


def test_a_mount_below_a_covered_directory_is_unreachable():
    """The user's runtime directory mounted at /run/user/1000 before /run/user was
    covered: its mount point is the longest prefix, but the walk leaves /run at
    /run/user and never comes back to it."""
    host = mountinfo.parse(HOST + "600 470 0:130 / /run/user/1000 rw - tmpfs tmpfs rw\n")
    session = mountinfo.parse(SESSION + "1306 1292 0:130 / /run/user/1000 rw - tmpfs tmpfs rw\n")
    target = mountinfo.place(host, "/run/user/1000/bus")
    assert target == mountinfo.Place((0, 130), "/bus")
    assert mountinfo.exposures(session, target) == []
    assert mountinfo.resolve(session, "/run/user/1000/bus")[0].id == 1305


def test_a_stack_of_mounts_resolves_through_its_top():
    session = mountinfo.parse(SESSION + "1500 1299 0:108 /opencode-pty /run/opencode-pty rw - tmpfs tmpfs rw\n")
    host = mountinfo.parse(HOST)
    assert [at for at, _ in mountinfo.exposures(session, mountinfo.place(host, "/run/opencode-pty/supervisor.sock"))] \
        == ["/run/opencode-pty/supervisor.sock"]


def test_escaped_mount_points_are_decoded():
    (m,) = mountinfo.parse("1 0 0:1 /a\\040b /x\\134y\\012z rw - tmpfs t rw\n")
    assert (m.root, m.mountpoint, m.fstype, m.dev) == ("/a b", "/x\\y\nz", "tmpfs", (0, 1))


@pytest.mark.parametrize("text", ["", "1 0 0:1 / /\n", "x 0 0:1 / / rw - t t rw\n", "1 0 01 / / rw - t t rw\n"])
def test_a_line_that_is_not_mountinfo_is_refused(text):
    with pytest.raises(mountinfo.MountinfoError):
        mountinfo.parse(text)


def test_the_suites_own_table_reads():
    table = mountinfo.read("self")
    assert mountinfo.resolve(table, "/")[0].mountpoint == "/"
