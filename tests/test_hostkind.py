"""The preflight names the host (issue 31): its release from os-release, read
safely (a link only to /usr/lib/os-release, as Debian ships it), systemd,
kernel and Python, and whether the suite was proven on that combination."""

import os
import re
import subprocess
import sys

import pytest

from pty_acceptance.host import hostfs, hostkind
from pty_acceptance.spec import proven

from conftest import REPO

TRIXIE = ('PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nNAME="Debian GNU/Linux"\nVERSION_ID="13"\n'
          'VERSION="13 (trixie)"\nVERSION_CODENAME=trixie\nID=debian\n')


def test_os_release_is_read_as_os_release_5_says():
    got = hostkind.parse_os_release(TRIXIE + "# a comment\nnot a line\nlower=x\nBAD='unclosed\nEMPTY=\n"
                                    "ESC=\"a \\\"b\\\" \\$c\"\n")
    assert got == {"PRETTY_NAME": "Debian GNU/Linux 13 (trixie)", "NAME": "Debian GNU/Linux", "VERSION_ID": "13",
                   "VERSION": "13 (trixie)", "VERSION_CODENAME": "trixie", "ID": "debian", "EMPTY": "",
                   "ESC": 'a "b" $c'}


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/os-release").write_text(TRIXIE)
    return tmp_path


@pytest.mark.parametrize("link", ["../usr/lib/os-release", "absolute"])
def test_a_link_to_usr_lib_os_release_is_taken_and_the_file_read_without_following(tree, link):
    usr = str(tree / "usr/lib/os-release")
    os.symlink(usr if link == "absolute" else link, tree / "etc/os-release")
    fields, where = hostkind.read_os_release(str(tree / "etc/os-release"), usr)
    assert fields["VERSION_CODENAME"] == "trixie" and where.endswith(" -> " + (usr if link == "absolute" else link))


def test_any_other_link_is_refused_and_a_plain_file_or_none_is_read(tree):
    usr, etc = str(tree / "usr/lib/os-release"), tree / "etc/os-release"
    assert hostkind.read_os_release(str(etc), usr)[1] == usr  # no /etc/os-release: /usr/lib's
    (tree / "vault").write_text("ID=secret\n")
    os.symlink(tree / "vault", etc)
    with pytest.raises(hostfs.PathRefused, match="is a link to .*vault.*not followed"):
        hostkind.read_os_release(str(etc), usr)
    etc.unlink()
    etc.write_text('ID=debian\nVERSION_CODENAME=bookworm\n')
    assert hostkind.read_os_release(str(etc), usr) == ({"ID": "debian", "VERSION_CODENAME": "bookworm"}, str(etc))
    os.symlink("../usr/lib/os-release", tree / "usr/lib/link")  # /usr/lib's own file must not be a link
    with pytest.raises(hostfs.PathRefused):
        hostkind.read_os_release(str(tree / "etc/none"), str(tree / "usr/lib/link"))


def test_this_machine_is_named():
    kind = hostkind.read()
    assert kind.os_release.get("ID") and kind.kernel == os.uname().release
    assert kind.python == ".".join(map(str, sys.version_info[:3]))
    assert kind.line().startswith(kind.release + "; systemd ")


@pytest.mark.parametrize("facts, says", [
    (("debian", "trixie", 257, "3.13", "6.18.44-fc-v1252"), "proven: debian trixie, systemd 257, Python 3.13 on"),
    (("debian", "bookworm", 252, "3.11", "6.18.2-other"), "proven: debian bookworm, systemd 252"),
    (("debian", "bookworm", 252, "3.11", "6.1.0-28-amd64"), "proven except the kernel: "),
    (("debian", "trixie", 256, "3.13", "6.18.44"), "not proven: the suite was proven on debian bookworm"),
    (("debian", "trixie", None, "3.13", "6.18.44"), "not on debian trixie, systemd ?, Python 3.13"),
    (("ubuntu", "noble", 255, "3.12", "6.8.0"), "not proven: "),
])
def test_whether_the_combination_was_proven(facts, says):
    assert proven.verdict(*facts).startswith(says) or says in proven.verdict(*facts), proven.verdict(*facts)


def test_the_docs_list_the_proven_matrix():
    """docs/reference-host.md's table of proofs ("The releases") is spec/proven.py's, row for row."""
    text = (REPO / "docs/reference-host.md").read_text()
    rows = re.findall(r"^\| (\w+) (\w+) \| (\d+) \| ([\d.]+) \| (\S+) \| ([\d-]+) \| `?(\w+)`? \|$", text, re.M)
    assert [(p.os_id, p.codename, str(p.systemd), p.python, p.kernel, p.date, p.commit) for p in proven.PROOFS] \
        == [tuple(r) for r in rows]


def test_the_preflight_names_the_host_first():
    done = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "preflight", "--inventory",
                           str(REPO / "inventories/reference.yml")], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    kind = hostkind.read()
    assert lines[0] == f"host: {kind.line()}" and lines[1].startswith("host: not proven: "), lines[:3]
