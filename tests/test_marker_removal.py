"""Only a marker is ever removed (issue 38, item 8; MARK-4): at a marker path
(absolute, its last component pty-supervisor-verified), a root-owned regular
file with one link, read without following a link and bounded, that parses
as a marker (MARK-2's four lines), in a directory chain root alone controls.
Anything else at a marker path, and any path that is not a marker path, is
named and left as it was (readiness_marker.remove, marker_paths.Removal).

Everything here happens in a scratch root under /run (root-owned all the way
up, unlike /tmp): a fake `shadow` and `passwd` stand for root's files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pty_acceptance.decision import marker_paths, readiness_marker as marker
from pty_acceptance.spec import inventory

from gateproject import earlier_marker, last_line, run

NAME = inventory.MARKER_NAME
SHADOW = "root:$6$not-a-real-hash:19000:0:99999:7:::\n"


@pytest.fixture
def etc(safe_dir) -> Path:
    d = safe_dir / "etc/opencode"
    d.mkdir(parents=True)
    return d


def _tree(top: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry under `top`: (mode, inode, content or link target)."""
    out = {}
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            p = Path(dirpath, n)
            st = os.lstat(p)
            what: bytes | str = (os.readlink(p) if stat.S_ISLNK(st.st_mode) else
                                 p.read_bytes() if stat.S_ISREG(st.st_mode) else "")
            out[str(p)] = (st.st_mode, st.st_ino, what)
    return out


def test_a_parsed_root_owned_marker_is_removed(etc):
    m = earlier_marker(etc / NAME)
    said = marker.remove(str(m))
    assert said == f"removed an existing marker at {m}" and not os.path.lexists(m)


def test_nothing_there_is_said(etc, safe_dir):
    assert marker.remove(str(etc / NAME)) == f"no marker at {etc / NAME}"
    gone = safe_dir / "nowhere" / NAME
    assert marker.remove(str(gone)) == f"no marker at {gone} (its directory does not exist)"


@pytest.mark.parametrize("path", ["/etc/shadow", "relative/" + NAME, "/etc/../etc/" + NAME, "/etc//" + NAME,
                                  f"/etc/{NAME}/x", f"/etc/{NAME}\n", f"/etc/{NAME}.bak"])
def test_a_path_that_is_no_marker_path_is_refused_untouched(path):
    with pytest.raises(marker.NotRemoved) as e:
        marker.remove(path)
    assert "is not a marker path" in str(e.value) and e.value.requirements == ("MARK-4",)


def test_shadow_named_as_the_marker_is_never_deleted(safe_dir):
    """`--marker /etc/shadow -q` deleted /etc/shadow before issue 38."""
    shadow = safe_dir / "etc/shadow"
    shadow.parent.mkdir()
    shadow.write_text(SHADOW)
    shadow.chmod(0o640)
    with pytest.raises(marker.NotRemoved):
        marker.remove(str(shadow))
    assert shadow.read_text() == SHADOW


def _plant(etc: Path, kind: str, victim: Path) -> Path:
    m = etc / NAME
    if kind == "a copy of shadow":
        m.write_text(SHADOW)
    elif kind == "one line of a marker":
        m.write_text(f"revision=opencode-v2-pilot:git:{'0' * 40};pty-source:sha256:{'0' * 64}\n")
    elif kind == "a marker and a fifth line":
        m.write_bytes(earlier_marker(m).read_bytes() + b"extra\n")
    elif kind == "a marker without its last newline":
        m.write_bytes(earlier_marker(m).read_bytes()[:-1])
    elif kind == "an empty file":
        m.write_bytes(b"")
    elif kind == "a marker over the size bound":
        m.write_bytes(earlier_marker(m).read_bytes() + b" " * marker.MAX_BYTES)
    elif kind == "a marker owned by another user":
        earlier_marker(m)
        os.chown(m, 65534, 65534)
    elif kind == "a hard link to shadow":
        os.link(victim, m)
    elif kind == "a symlink to shadow":
        m.symlink_to(victim)
    elif kind == "a symlink to a marker":
        real = earlier_marker(etc / "real-marker")
        m.symlink_to(real)
    elif kind == "a FIFO":
        os.mkfifo(m)
    elif kind == "a directory":
        m.mkdir()
        (m / "inside").write_text("keep\n")
    else:
        raise AssertionError(kind)
    return m


KINDS = ["a copy of shadow", "one line of a marker", "a marker and a fifth line",
         "a marker without its last newline", "an empty file", "a marker over the size bound",
         "a marker owned by another user", "a hard link to shadow", "a symlink to shadow",
         "a symlink to a marker", "a FIFO", "a directory"]


@pytest.mark.parametrize("kind", KINDS)
def test_anything_but_a_marker_is_named_and_left(etc, safe_dir, kind):
    victim = safe_dir / "shadow"
    victim.write_text(SHADOW)
    m = _plant(etc, kind, victim)
    before = _tree(safe_dir)
    with pytest.raises(marker.NotRemoved) as e:
        marker.remove(str(m))  # a FIFO is never opened: this returns at once
    assert str(m) in str(e.value) and "not removed" in str(e.value), str(e.value)
    assert _tree(safe_dir) == before, "something was deleted or changed"


def test_a_marker_in_a_directory_others_may_write_is_left(etc):
    m = earlier_marker(etc / NAME)
    etc.chmod(0o777)
    with pytest.raises(marker.NotRemoved) as e:
        marker.remove(str(m))
    assert "its directory is not root's alone" in str(e.value)
    assert m.exists()


def test_a_link_in_the_directory_chain_is_never_followed(safe_dir, tmp_path):
    real = safe_dir / "real"
    real.mkdir()
    m = earlier_marker(real / NAME)
    (safe_dir / "hop").symlink_to(real)
    said = marker.remove(str(safe_dir / "hop" / NAME))
    assert said.startswith(f"no marker looked for at {safe_dir / 'hop' / NAME}") and m.exists()


def test_only_the_parsed_markers_of_a_scratch_root_are_ever_unlinked(safe_dir, etc):
    """Every kind at once, under one scratch root: the removal of every path
    the run names deletes the two real markers and nothing else."""
    victim = safe_dir / "shadow"
    victim.write_text(SHADOW)
    kept = []
    for i, kind in enumerate(KINDS):
        d = safe_dir / f"k{i}"
        d.mkdir()
        kept.append(str(_plant(d, kind, victim)))
    markers = [str(earlier_marker(safe_dir / "good1" / NAME)), str(earlier_marker(etc / NAME))]
    before = _tree(safe_dir)
    removal = marker_paths.Removal()
    removal.add(kept + markers + [str(victim), str(safe_dir / "missing" / NAME)])
    after = _tree(safe_dir)
    assert sorted(set(before) - set(after)) == sorted(markers)
    assert {p: before[p] for p in after} == after
    assert len(removal.kept) == len(kept) + 1  # and the shadow, no marker path
    assert removal.said[-4:-2] == [f"removed an existing marker at {p}" for p in markers]


# ------------------------------------------------- the paths a run names
def test_an_inventory_that_does_not_load_still_names_its_marker(tmp_path):
    f = tmp_path / "inv.yml"
    f.write_text("all:\n  hosts:\n    x:\n      marker: /srv/a/pty-supervisor-verified  # here\n"
                 "      revision: [not closed\n")
    assert marker_paths.inventory_markers(str(f)) == ["/srv/a/pty-supervisor-verified"]
    f.write_text(yaml.safe_dump({"all": {"hosts": {"x": {"marker": "/srv/b/" + NAME, "junk": 1}}}}))
    assert marker_paths.inventory_markers(str(f)) == ["/srv/b/" + NAME]
    assert marker_paths.inventory_markers(str(tmp_path / "absent.yml")) == []


def test_every_path_the_arguments_name(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    x:\n      marker: '/srv/inv/pty-supervisor-verified'\n")
    default = tmp_path / "default.yml"
    default.write_text("all:\n  hosts:\n    x:\n      marker: /srv/default/pty-supervisor-verified\n")
    args = ["acceptance/", "--inventory", "inv.yml", "--marker=/srv/m/" + NAME]
    assert marker_paths.named(args, str(tmp_path), str(default)) == [
        "/srv/m/" + NAME, "/srv/inv/" + NAME, "/srv/default/" + NAME, marker.DEFAULT_PATH]


# ------------------------------------------------- runs
def test_marker_shadow_with_q_deletes_nothing(project, target, safe_dir):
    """The review's run: refused for -q, and for the path; shadow is intact."""
    m = earlier_marker(target.marker)
    shadow = safe_dir / "shadow"
    shadow.write_text(SHADOW)
    done = subprocess.run([str(Path(sys.executable).parent / "pytest"), "acceptance/", "--inventory",
                           str(target.inventory), "--marker", str(shadow), "-q"], cwd=project.path,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert shadow.read_text() == SHADOW
    assert not m.exists()  # the inventory's marker, a marker, went
    assert f"MARK-4: {str(shadow)!r} is not a marker path" in done.stderr, done.stderr


def test_an_inventory_naming_passwd_deletes_nothing(project, target, safe_dir):
    """An inventory that does not even load names `marker: .../passwd`: it is
    named, kept, and the run refused; the default path is looked at too."""
    passwd = safe_dir / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    data = yaml.safe_load(target.inventory.read_text())
    (vars_,) = data["all"]["hosts"].values()
    vars_["marker"] = str(passwd)
    vars_["revision"] = "not hex"
    target.inventory.write_text(yaml.safe_dump(data))
    res = run(project, target)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    said = " ".join(res.errlines)
    assert f"NOT READY: MARK-4: {str(passwd)!r} is not a marker path" in said, said
    assert marker.DEFAULT_PATH in said, said


def test_a_good_run_still_writes_and_a_later_run_removes_its_marker(project, target):
    res = run(project, target)
    assert last_line(res) == f"READY: marker written {target.marker}"
    add_failing = "\n@pytest.mark.requirement('OWN-2')\ndef test_fails():\n    assert False\n"
    with (project.path / "acceptance/test_all.py").open("a") as f:
        f.write(add_failing)
    res = run(project, target)
    assert res.ret != 0 and not os.path.lexists(target.marker)
    assert any(f"MARK-4: removed an existing marker at {target.marker}" in l for l in res.outlines)
