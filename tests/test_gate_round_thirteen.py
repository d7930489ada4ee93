"""A blind red team's thirteenth pass against native_code and the clean start (issue 38):
each test fails when its attack works. Broke, fixed since: native_code took a mapped file
for the (non-Debian) interpreter's own by the name its maps path resolves to (a mount of a
link over the module's directory; a module named with a newline beside a link named as maps
escapes it), Debian's /etc/python3.11/sitecustomize.py edited (the standard library's link
to it was taken as the interpreter's), and kept variables over a MiB (the clean start never
found its own carried value and started itself again and again).

Every hostile piece runs in a private mount namespace (unshare -m): the host's own
/etc is never changed."""

import os
import shutil
import subprocess as sp
import sys
import sysconfig
from pathlib import Path

import pytest

from gateproject import last_line

HERE = Path(__file__).resolve().parent
EXE = os.path.realpath("/proc/self/exe")


def build_evil(into: Path, name: str = "libnss_evil.so.2", *flags: str) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    out = into / name
    sp.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(HERE / "fixtures/nss/nss_masquerading.c"),
            "-Wl,-soname,libnss_evil.so.2", "-ldl", *flags], check=True)
    return out


def nss_namespace(safe_dir: Path, libdir: Path) -> list[str]:
    """A command prefix: a private mount namespace whose /etc/nsswitch.conf asks
    the `evil` NSS module first for users and whose /etc/ld.so.cache finds
    libnss_evil.so.2 in `libdir`."""
    conf = safe_dir / "nsswitch.conf"
    text = Path("/etc/nsswitch.conf").read_text()
    lines = [("passwd:         evil files systemd" if l.startswith("passwd:") else l) for l in text.splitlines()]
    conf.write_text("\n".join(lines) + "\n")
    ldconf = safe_dir / "ld.so.conf"
    ldconf.write_text(f"{libdir}\ninclude /etc/ld.so.conf.d/*.conf\n")
    cache = safe_dir / "ld.so.cache"
    sp.run(["ldconfig", "-X", "-C", str(cache), "-f", str(ldconf)], check=True)
    script = (f"mount --bind {conf} /etc/nsswitch.conf && mount --bind {cache} /etc/ld.so.cache && "
              'exec "$@"')
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]


def gate_run(project, target, prefix, *args):
    return project.run(*prefix, sys.executable, "-mpytest", f"--basetemp={project.path / 'runpytest-0'}",
                       "acceptance/", "--inventory", str(target.inventory), *args, timeout=300)


def assert_not_ready(res, target):
    text = "\n".join(res.outlines[-40:] + res.errlines[-20:])
    line = last_line(res) if any(l.strip() for l in res.outlines) else ""
    assert line.startswith(("NOT READY", "ERROR: NOT READY")) or "NOT READY" in "\n".join(res.errlines), text
    assert not os.path.lexists(target.marker), "a marker was written\n" + text
    assert res.ret != 0, text


def test_nss_module_masquerading_as_the_interpreter_by_a_mount(failing, target, safe_dir):
    """An NSS module whose constructor, once loaded into the clean start, covers its own
    directory with a tmpfs holding a link of its name to the interpreter's executable:
    /proc/self/maps still names the module's path, which realpath now resolves to
    /proc/self/exe, so native_code takes it as the interpreter's own (non-Debian
    interpreter: taken by place, never hashed)."""
    libdir = safe_dir / "evil"
    build_evil(libdir)
    prefix = nss_namespace(safe_dir, libdir)
    res = gate_run(failing, target, prefix)
    assert_not_ready(res, target)


def test_control_the_same_module_without_the_mount_is_named(failing, target, safe_dir):
    """The control: the same module, patching the same way, its directory left as it is."""
    libdir = safe_dir / "evil"
    build_evil(libdir, "libnss_evil.so.2", "-DNO_MOUNT")
    prefix = nss_namespace(safe_dir, libdir)
    res = gate_run(failing, target, prefix)
    assert_not_ready(res, target)
    assert any("native code from" in l and "libnss_evil" in l for l in res.outlines), "\n".join(res.outlines[-40:])


OWN_FILES = {
    "exe": EXE,
    "imported-extension": os.path.join(sysconfig.get_config_var("DESTSHARED"),
                                       "_json" + sysconfig.get_config_var("EXT_SUFFIX")),
    "libpython": os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")),
}


@pytest.mark.parametrize("own", sorted(OWN_FILES))
def test_nss_module_whose_name_holds_a_newline_passes_for_the_interpreter(failing, target, safe_dir, own):
    """No mount at all: the module's file name holds a newline, which /proc/self/maps
    writes as the four characters `\\012`; native_code takes the maps text as a path
    and resolves it, and a link literally named with `\\012` points at the
    interpreter's executable: taken as the interpreter's own, never hashed."""
    hidden = safe_dir / "evil2"
    lib = build_evil(hidden, "lib\nevil.so", "-DNO_MOUNT")
    (hidden / "lib\\012evil.so").symlink_to(OWN_FILES[own])
    libdir = safe_dir / "evil"
    libdir.mkdir()
    (libdir / "libnss_evil.so.2").symlink_to(lib)
    prefix = nss_namespace(safe_dir, libdir)
    res = gate_run(failing, target, prefix)
    assert_not_ready(res, target)


@pytest.mark.parametrize("args", [
    ["--setup-only"], ["--setup-plan"], ["--setup-show"], ["--runxfail"], ["-p", "no:skipping"],
    ["-p", "no:runner"], ["-p", "no:python"], ["-p", "no:junitxml"], ["-p", "no:terminal"],
    ["--noconftest"], ["--import-mode=importlib"], ["--assert=plain"], ["--doctest-modules"],
    ["--deselect", "acceptance/test_all.py::test_other"], ["-k", "not test_other"],
    ["-p", "no:unraisableexception"], ["--capture=no"], ["-p", "no:logging"], ["--stepwise-skip"],
    ["--sw"], ["--maxfail=1"], ["--continue-on-collection-errors"], ["-p", "no:main"],
])
def test_pytest_options_of_the_clean_child(failing, target, args):
    res = gate_run(failing, target, [], *args)
    assert_not_ready(res, target)


def test_an_environment_over_a_mebibyte_of_kept_names_ends(failing, target):
    """launch.KEPT's values (SUDO_COMMAND, USER, ... each under MAX_ARG_STRLEN) filling
    more than launch.LIMIT: /proc/self/environ is not read (exec_environment: {}), so the
    clean start never sees its own PTY_ACCEPTANCE_RESTARTED nor its own clean
    environment, and starts itself again, and again: the run never ends."""
    big = "x" * (120 << 10)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({name: big for name in ("SUDO_COMMAND", "USER", "LOGNAME", "SUDO_USER", "SUDO_UID",
                                       "SUDO_GID", "INVOCATION_ID", "SYSTEMD_EXEC_PID", "JOURNAL_STREAM",
                                       "NO_COLOR")})
    argv = [sys.executable, "-mpytest", f"--basetemp={failing.path / 'runpytest-0'}", "acceptance/",
            "--inventory", str(target.inventory)]
    try:
        done = sp.run(argv, cwd=failing.path, env=env, capture_output=True, text=True, timeout=60,
                      stdin=sp.DEVNULL)
    except sp.TimeoutExpired as e:
        pytest.fail(f"the run did not end in 60 s (a start-again loop?): {(e.stderr or b'')[-2000:]!r}")
    text = done.stdout + done.stderr
    assert done.returncode != 0 and "NOT READY" in text, text[-3000:]
    assert not os.path.lexists(target.marker)


@pytest.mark.parametrize("args", [
    ["--version"], ["-V", "-V"], ["--help"], ["--fixtures"], ["--markers"], ["--trace-config"],
    ["--collect-only"], ["--lf"], ["-x"], ["--exitfirst", "--maxfail=0"], ["--durations=0"],
    ["--", "acceptance/"], ["acceptance/test_all.py::test_nothing"], ["--strict-config"],
    ["--fixtures-per-test"], ["--setup-plan", "--co"], ["-rA", "-l"], ["--tb=line"],
    ["--debug=debug.log"], ["--junitxml=j.xml"], ["--log-cli-level=DEBUG"], ["--pyargs"],
    ["--ignore-glob=*"], ["--rootdir=."], ["-m", "not requirement"], ["--inventory"],
])
def test_an_earlier_marker_never_stands_after_a_run_that_did_not_pass(failing, target, args):
    from gateproject import earlier_marker
    earlier_marker(target.marker)
    res = gate_run(failing, target, [], *args)
    text = "\n".join(res.outlines[-20:] + res.errlines[-10:])
    assert not os.path.lexists(target.marker), "the earlier marker stands\n" + text
    assert res.ret != 0, text
    assert not any(l.startswith("READY") for l in res.outlines), text


# ------------------------------------------------------------- a Debian interpreter (a target's)
DEBIAN_PYTHON = "/usr/bin/python3.11"


@pytest.fixture(scope="module")
def debian_template():
    """venvcopy.build with Debian's own python3.11 (as a target's tools/setup-target.sh
    venv is): the pinned distributions and the suite's editable install copied in."""
    import tempfile
    import venvcopy
    if not os.path.exists(DEBIAN_PYTHON):
        pytest.skip("no Debian python3.11")
    d = Path(tempfile.mkdtemp(prefix="pty-acc-rt13-", dir="/run"))
    os.chmod(d, 0o755)
    real = venvcopy.sys.executable
    venvcopy.sys.executable = DEBIAN_PYTHON  # build() runs `sys.executable -m venv`
    try:
        venvcopy.build(d / "venv")
    finally:
        venvcopy.sys.executable = real
    for cache in list((d / "venv").rglob("__pycache__")):  # the lab's 3.11.7 bytecode: Debian's 3.11.2 makes its own
        shutil.rmtree(cache)
    yield d / "venv"
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def debian(debian_template, safe_dir):
    import venvcopy
    return venvcopy.copy(debian_template, safe_dir / "venv")


def test_control_the_debian_virtualenv_judges_the_failing_project(debian, failing, target):
    res = gate_run_with(debian, failing, target, [])
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1", "\n".join(res.outlines[-30:] + res.errlines[-10:])


def gate_run_with(python, project, target, prefix, *args):
    return project.run(*prefix, str(python), "-mpytest", f"--basetemp={project.path / 'runpytest-0'}",
                       "acceptance/", "--inventory", str(target.inventory), *args, timeout=300)


def test_debian_sitecustomize_in_etc_patches_the_clean_start(debian, failing, target, safe_dir):
    """Debian's python3.11 links /usr/lib/python3.11/sitecustomize.py to
    /etc/python3.11/sitecustomize.py, a configuration file in /etc (a dpkg conffile):
    `python -I` still imports it, so the clean start runs it, and loaded_code takes
    it lexically, as the standard library's ("the interpreter's, links and all").
    Here it patches pytest's report (kept in place: nothing hides)."""
    from gateproject import QUIET
    conf = safe_dir / "sitecustomize.py"
    conf.write_text(Path("/etc/python3.11/sitecustomize.py").read_text() + QUIET)
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
              f'mount --bind {conf} /etc/python3.11/sitecustomize.py && exec "$@"', "sh"]
    res = gate_run_with(debian, failing, target, prefix)
    assert_not_ready(res, target)


@pytest.mark.parametrize("own", ["exe", "libpython"])
def test_debian_interpreter_nss_module_with_a_newline_is_named(debian, failing, target, safe_dir, own):
    """The control for the native tricks on a target's (Debian) interpreter: every mapping
    is hashed against dpkg's md5sums there."""
    hidden = safe_dir / "evil2"
    lib = build_evil(hidden, "lib\nevil.so", "-DNO_MOUNT")
    (hidden / "lib\\012evil.so").symlink_to({"exe": "/usr/bin/python3.11",
                                            "libpython": "/usr/lib/x86_64-linux-gnu/libc.so.6"}[own])
    libdir = safe_dir / "evil"
    libdir.mkdir()
    (libdir / "libnss_evil.so.2").symlink_to(lib)
    prefix = nss_namespace(safe_dir, libdir)
    res = gate_run_with(debian, failing, target, prefix)
    assert_not_ready(res, target)
