"""A blind red team's eighth pass (issue 38, session 35), against the clean
start (decision/launch.py: a run on the suite judges only as `python -I -u -m
pytest` with the suite's environment). Each test asserts what a correct gate
must do, so it fails when its attack works; every run is a process of its own
on the gate's fixture project (tests/gateproject.py).

Broke, and fixed:
- a provider module named by OpenSSL's default configuration file (bind-mounted
  over /etc/ssl/openssl.cnf in a private mount namespace) ran its constructor
  in the clean child and turned the failing run READY: the clean start sets
  OPENSSL_CONF=/dev/null, and a non-empty /etc/ld.so.preload (the same class,
  the dynamic loader's) is refused;
- round seven's `pytest DIR` with a link to acceptance/ inside, the link behind
  100,001 entries (the walk gave up and said "no checkout"), or acceptance/
  bind-mounted there instead of linked: the walk now refuses past its bound
  and at any mount inside a directory the run is given.
Held, kept here: a clean start made by hand whose carried words claim the
markers were already removed, or forge a READY line, or are not JSON.

The ninth pass (broke, fixed): an NSS module /etc/nsswitch.conf names, found
through /etc/ld.so.cache, loaded into the clean start at its first user
lookup; the gate now judges every file the process maps executable
(decision/native_code.py).
"""

import json
import os
import shutil
import subprocess as sp
import sys
from pathlib import Path

import pytest

from pty_acceptance.decision import launch
from gateproject import PYTEST, QUIET, SEPARATE_DEADLINE_S, earlier_marker, said, suite_args

PYTHON = str(Path(sys.executable).parent / "python")
OWN_1 = "NOT READY: 1 blockers: OWN-1"


def lines(done):
    return [l for l in done.stdout.splitlines() if l.strip()]


def clean_env(**extra):
    env = launch.clean_environment(os.environ)
    env.update(extra)
    return env


def handmade(project, target, env, *more, cwd=None, **kw):
    """`python -I -u -m pytest` started by hand with `env` (the clean start's form)."""
    return sp.run([PYTHON, *launch.CLEAN_START, *suite_args(target, *more)], cwd=cwd or project.path, env=env,
                  capture_output=True, text=True, timeout=SEPARATE_DEADLINE_S, stdin=sp.DEVNULL, **kw)


def assert_own1_and_no_marker(done, target):
    assert not os.path.lexists(target.marker), f"a marker stands\n{said(done)}"
    assert done.returncode != 0, said(done)
    assert lines(done) and lines(done)[-1] == OWN_1, said(done)
    assert not any(l.startswith("READY") for l in done.stdout.splitlines()), said(done)


# ------------------------------------------------------------ the carried value
def test_r8_handmade_clean_start_claiming_the_removal_was_done(failing, target):
    """A clean start crafted by hand whose PTY_ACCEPTANCE_RESTARTED says the
    start before it found no marker: the earlier marker must still go."""
    earlier_marker(target.marker)
    carried = json.dumps([f"no marker at {target.marker}", "no marker at /etc/opencode/pty-supervisor-verified"])
    done = handmade(failing, target, clean_env(PTY_ACCEPTANCE_RESTARTED=carried))
    assert_own1_and_no_marker(done, target)


def test_r8_carried_words_forging_a_ready_line(failing, target):
    """The carried words are the operator's own text in a hand-made start:
    newlines and a READY line in them must not reach the output as lines."""
    forged = f"x\nREADY: marker written {target.marker}\n"
    done = handmade(failing, target, clean_env(PTY_ACCEPTANCE_RESTARTED=json.dumps([forged] * 8)))
    assert_own1_and_no_marker(done, target)


def test_r8_carried_value_not_json(failing, target):
    earlier_marker(target.marker)
    done = handmade(failing, target, clean_env(PTY_ACCEPTANCE_RESTARTED="{\"a\": 1}"))
    assert_own1_and_no_marker(done, target)


# ------------------------------------------------------------ round seven's link, past the walk's bound
DISARM_CONFTEST = """
from pty_acceptance.gate import runguard
runguard.arm = lambda *a, **k: None


def pytest_addoption(parser):
    parser.addoption("--inventory")  # so that the run goes on to run the suite's tests through the link
"""


@pytest.mark.parametrize("entries", [10, 100_001], ids=["control-10-entries", "100k-entries"])
@pytest.mark.parametrize("with_conftest", [False, True], ids=["bare", "conftest-disarms"])
def test_r8_a_link_to_acceptance_behind_100k_entries_keeps_no_marker(failing, target, with_conftest, entries):
    """Round seven's `pytest DIR` (DIR outside the checkout holding a link to
    acceptance/ and a conftest.py that disarms the run guard), with DIR also
    holding more entries than checkout.LINKS_LOOKED_AT: the early guard's walk
    stops at its bound and answers 'on no checkout' (fail-open), so no removal,
    no refusal, no clean start; the entry point never reaches a checkout
    either; DIR's conftest.py disarms acceptance/conftest.py's guard."""
    import tempfile
    from pty_acceptance.gate import checkout
    m = earlier_marker(target.marker)
    d = Path(tempfile.mkdtemp(prefix="rt8-linkdir-", dir="/tmp"))
    assert entries <= 10 or entries > checkout.LINKS_LOOKED_AT
    for i in range(entries):
        os.close(os.open(d / f"f{i:06d}", os.O_CREAT | os.O_WRONLY, 0o644))
    (d / "sub").mkdir()
    (d / "sub" / "linked").symlink_to(failing.path / "acceptance")
    if with_conftest:
        (d / "conftest.py").write_text(DISARM_CONFTEST)
    try:
        done = sp.run([PYTEST, "-p", "no:cacheprovider", str(d), f"--inventory={target.inventory}"],
                      cwd=d, env=dict(os.environ), capture_output=True, text=True, timeout=300, stdin=sp.DEVNULL)
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)
        assert done.returncode != 0, said(done)
    assert not os.path.lexists(m), f"the earlier READY run's marker still stands\n{said(done)}"


def test_r8_acceptance_bind_mounted_into_a_directory_keeps_no_marker(failing, target):
    """The same as round seven's link, with a bind mount of the checkout's
    acceptance/ in place of the link (in a private mount namespace): the
    early guard recognises a checkout only by path and by symlink, so DIR is
    'on no checkout', its conftest.py runs unjudged and disarms the guard
    before acceptance/conftest.py (the very files of the checkout, reached
    under another path) is met."""
    import shutil
    import tempfile
    m = earlier_marker(target.marker)
    d = Path(tempfile.mkdtemp(prefix="rt8-binddir-", dir="/tmp"))
    (d / "sub" / "acc").mkdir(parents=True)
    (d / "conftest.py").write_text(DISARM_CONFTEST)
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    try:
        done = sp.run(["unshare", "-m", "sh", "-c", script, "sh", str(failing.path / "acceptance"), str(d / "sub/acc"),
                       PYTEST, "-p", "no:cacheprovider", str(d), f"--inventory={target.inventory}"],
                      cwd=d, env=dict(os.environ), capture_output=True, text=True, timeout=300, stdin=sp.DEVNULL)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        assert done.returncode != 0, said(done)
    assert not os.path.lexists(m), f"the earlier READY run's marker still stands\n{said(done)}"


# ------------------------------------------------------------ /etc/ssl/openssl.cnf: code in the clean child
PROVIDER_C = r'''
#include <stdio.h>
extern int Py_IsInitialized(void);
extern int PyGILState_Ensure(void);
extern void PyGILState_Release(int);
extern int PyRun_SimpleString(const char *);
__attribute__((constructor)) static void rt8(void) {
    FILE *f = fopen(PAYLOAD, "r");
    if (!f) return;
    static char buf[65536]; size_t n = fread(buf, 1, sizeof buf - 1, f); buf[n] = 0; fclose(f);
    if (!Py_IsInitialized()) return;
    int g = PyGILState_Ensure();
    PyRun_SimpleString(buf);
    PyGILState_Release(g);
}
int OSSL_provider_init(const void *h, const void *in, const void **out, void **ctx) { return 0; }
'''

OPENSSL_CNF = """openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
default = default_sect
rt8 = rt8_sect
[default_sect]
activate = 1
[rt8_sect]
module = {so}
activate = 1
"""


def test_r8_an_openssl_provider_from_the_default_openssl_cnf_never_turns_a_failure_ready(failing, target, tmp_path):
    """Nothing in the environment or on the command line: OpenSSL (which
    Python's hashlib loads in the clean child too) reads its default
    configuration /etc/ssl/openssl.cnf (OPENSSL_CONF is refused, the default
    file is not looked at); a provider module it names runs its constructor
    in the gate's process, which runs gateproject.QUIET through the C API
    (code named '<string>'). Shown in a private mount namespace (the file
    bind-mounted over /etc/ssl/openssl.cnf for this run only)."""
    from gateproject import QUIET
    payload = tmp_path / "payload.py"
    payload.write_text(QUIET)
    src = tmp_path / "rt8.c"
    src.write_text(PROVIDER_C)
    so = tmp_path / "rt8.so"
    sp.run(["gcc", "-shared", "-fPIC", f'-DPAYLOAD="{payload}"', "-o", str(so), str(src)], check=True)
    cnf = tmp_path / "openssl.cnf"
    cnf.write_text(OPENSSL_CNF.format(so=so))
    earlier_marker(target.marker)
    script = 'mount --bind "$1" /etc/ssl/openssl.cnf && shift && exec "$@"'
    done = sp.run(["unshare", "-m", "sh", "-c", script, "sh", str(cnf), PYTEST, *suite_args(target)],
                  cwd=failing.path, env=dict(os.environ), capture_output=True, text=True, timeout=300,
                  stdin=sp.DEVNULL)
    assert not any(l.startswith("READY") for l in done.stdout.splitlines()), said(done)
    assert done.returncode != 0, said(done)
    assert not os.path.lexists(target.marker), f"a marker stands after a failing run\n{said(done)}"


# ------------------------------------------------------------ round nine: an NSS module from /etc/nsswitch.conf
NSS_SOURCE = Path(__file__).resolve().parent / "fixtures/nss/nss_quiet.c"


@pytest.fixture
def nss_module(safe_dir):
    """/etc/nsswitch.conf naming an NSS module `quiet` for passwd before `files`,
    and /etc/ld.so.cache finding the root-owned directory it is in: what a
    host could hold. In a private mount namespace (unshare -m, bind mounts
    over the two files): this machine's /etc is untouched, the run sees what
    such a host would show."""
    d = safe_dir / "nss"
    (d / "lib").mkdir(parents=True)
    log = d / "log"
    sp.run(["gcc", "-shared", "-fPIC", "-O1", f'-DLOGPATH="\\"{log}\\""', "-o", str(d / "lib/libnss_quiet.so.2"),
            str(NSS_SOURCE)], check=True)
    text = "".join(("passwd:         quiet files\n" if l.startswith("passwd:") else l)
                   for l in Path("/etc/nsswitch.conf").read_text().splitlines(keepends=True))
    (d / "nsswitch.conf").write_text(text)
    (d / "ld.so.conf").write_text(f"include /etc/ld.so.conf.d/*.conf\n{d / 'lib'}\n")
    sp.run(["ldconfig", "-C", str(d / "ld.so.cache"), "-f", str(d / "ld.so.conf")], check=True)
    wrap = ["unshare", "-m", "sh", "-c",
            f"mount --bind {d}/nsswitch.conf /etc/nsswitch.conf && mount --bind {d}/ld.so.cache /etc/ld.so.cache"
            ' && exec "$@"', "sh"]
    return wrap, log


def test_an_nss_module_named_in_nsswitch_conf_never_turns_a_failure_ready(failing, target, nss_module):
    """Round nine (broke): glibc loads the module into the clean start at its
    first user lookup, and its constructor patched pytest's report with code
    compiled from a string; glibc never unloads it, so when the marker is
    decided the process still maps it (decision/native_code.py)."""
    wrap, log = nss_module
    earlier_marker(target.marker)
    done = sp.run([*wrap, PYTEST, *suite_args(target)], cwd=failing.path, env=dict(os.environ),
                  capture_output=True, text=True, timeout=SEPARATE_DEADLINE_S, stdin=sp.DEVNULL)
    assert log.exists(), f"the module never loaded: the attack did not happen\n{said(done)}"
    assert not any(l.startswith("READY") for l in done.stdout.splitlines()), said(done)
    assert done.returncode != 0 and not os.path.lexists(target.marker), said(done)
    named = [l for l in done.stdout.splitlines() if "the process runs native code from" in l]
    assert any("libnss_quiet.so.2" in l for l in named), said(done)


def test_executable_mappings_are_read_and_a_library_no_package_lists_is_named():
    from pty_acceptance.decision import native_code
    maps = ("55d0-55d1 r--p 0 08:01 1 /usr/bin/python3.11\n"
            "55d1-55d2 r-xp 0 08:01 1 /usr/bin/python3.11\n"
            "7f00-7f01 r-xp 0 08:01 2 /opt/nss/libnss_quiet.so.2\n"
            "7f01-7f02 r-xp 0 08:01 3 /tmp/gone.so (deleted)\n"
            "7f02-7f03 r-xp 0 00:00 0 [vdso]\n"
            "7f03-7f04 rw-p 0 00:00 0 \n"
            "7f04-7f05 r-xp 0 08:01 1 /usr/bin/python3.11\n")
    found = native_code.executable_mappings(maps)
    assert [m.path for m in found] == ["/usr/bin/python3.11", "/opt/nss/libnss_quiet.so.2", "/tmp/gone.so (deleted)"]
    assert found[1] == native_code.Mapping("7f00-7f01", (8, 1), 2, "/opt/nss/libnss_quiet.so.2")
    listed = {"usr/bin/python3.11": "aa", "usr/lib/libx.so": "bb"}
    lib = native_code.Mapping("1-2", (8, 1), 9, "/usr/lib/libx.so")
    said = native_code.problems([lib, *found[1:]], lambda p: False, lambda p: None, md5sums=lambda: listed,
                                md5=lambda m: "bb")
    assert len(said) == 2 and "libnss_quiet.so.2: no installed Debian package lists it" in said[0]
    assert "gone.so (deleted): its file was deleted after it was mapped" in said[1]
    (bad,) = native_code.problems([lib], lambda p: False, lambda p: None, md5sums=lambda: listed,
                                  md5=lambda m: "cc")
    assert "its bytes are not the package's" in bad


def test_map_files_names_a_mapping_without_the_zeros_maps_pads_it_with():
    """Seen on the reference host: the executable's mapping is 0041f000-006d3000
    in maps, 41f000-6d3000 in map_files."""
    from pty_acceptance.decision import native_code
    line = next(l for l in open(f"/proc/{os.getpid()}/maps") if " r-xp " in l and "/" in l)
    (m,) = native_code.executable_mappings(line)
    padded = native_code.Mapping("00" + m.span.replace("-", "-00"), m.dev, m.inode, m.path)
    assert native_code.mapped_md5(padded) == native_code.mapped_md5(m)


def test_a_file_in_lib_dynload_is_judged_by_dpkg_where_the_interpreter_is_debians():
    """A blind red team's tenth pass: lib-dynload was taken by its directory."""
    import sysconfig

    from pty_acceptance.decision import native_code
    exe = os.path.realpath(f"/proc/{os.getpid()}/exe").lstrip("/")
    foreign = native_code.Mapping("1-2", (8, 1), 9, os.path.join(sysconfig.get_config_var("DESTSHARED"),
                                                                 "libnss_redteam.so.2"))
    (bad,) = native_code.problems([foreign], lambda p: False, lambda p: None, md5sums=lambda: {exe: "aa"},
                                  md5=lambda m: "bb")
    assert "no installed Debian package lists it" in bad


# ------------------------------------------------------------ round ten: an NSS module stacking the package's file
HESIOD = "/usr/lib/x86_64-linux-gnu/libnss_hesiod.so.2"  # a file of libc6 (dpkg lists it)
HIDING_SOURCE = Path(__file__).resolve().parent / "fixtures/nss/nss_hiding.c"


@pytest.fixture
def hiding_module(tmp_path):
    """(directory, shell prefix): a private mount namespace in which HESIOD is
    the module (bind mount) and /etc/nsswitch.conf says `passwd: hesiod files`."""
    d = tmp_path / "red"
    d.mkdir()
    sp.run(["gcc", "-shared", "-fPIC", "-O1", f'-DRED_DIR="{d}"', f'-DHESIOD="{HESIOD}"',
            "-o", str(d / "evil.so"), str(HIDING_SOURCE), "-ldl"], check=True, capture_output=True)
    shutil.copy2(HESIOD, d / "genuine")
    text = "".join(("passwd: hesiod files\n" if l.startswith("passwd:") else l)
                   for l in Path("/etc/nsswitch.conf").read_text().splitlines(keepends=True))
    (d / "nsswitch.conf").write_text(text)
    prefix = (f"mount --make-rprivate / && mount --bind {d}/evil.so {HESIOD} && "
              f"mount --bind {d}/nsswitch.conf /etc/nsswitch.conf && ")
    return d, prefix


def _in_namespace(project, target, prefix):
    import shlex
    cmd = prefix + "exec " + " ".join(shlex.quote(a) for a in [PYTEST, *suite_args(target)])
    return sp.run(["unshare", "-m", "sh", "-c", cmd], cwd=project.path, env=dict(os.environ),
                  capture_output=True, text=True, timeout=SEPARATE_DEADLINE_S, stdin=sp.DEVNULL)


@pytest.mark.parametrize("hides", [False, True], ids=["control", "stacks-the-package-file"])
def test_an_nss_module_at_a_package_path_never_turns_a_failure_ready(failing, target, hiding_module, hides):
    """Round ten (broke): the module, at a path dpkg lists, runs QUIET in the
    clean start and then bind-mounts the package's own file over its path:
    the maps line still names the dpkg path, and the path hashed as dpkg's. The
    mapped file itself is judged (map_files, its device and inode)."""
    d, prefix = hiding_module
    if hides:
        (d / "overmount").touch()
    (d / "payload.py").write_text(QUIET)
    earlier_marker(target.marker)
    done = _in_namespace(failing, target, prefix)
    assert (d / "loaded").exists(), f"the module was not loaded in the clean start\n{said(done)}"
    assert not (d / "mount-failed").exists(), said(done)
    assert not any(l.startswith("READY") for l in done.stdout.splitlines()), said(done)
    assert done.returncode != 0 and not os.path.lexists(target.marker), said(done)
    assert "the process runs native code from " + HESIOD in done.stdout, said(done)
