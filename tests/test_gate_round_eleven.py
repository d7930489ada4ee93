"""A blind red team's eleventh pass (issue 38, session 35): attacks on
native_code's judgement and the clean start, each broke and is fixed:
dpkg's md5sums of no installed package (read only for packages dpkg's status
says are installed), a module that made its own code read-only once it had
run (every mapped ELF file is judged, executable or not), a module in
lib-dynload taken by its place (only for an interpreter outside /usr that
no package lists), a lazily unmounted working directory with a relative
--inventory (relative names read from /proc/self/cwd). A lock holder that is
no run keeping an earlier marker is SUITE-5's design (only root can hold it)
and is not kept here. Each test asserts what a correct gate must do, so it
fails when its attack works. Every run is a process of its own on the gate's
fixture project with one failing test (correct: `NOT READY: 1 blockers: OWN-1`,
no marker), in a private mount namespace where the host is changed (this
machine's /etc and /var are untouched)."""

import hashlib
import os
import shlex
import subprocess as sp
from pathlib import Path

import pytest

from gateproject import PYTEST, QUIET, SEPARATE_DEADLINE_S, earlier_marker, said, suite_args

NSS_RED = Path(__file__).resolve().parent / "fixtures/nss/nss_hiding.c"  # runs RED_DIR/payload.py
HESIOD = "/usr/lib/x86_64-linux-gnu/libnss_hesiod.so.2"  # a file of libc6 (dpkg lists it)


def build_module(d: Path, name: str = "red") -> Path:
    lib = d / "lib" / f"libnss_{name}.so.2"
    lib.parent.mkdir(parents=True, exist_ok=True)
    # -nostartfiles: no .fini_array/_fini of crtbeginS/crti (nothing of the module runs at exit)
    sp.run(["gcc", "-shared", "-fPIC", "-O1", "-nostartfiles", f'-DRED_DIR="{d}"', '-DHESIOD="/nonexistent"',
            "-o", str(lib), str(NSS_RED), "-ldl"], check=True, capture_output=True)
    return lib


def nss_prefix(d: Path, name: str = "red") -> str:
    """nsswitch.conf naming `name` for passwd first, ld.so.cache finding d/lib."""
    text = "".join((f"passwd: {name} files\n" if l.startswith("passwd:") else l)
                   for l in Path("/etc/nsswitch.conf").read_text().splitlines(keepends=True))
    (d / "nsswitch.conf").write_text(text)
    (d / "ld.so.conf").write_text(f"include /etc/ld.so.conf.d/*.conf\n{d / 'lib'}\n")
    sp.run(["ldconfig", "-C", str(d / "ld.so.cache"), "-f", str(d / "ld.so.conf")], check=True)
    return (f"mount --make-rprivate / && mount --bind {d}/nsswitch.conf /etc/nsswitch.conf && "
            f"mount --bind {d}/ld.so.cache /etc/ld.so.cache && ")


def forged_dpkg_info(d: Path, lines: list[str], name: str = "00-redteam.md5sums") -> str:
    """/var/lib/dpkg/info as it is, plus a *.md5sums file of no installed package
    (no entry in dpkg's status): what root writes as easily as nsswitch.conf."""
    info = d / "info"
    info.mkdir()
    for f in Path("/var/lib/dpkg/info").glob("*.md5sums"):
        (info / f.name).write_bytes(f.read_bytes())
    (info / name).write_text("".join(l + "\n" for l in lines))
    return f"mount --bind {info} /var/lib/dpkg/info && "


def in_namespace(project, target, prefix):
    cmd = prefix + "exec " + " ".join(shlex.quote(a) for a in [PYTEST, *suite_args(target)])
    return sp.run(["unshare", "-m", "sh", "-c", cmd], cwd=project.path, env=dict(os.environ),
                  capture_output=True, text=True, timeout=SEPARATE_DEADLINE_S, stdin=sp.DEVNULL)


def assert_not_ready(done, target, d):
    assert (d / "loaded").exists(), f"the module never loaded: the attack did not happen\n{said(done)}"
    assert not any(l.startswith("READY") for l in done.stdout.splitlines()), said(done)
    assert done.returncode != 0 and not os.path.lexists(target.marker), said(done)


# ------------------------------------------------------------------ A: dpkg's md5sums of no package
@pytest.mark.parametrize("forged", [False, True], ids=["control", "forged-md5sums"])
def test_a_md5sums_file_of_no_installed_package_lists_the_module(failing, target, safe_dir, forged):
    """native_code trusts every /var/lib/dpkg/info/*.md5sums file: one root wrote
    by hand (no package of dpkg's status owns it) lists the NSS module's md5."""
    d = safe_dir / "red"
    d.mkdir()
    lib = build_module(d)
    (d / "payload.py").write_text(QUIET)
    md5 = hashlib.md5(lib.read_bytes()).hexdigest()
    prefix = nss_prefix(d) + (forged_dpkg_info(d, [f"{md5}  {str(lib).lstrip('/')}"]) if forged else "")
    earlier_marker(target.marker)
    done = in_namespace(failing, target, prefix)
    assert_not_ready(done, target, d)
    assert f"the process runs native code from {lib}" in done.stdout, said(done)


def test_a_md5sums_file_sorting_first_overrides_libc6s_listing(failing, target, safe_dir):
    """dpkg_md5sums keeps the first listing of a path (setdefault, files sorted):
    00-redteam.md5sums sorts before libc6:amd64.md5sums and gives HESIOD's path
    the module's md5; the module is bind-mounted over HESIOD."""
    d = safe_dir / "red"
    d.mkdir()
    lib = build_module(d)
    (d / "payload.py").write_text(QUIET)
    md5 = hashlib.md5(lib.read_bytes()).hexdigest()
    text = "".join(("passwd: hesiod files\n" if l.startswith("passwd:") else l)
                   for l in Path("/etc/nsswitch.conf").read_text().splitlines(keepends=True))
    (d / "nsswitch.conf").write_text(text)
    prefix = (f"mount --make-rprivate / && mount --bind {lib} {HESIOD} && "
              f"mount --bind {d}/nsswitch.conf /etc/nsswitch.conf && "
              + forged_dpkg_info(d, [f"{md5}  {HESIOD.lstrip('/')}"]))
    earlier_marker(target.marker)
    done = in_namespace(failing, target, prefix)
    assert_not_ready(done, target, d)


# ------------------------------------------------------------------ B: the module's code made non-executable
HIDE = QUIET.replace("""    def from_item_and_call(cls, item, call):
        report = made(cls, item, call)""", """    hidden = []

    def hide():  # the module's text no longer executable: /proc/self/maps shows r--p
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split(None, 5)
                if len(p) == 6 and "x" in p[1] and p[5].strip().endswith("libnss_red.so.2"):
                    a, b = (int(x, 16) for x in p[0].split("-"))
                    hidden.append(libc.mprotect(a, b - a, 1))
        hidden.append("done")

    def from_item_and_call(cls, item, call):
        if not hidden:
            hide()
        report = made(cls, item, call)""")


def test_an_nss_module_that_makes_its_text_non_executable(failing, target, safe_dir):
    """The module stays mapped (glibc never unloads an NSS module), only its
    text's protection drops to PROT_READ after its code ran (no module code runs
    again: the patch is Python's). executable_mappings reads only 'x' lines."""
    assert HIDE != QUIET
    d = safe_dir / "red"
    d.mkdir()
    build_module(d)
    (d / "payload.py").write_text(HIDE)
    prefix = nss_prefix(d)
    earlier_marker(target.marker)
    done = in_namespace(failing, target, prefix)
    assert_not_ready(done, target, d)


# ------------------------------------------------------------------ C: the interpreter's own directory
def test_an_nss_module_in_lib_dynload_is_taken_for_the_interpreters_own(failing, target, safe_dir):
    """Where the interpreter is no Debian package's (this lab's; on a target any
    interpreter no dpkg lists, e.g. a `venv --copies`), interpreters_own takes
    every file in DESTSHARED's directory by its directory alone, unhashed: an NSS
    module put there (ld.so.cache finding that directory) is never judged. In a
    private mount namespace: a copy of lib-dynload with the module, bound over it."""
    import shutil
    import sysconfig
    dynload = sysconfig.get_config_var("DESTSHARED")
    d = safe_dir / "red"
    d.mkdir()
    lib = build_module(d)
    (d / "payload.py").write_text(QUIET)
    copy = d / "dynload"
    shutil.copytree(dynload, copy, symlinks=True)
    shutil.copy2(lib, copy / lib.name)
    text = "".join(("passwd: red files\n" if l.startswith("passwd:") else l)
                   for l in Path("/etc/nsswitch.conf").read_text().splitlines(keepends=True))
    (d / "nsswitch.conf").write_text(text)
    (d / "ld.so.conf").write_text(f"include /etc/ld.so.conf.d/*.conf\n{dynload}\n")
    prefix = (f"mount --make-rprivate / && mount --bind {copy} {dynload} && "
              f"ldconfig -C {d}/ld.so.cache -f {d}/ld.so.conf && "
              f"mount --bind {d}/nsswitch.conf /etc/nsswitch.conf && "
              f"mount --bind {d}/ld.so.cache /etc/ld.so.cache && ")
    earlier_marker(target.marker)
    done = in_namespace(failing, target, prefix)
    assert_not_ready(done, target, d)


def test_an_unreachable_working_directory_keeps_the_inventorys_marker(failing, target, safe_dir):
    """The run starts in a directory of a lazily unmounted filesystem: getcwd()
    fails (ENOENT: unreachable), relative paths still open there. The early guard
    refuses the run and removes what the arguments name *from /*, so the
    `--inventory inv.yml` the run was given (readable from its directory) is
    never read and the marker it names, an earlier READY run's, stands."""
    mnt = safe_dir / "mnt"
    mnt.mkdir()
    earlier_marker(target.marker)
    args = ["-p", "no:cacheprovider", str(failing.path / "acceptance"), "--inventory", "inv.yml"]
    cmd = (f"mount --make-rprivate / && mount -t tmpfs -o mode=0755 none {mnt} && "
           f"cp {shlex.quote(str(target.inventory))} {mnt}/inv.yml && cd {mnt} && umount -l {mnt} && "
           f"cat inv.yml >/dev/null && exec " + " ".join(shlex.quote(a) for a in [PYTEST, *args]))
    done = sp.run(["unshare", "-m", "sh", "-c", cmd], cwd=failing.path, env=dict(os.environ),
                  capture_output=True, text=True, timeout=SEPARATE_DEADLINE_S, stdin=sp.DEVNULL)
    assert done.returncode != 0, said(done)
    assert not any(l.startswith("READY") for l in done.stdout.splitlines()), said(done)
    assert not os.path.lexists(target.marker), f"the earlier marker stands\n{said(done)}"


# ------------------------------------------------------------ round twelve: a module in lib-dynload
# under an extension module's name (bound over the unused xxlimited module: an operator would copy it
# there), reached by a link libnss_evil.so.2 that /etc/ld.so.cache lists
LIB_DYNLOAD_SCRIPT = r"""
set -e
D=$1; DYN=$2; S=$3; PLACE=$4; shift 4
if [ "$PLACE" = lib-dynload ]; then
    T=$DYN/xxlimited$S
    mount --bind "$D/lib/libnss_red.so.2" "$T"
else  # the control: the module in a directory of its own (round nine's place)
    T=$D/lib/libnss_red.so.2
fi
mkdir -p "$D/links"; ln -sfn "$T" "$D/links/libnss_evil.so.2"
printf '%s\ninclude /etc/ld.so.conf.d/*.conf\n' "$D/links" > "$D/ld.so.conf"
ldconfig -X -C "$D/ld.so.cache" -f "$D/ld.so.conf"
mount --bind "$D/ld.so.cache" /etc/ld.so.cache
sed -e 's/^passwd:[[:space:]]*/passwd: evil /' /etc/nsswitch.conf > "$D/nsswitch.conf"
mount --bind "$D/nsswitch.conf" /etc/nsswitch.conf
exec "$@"
"""


@pytest.mark.parametrize("place", ["lib-dynload", "own-directory"])
def test_a_module_under_an_extension_modules_name_in_lib_dynload_is_judged(failing, target, safe_dir, place):
    """Round twelve (broke on an interpreter that is no Debian package's, as
    this lab's): lib-dynload was taken by place and name; now only an extension
    module Python imported is the interpreter's own there."""
    import sysconfig

    d = safe_dir / "red12"
    d.mkdir()
    lib = build_module(d)
    (d / "payload.py").write_text(QUIET)
    sp.run(["gcc", "-shared", "-fPIC", "-O1", "-nostartfiles", "-Wl,-soname,libnss_evil.so.2", f'-DRED_DIR="{d}"',
            '-DHESIOD="/nonexistent"', "-o", str(lib), str(NSS_RED), "-ldl"], check=True, capture_output=True)
    (d / "ns.sh").write_text(LIB_DYNLOAD_SCRIPT)
    dyn, suffix = sysconfig.get_config_var("DESTSHARED"), sysconfig.get_config_var("EXT_SUFFIX")
    assert os.path.exists(f"{dyn}/xxlimited{suffix}")
    earlier_marker(target.marker)
    done = sp.run(["unshare", "-m", "--propagation", "private", "sh", str(d / "ns.sh"), str(d), dyn, suffix, place,
                   PYTEST, *suite_args(target)], cwd=failing.path, env=dict(os.environ), capture_output=True,
                  text=True, timeout=SEPARATE_DEADLINE_S, stdin=sp.DEVNULL)
    assert_not_ready(done, target, d)
    assert "the process runs native code from" in done.stdout, said(done)
