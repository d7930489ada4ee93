"""SCOPE-1's one read of the manifest's files, kept as a root-owned mirror
(provenance/source_copy.py), and what PLUGIN-1's runs see of the user's own
(candidate/smoke.py view): the copies are the bytes hashed, nothing beside the
manifest's files is copied, a link or FIFO is refused and never opened, and a
copy that is not what was hashed, or not the reviewed source, is named. The
runs themselves, with the mirror bound where the trees are, are tried on a
reference host (acceptance/test_plugin.py, tests/test_userunit.py)."""
import hashlib
import os
import pwd
import stat
import threading
import types

import pytest

from pty_acceptance.candidate import smoke
from pty_acceptance.host import scratch
from pty_acceptance.provenance import manifest, source_copy

from conftest import coreutils_manifest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the mirror is root's: needs root")
PLUGINS = "config/opencode/plugins"


@pytest.fixture
def copied(target):
    made = []

    def make():
        made.append(source_copy.make(str(target.pilot), str(target.code)))
        return made[-1]

    yield make
    for m in made:
        source_copy.remove(m)


def _files_below(top):
    out = {}
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[os.path.relpath(p, top)] = (stat.S_IFMT(st.st_mode), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    return out


def test_the_copy_is_scope_1_s_manifest_and_holds_exactly_its_files(target, copied):
    (target.pilot / PLUGINS / "pty.tsx").write_text("export * from './pty.ts'\n")  # beside the manifest's
    (target.pilot / PLUGINS / "followup.ts").write_text("// another plugin\n")
    c = copied()
    assert c.digest == target.manifest == coreutils_manifest(target.pilot, target.code)
    assert (c.digest, c.listing) == manifest.compute(str(target.pilot), str(target.code))
    below = _files_below(c.top)
    files = {k for k, v in below.items() if v[0] == stat.S_IFREG}
    assert files == {os.path.relpath(c.copy_of(p), c.top) for p, _ in c.files}
    assert not any(k.endswith(("pty.tsx", "followup.ts", "nested/no.ts")) for k in below)
    assert {v[1:] for k, v in below.items() if k in files} == {(0, 0, 0o444)}
    assert {v[1:] for k, v in below.items() if k not in files} == {(0, 0, 0o755)}
    for p, h in c.files:
        assert hashlib.sha256(open(c.copy_of(p), "rb").read()).hexdigest() == h
    assert c.check() == []
    assert sorted(n for n, _ in c.within(str(target.pilot / PLUGINS))) == ["pty-transport.ts", "pty.ts"]
    assert c.binds() == ((c.copy_of(str(target.code)), str(target.code)),
                         (c.copy_of(str(target.pilot)), str(target.pilot)))


def test_what_the_user_changes_after_the_copy_is_not_what_runs(target, copied):
    c = copied()
    pty = target.pilot / PLUGINS / "pty.ts"
    pty.write_text("// patched after SCOPE-1 read it\n")
    assert open(c.copy_of(str(pty)), "rb").read() == f"content of {PLUGINS}/pty.ts\n".encode()
    assert c.check() == []


def test_a_tree_inside_the_other_is_bound_once(target):
    assert source_copy.roots(str(target.pilot), str(target.pilot / "code")) == (str(target.pilot),)
    assert source_copy.roots("/a/b/", "/a/bc") == ("/a/b", "/a/bc")


@pytest.mark.parametrize("kind", ["link", "fifo", "hard link"])
def test_a_link_or_fifo_in_the_plugin_directory_is_refused_never_opened(target, safe_dir, kind):
    pty = target.pilot / PLUGINS / "pty.ts"
    secret = safe_dir / "secret"
    secret.write_text("root only\n")
    pty.unlink()
    if kind == "link":
        pty.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(pty)
    else:
        os.link(secret, pty)
    out = {}

    def run():
        try:
            source_copy.make(str(target.pilot), str(target.code))
        except manifest.ManifestError as e:
            out["error"] = str(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        os.close(os.open(pty, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("source_copy.make blocked on a FIFO")
    word = {"link": "is a symlink", "fifo": "is a FIFO", "hard link": "is a hard link"}[kind]
    assert f"{pty} {word}" in out.get("error", ""), out
    assert "root only" not in out["error"]
    r = scratch.root()  # the half-made mirror is gone: nothing of it stays in the scratch area
    assert not [n for n in os.listdir(r.path) if n.startswith(source_copy.PREFIX)]


def test_a_link_or_fifo_beside_the_manifest_s_files_is_never_opened(target, safe_dir, copied):
    os.mkfifo(target.pilot / PLUGINS / "pty.tsx")
    (target.pilot / PLUGINS / "pty.jsx").symlink_to(safe_dir)
    c = copied()  # returns: neither is opened
    assert c.digest == target.manifest
    assert not os.path.lexists(c.copy_of(str(target.pilot / PLUGINS / "pty.tsx")))


@pytest.mark.parametrize("change", ["content", "mode", "extra", "missing", "second link"])
def test_a_copy_that_is_not_what_was_hashed_is_named(target, copied, change):
    c = copied()
    pty = c.copy_of(str(target.pilot / PLUGINS / "pty.ts"))
    if change == "content":
        os.chmod(pty, 0o644)
        with open(pty, "a") as f:
            f.write("// more\n")
        os.chmod(pty, 0o444)
        want = f"{pty} hashes to "
    elif change == "mode":
        os.chmod(pty, 0o644)
        want = f"{pty} is a regular file of uid 0 mode 0644 with 1 links, not root's 0444"
    elif change == "extra":
        open(os.path.join(os.path.dirname(pty), "pty.tsx"), "w").close()
        want = "pty.tsx (regular file) is not one of the manifest's files"
    elif change == "missing":
        os.unlink(pty)
        want = f"{pty} (the copy of a manifest file) is missing"
    else:
        os.link(pty, os.path.join(c.top, "again"))
        want = "with 2 links"
    problems = c.check()
    assert any(want in p for p in problems), problems
    seen = smoke.View(c, (), str(target.pilot / PLUGINS), tuple(c.within(str(target.pilot / PLUGINS))))
    with pytest.raises(smoke.HarnessRefused, match="the source manifest's copies are not what was hashed"):
        seen.check()


def _plugin(plugin_dir):
    return types.SimpleNamespace(plugin_dir=str(plugin_dir))


def _acct(home):
    return pwd.struct_passwd(("byk", "x", 1000, 1000, "", str(home), "/bin/sh"))


def test_the_view_of_a_run(target, copied, safe_dir):
    c = copied()
    v = smoke.view(c, c.digest, _plugin(target.pilot / PLUGINS), _acct("/home/byk"))
    assert v.hide == () and v.plugin_dir == str(target.pilot / PLUGINS)
    assert sorted(n for n, _ in v.plugin_files) == ["pty-transport.ts", "pty.ts"]
    assert "holds only the manifest's" in v.describe() and "/run/user" in v.describe()
    assert v.check().startswith(f"{len(c.files)} copies as hashed")
    home = safe_dir / "home-elsewhere"
    home.mkdir()
    assert smoke.view(c, c.digest, _plugin(target.pilot / PLUGINS), _acct(home)).hide == (str(home),)
    assert smoke.view(c, c.digest, _plugin(target.pilot / PLUGINS), _acct(target.pilot)).hide == ()


def test_copies_that_are_not_the_reviewed_source_are_never_run(target, copied):
    (target.pilot / PLUGINS / "pty.ts").write_text("// not the reviewed bytes\n")
    c = copied()
    pty = hashlib.sha256(b"// not the reviewed bytes\n").hexdigest()
    with pytest.raises(smoke.HarnessRefused) as e:
        smoke.view(c, target.manifest, _plugin(target.pilot / PLUGINS), _acct("/home/byk"))
    msg = str(e.value)
    assert f"come to {c.digest}, not source_manifest_sha256 {target.manifest}" in msg
    assert f"{pty}  pty.ts" in msg


def test_a_view_that_cannot_be_kept_from_the_user_is_refused(target, copied, safe_dir):
    c = copied()
    with pytest.raises(smoke.HarnessRefused, match="lies outside the trees"):
        smoke.view(c, c.digest, _plugin("/srv/plugins"), _acct("/home/byk"))
    with pytest.raises(smoke.HarnessRefused, match="lists no file of plugin.plugin_dir"):
        smoke.view(c, c.digest, _plugin(target.pilot / "config"), _acct("/home/byk"))
    with pytest.raises(smoke.HarnessRefused, match="home is '/'"):
        smoke.view(c, c.digest, _plugin(target.pilot / PLUGINS), _acct("/"))
    os.chmod(safe_dir, 0o777)  # a directory above the trees the user could put a tsconfig.json in
    try:
        with pytest.raises(smoke.HarnessRefused, match=f"upwards .*{safe_dir} is writable by group and other"):
            smoke.view(c, c.digest, _plugin(target.pilot / PLUGINS), _acct("/home/byk"))
    finally:
        os.chmod(safe_dir, 0o755)
