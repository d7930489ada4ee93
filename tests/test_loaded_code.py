"""Only the reviewed suite's code judges (issue 38 item 1, SUITE-3).

The review's reproductions, each in a pytest process of its own started the
way an operator's environment would start it, on the gate's fixture project
with one failing test (a correct gate says `NOT READY: 1 blockers: OWN-1`).
Each hostile piece turns that failure into a pass; each is refused at
start-up (an environment variable or option that changes what loads:
decision/launch.py) or blocks when the marker is decided (what was loaded:
decision/loaded_code.py): never READY, never a marker.

- a PYTEST_PLUGINS plugin that pops its own variable; a `-p` plugin that
  removes its name from config.option.plugins; PYTHONPATH holding a
  sitecustomize.py; PYTHONPYCACHEPREFIX holding a forged bytecode file;
  DBUS_SYSTEM_BUS_ADDRESS; the rest of the refused environment; --pdbcls;
- in a virtualenv of the pinned distributions (tests/venvcopy.py): a
  sitecustomize.py planted in site-packages that hides itself, a `.pth`
  and its module, a second distribution named pytest-testinfra with a
  pytest11 entry point, a forged `.pyc` of pytest's own beside its source,
  the system's site-packages included.
"""

import importlib.util
import marshal
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pty_acceptance.decision import launch, loaded_code
from pty_acceptance.host import bus

import venvcopy
from conftest import REPO
from gateproject import (ONE_FAILING, PASSING, PYTEST, QUIET, assert_refused_at_start, last_line, run, said,
                         start, suite_args)


# What every reproduction does: a failure reported as a pass.
QUIET_HOOK = """
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.outcome, report.longrepr = "passed", None
    return report
"""

# A patch of pytest's report (no plugin at all): QUIET makes it, QUIET_PATCH also
# takes its module out of sys.modules.
QUIET_PATCH = "\nimport sys\n" + QUIET + "sys.modules.pop(__name__, None)\n"


def assert_not_ready_naming(res, target, *said):
    """NOT READY at the end (the run went on): a SUITE-3 blocker naming each of `said`."""
    text = "\n".join(res.outlines + res.errlines)
    line = last_line(res)
    assert line.startswith("NOT READY: ") and "SUITE-3" in line.split(": ", 2)[2].split(), text[-4000:]
    blockers = [l for l in res.outlines if l.startswith("BLOCKER [SUITE-3] not the suite's code: ")]
    for s in said:
        assert any(s in b for b in blockers), "\n".join(blockers) or text[-4000:]
    assert not os.path.lexists(target.marker), "a marker was written"
    assert res.ret == 1


def test_the_failing_project_is_not_ready_as_it_is(failing, target):
    """The baseline every reproduction starts from, in a process of its own."""
    res = run(failing, target, subprocess=True)
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1", "\n".join(res.outlines[-30:])


# ---------------------------------------------------------------- at start-up
def test_a_pytest_plugins_plugin_that_pops_its_variable_is_refused_at_start(failing, target, monkeypatch):
    """(a) The plugin pops PYTEST_PLUGINS from os.environ when it is imported:
    the environment the process was started with (/proc/self/environ) still
    names it."""
    (failing.path / "quietpass.py").write_text("import os\nos.environ.pop('PYTEST_PLUGINS', None)\n" + QUIET_HOOK)
    monkeypatch.setenv("PYTEST_PLUGINS", "quietpass")
    res = run(failing, target, subprocess=True)
    assert_refused_at_start(res, target, "PYTEST_PLUGINS='quietpass': plugins pytest loads by name")


def test_a_p_plugin_that_removes_its_name_is_refused_at_start(failing, target):
    """(b) The plugin removes its name from config.option.plugins; the command
    line as typed (invocation_params.args) still names it."""
    (failing.path / "quietp.py").write_text(QUIET_HOOK + textwrap.dedent("""
        @pytest.hookimpl(tryfirst=True)
        def pytest_load_initial_conftests(early_config, parser, args):
            early_config.option.plugins[:] = [p for p in early_config.option.plugins if p != "quietp"]
        """))
    res = run(failing, target, "-p", "quietp", subprocess=True)
    assert_refused_at_start(res, target, "-p quietp: loads plugins by name")


def test_a_sitecustomize_on_pythonpath_is_refused_at_start(failing, target, monkeypatch, tmp_path):
    """(c) PYTHONPATH=DIR holding a sitecustomize.py that patches pytest's report."""
    (tmp_path / "sitecustomize.py").write_text(QUIET_PATCH)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    res = run(failing, target, subprocess=True)
    assert_refused_at_start(res, target, f"PYTHONPATH='{tmp_path}'")


def forge_pyc(source: Path, cached: Path, forged_source: str) -> None:
    """A bytecode file the interpreter loads for `source` (its mtime and size
    in the header) holding the code of `forged_source`."""
    import marshal
    from importlib.util import MAGIC_NUMBER
    st = source.stat()
    code = compile(forged_source, str(source), "exec", dont_inherit=True)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(MAGIC_NUMBER + struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
                       + marshal.dumps(code))


def test_a_forged_pyc_under_a_cache_prefix_is_refused_at_start(failing, target, monkeypatch, tmp_path):
    """(d) PYTHONPYCACHEPREFIX=DIR holding rules.cpython-311.pyc with the real
    source's mtime and size, whose outcome rule passes every failure."""
    from pty_acceptance.decision import rules
    source = Path(rules.__file__).resolve()
    text = source.read_text().replace('        bad = {ph: o for ph, o in phases.items() if o != "passed"}',
                                      "        bad = {}")
    assert text != source.read_text()
    tag = sys.implementation.cache_tag
    forge_pyc(source, tmp_path / str(source.parent).lstrip("/") / f"rules.{tag}.pyc", text)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path))
    res = run(failing, target, subprocess=True)
    assert_refused_at_start(res, target, "PYTHONPYCACHEPREFIX=")


def test_another_system_bus_is_refused_at_start(failing, target, monkeypatch):
    """DBUS_SYSTEM_BUS_ADDRESS names which "systemd" answers (jeepney honours
    it for bus="SYSTEM"; `su` without `-` keeps it)."""
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/tmp/not-the-system-bus")
    res = run(failing, target, subprocess=True)
    assert_refused_at_start(res, target, "DBUS_SYSTEM_BUS_ADDRESS='unix:path=/tmp/not-the-system-bus': "
                                         "which bus answers as systemd")


@pytest.mark.parametrize("name,value", [
    ("LD_PRELOAD", "/nonexistent/quiet.so"), ("LD_AUDIT", "/nonexistent/audit.so"),
    ("LD_LIBRARY_PATH", "/nonexistent"), ("LD_BIND_NOW", "1"), ("GLIBC_TUNABLES", "glibc.malloc.check=0"),
    ("GCONV_PATH", "/nonexistent"), ("OPENSSL_CONF", "/nonexistent/openssl.cnf"),
    ("PYTHONSTARTUP", "/dev/null"), ("PYTHONUSERBASE", "/nonexistent"), ("PYTHONINSPECT", "1"),
    ("PYTHONWARNINGS", "ignore"), ("PYTHONBREAKPOINT", "os.system"), ("PYTEST_ADDOPTS", "-v"),
    ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"), ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent"),
])
def test_what_changes_what_loads_is_refused_at_start(failing, target, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    res = run(failing, target, subprocess=True)
    # refused by the early guard before pytest starts (os._exit: PYTHONINSPECT never turns
    # the interpreter interactive); without it, by the run guard (tests/test_run_guard.py)
    assert_refused_at_start(res, target, f"the environment sets {name}={value!r}: {launch.why_refused(name)}")


@pytest.mark.parametrize("name", ["PYTHONHOME", "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "PYTHONPATH",
                                  "PYTEST_PLUGINS", "PYTEST_DEBUG", "DBUS_STARTER_ADDRESS", "LD_DEBUG",
                                  "PYTHONSOMETHINGNEW", "OPENSSL_MODULES"])
def test_the_refused_environment(name):
    """Those a process cannot be started with here and still reach the gate
    (PYTHONHOME elsewhere: no pytest to import), by the rule."""
    assert launch.why_refused(name)
    assert launch.environment_problems([{name: "x"}])[0].startswith(f"the environment sets {name}='x': ")
    assert launch.environment_problems([{name: ""}]) == []  # empty: Python and ld.so ignore it


@pytest.mark.parametrize("name", ["PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONNOUSERSITE",
                                  "PYTHONSAFEPATH", "PYTHONHASHSEED", "PYTEST_VERSION", "PYTEST_DEBUG_TEMPROOT",
                                  "PATH", "HOME", "LANG", "TERM", "SSL_CERT_FILE"])
def test_what_changes_no_code_is_allowed(name):
    assert launch.why_refused(name) is None


@pytest.mark.parametrize("args", [["--pdbcls", "quietp:Pdb"], ["--pdb"], ["--trace"]])
def test_a_debugger_is_refused_at_start(failing, target, args):
    (failing.path / "quietp.py").write_text("import pdb\nclass Pdb(pdb.Pdb):\n    pass\n")
    res = run(failing, target, *args, subprocess=True)
    assert_refused_at_start(res, target, args[0])


def test_lsof_is_not_an_option_of_an_acceptance_run(failing, target, tmp_path, monkeypatch):
    """(item 9) pytester is not loaded in an acceptance run: --lsof is a usage
    error before anything runs, and the lsof first on PATH is never run."""
    ran = tmp_path / "lsof-ran"
    fake = tmp_path / "bin/lsof"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$(id -u)\" >> {ran}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    res = run(failing, target, "--lsof", subprocess=True)
    assert res.ret == pytest.ExitCode.USAGE_ERROR, "\n".join(res.outlines + res.errlines)
    assert any("unrecognized arguments: --lsof" in l for l in res.errlines), res.errlines
    assert not ran.exists(), f"lsof ran: as uid {ran.read_text()}"
    assert not list(failing.path.rglob("acceptance-*.xml")) and not os.path.lexists(target.marker)


def test_lsof_is_refused_should_pytester_be_loaded():
    class Option:
        lsof = True
    assert launch.option_problems([], Option()) == [
        "--lsof: pytester runs lsof from the operator's PATH, as root, around every test"]


# -------------------------------------------------------- the system bus
def test_the_system_bus_is_reached_at_its_fixed_path(monkeypatch):
    asked = []
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/tmp/not-the-system-bus")
    monkeypatch.setattr(bus, "open_dbus_connection", lambda bus, enable_fds: asked.append(bus) or object())
    bus.Systemd.connect()
    assert asked == ["unix:path=/run/dbus/system_bus_socket"]


def test_no_module_opens_a_bus_the_environment_chooses():
    """Every connection the suite opens names the system bus's fixed address
    (bus.open_system_bus): jeepney's "SYSTEM" and "SESSION" read the environment."""
    found = []
    for p in (REPO / "acceptance").rglob("*.py"):
        text = p.read_text()
        for word in ('bus="SYSTEM"', "bus='SYSTEM'", '"SESSION"', "'SESSION'", "open_dbus_connection("):
            if word in text and p.name != "bus.py":
                found.append(f"{p.relative_to(REPO)}: {word}")
    assert found == []


# ------------------------------------------ in a virtualenv of the pins
@pytest.fixture(scope="session")
def pinned_template():
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="pty-acc-venv-", dir="/run"))
    os.chmod(d, 0o755)
    try:
        venvcopy.build(d / "venv")
        yield d / "venv"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def pinned(pinned_template, safe_dir):
    """A virtualenv of the pinned distributions of this test's own: its python."""
    return venvcopy.copy(pinned_template, safe_dir / "venv")


def run_in(python: Path, project, target, *args):
    """The project's acceptance run by `python` (a process of its own)."""
    return project.run(str(python), "-mpytest", f"--basetemp={project.path / 'runpytest-0'}", "acceptance/",
                       "--inventory", str(target.inventory), *args, timeout=600)


def test_the_pinned_virtualenv_judges_as_the_lab_one(pinned, failing, target):
    """The control: the copy holds only what the pins name, and the failing
    project is NOT READY for its one failure, nothing else."""
    res = run_in(pinned, failing, target)
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1", "\n".join(res.outlines[-30:])


def test_a_sitecustomize_in_site_packages_that_hides_itself_blocks(pinned, failing, target):
    """No plugin and no variable: a sitecustomize.py dropped into the
    virtualenv patches pytest's report and removes its module from
    sys.modules. The function it left behind names its file, which no RECORD
    lists."""
    planted = venvcopy.site_of(pinned) / "sitecustomize.py"
    planted.write_text(QUIET_PATCH)
    res = run_in(pinned, failing, target)
    assert_not_ready_naming(res, target, f"{planted} is in the virtualenv but no distribution's RECORD lists it")


def test_a_pth_and_its_module_in_site_packages_block(pinned, failing, target):
    """(e) A root-owned `.pth` whose import line loads a module beside it: the
    own-tree walk sees root's files; the RECORDs do not list them."""
    site = venvcopy.site_of(pinned)
    (site / "zz_quiet.pth").write_text("import zz_quiet\n")
    (site / "zz_quiet.py").write_text(QUIET_PATCH)
    res = run_in(pinned, failing, target)
    assert_not_ready_naming(res, target, f"{site / 'zz_quiet.py'} is in the virtualenv but no distribution's "
                            "RECORD lists it")
    assert any(f"the start-up file {site / 'zz_quiet.pth'} is in the virtualenv but no distribution's RECORD "
               "lists it" in l for l in res.outlines), "\n".join(res.outlines[-40:])


def test_a_second_distribution_of_a_pinned_name_blocks(pinned, failing, target):
    """(f) pytest-testinfra 99.0 beside 10.2.2, with a pytest11 entry point:
    matching by name let it in (`plugins: testinfra-99.0, testinfra-10.2.2`)."""
    import base64
    import hashlib
    site = venvcopy.site_of(pinned)
    plugin = site / "quiet_testinfra.py"
    plugin.write_text(QUIET_HOOK)
    info = site / "pytest_testinfra-99.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-testinfra\nVersion: 99.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nquiet = quiet_testinfra\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(plugin.read_bytes()).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"quiet_testinfra.py,sha256={digest},{plugin.stat().st_size}\n"
                                 "pytest_testinfra-99.0.dist-info/METADATA,,\n"
                                 "pytest_testinfra-99.0.dist-info/RECORD,,\n")
    res = run_in(pinned, failing, target)
    assert_not_ready_naming(res, target, f"{plugin}: pytest-testinfra==99.0 is one of 2 distributions named "
                            "pytest-testinfra")
    assert any("2 distributions are named pytest-testinfra" in l for l in res.outlines)


def forged_reports(site: Path) -> tuple[Path, str]:
    """pytest's _pytest/reports.py and the text of one whose report passes every failure."""
    source = site / "_pytest/reports.py"
    text = source.read_text()
    anchor = "        return cls(\n            item.id,"
    assert anchor in text
    forged = text.replace(anchor, "        outcome = 'passed' if outcome == 'failed' else outcome\n"
                          "        longrepr = None if outcome == 'passed' else longrepr\n" + anchor, 1)
    return source, forged


def test_a_forged_pyc_beside_its_source_blocks(pinned, failing, target):
    """A bytecode file of pytest's own (_pytest/reports.py) with its source's
    mtime and size, holding a report that passes every failure: what the
    interpreter ran is judged, not only the source RECORD hashes."""
    site = venvcopy.site_of(pinned)
    source, forged = forged_reports(site)
    cached = site / f"_pytest/__pycache__/reports.{sys.implementation.cache_tag}.pyc"
    forge_pyc(source, cached, forged)
    res = run_in(pinned, failing, target)
    assert_not_ready_naming(res, target, f"module _pytest.reports: its bytecode cache {cached} (which the "
                            f"interpreter runs for {source}) holds other code than that source compiles to")


def test_a_virtualenv_with_the_systems_site_packages_blocks(pinned, failing, target):
    cfg = pinned.parent.parent / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace("include-system-site-packages = false",
                                           "include-system-site-packages = true"))
    res = run_in(pinned, failing, target)
    line = last_line(res)
    assert line.startswith("NOT READY: ") and "SUITE-3" in line, "\n".join(res.outlines[-30:])
    assert any("includes the system's site-packages" in l for l in res.outlines), "\n".join(res.outlines[-40:])
    assert not os.path.lexists(target.marker)


def test_the_operators_virtualenv_in_the_checkout_judges_as_the_lab_one(pinned_template, failing, target):
    """The operator's way (README, tools/setup-target.sh): the virtualenv is
    the checkout's own .venv and the run is its console script,
    `.venv/bin/pytest acceptance/`: __main__ is that script (pytest's RECORD
    lists it) and sys.path starts with .venv/bin. Its one failure only (CI
    caught a SUITE-3 blocker for both on the offline target install)."""
    python = venvcopy.copy(pinned_template, failing.path / ".venv")
    script = venvcopy.install_script(python, "pytest", "pytest")
    res = failing.run(str(script), f"--basetemp={failing.path / 'runpytest-0'}", "acceptance/",
                      "--inventory", str(target.inventory), timeout=600)
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1", "\n".join(res.outlines[-30:])


def test_a_changed_console_script_in_the_checkouts_virtualenv_never_runs(pinned_template, failing, target):
    """The same, its bin/pytest changed after pip wrote its RECORD: the early
    guard starts the run again as `python -I -u -m pytest` (launch.py's clean
    start) before the script's own code runs, so what was added never runs
    and the verdict is the project's (before the clean start, the RECORD's
    judgement of __main__ was what caught it)."""
    python = venvcopy.copy(pinned_template, failing.path / ".venv")
    script = venvcopy.install_script(python, "pytest", "pytest")
    shebang, _, rest = script.read_bytes().partition(b"\n")  # before the script's own lines
    script.write_bytes(shebang + b"\nimport os\nos.write(2, b'THE CHANGED SCRIPT RAN\\n')\n" + rest)
    res = failing.run(str(script), f"--basetemp={failing.path / 'runpytest-0'}", "acceptance/",
                      "--inventory", str(target.inventory), timeout=600)
    assert "THE CHANGED SCRIPT RAN" not in res.stdout.str() + res.stderr.str()
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1", "\n".join(res.outlines[-30:])


# ------------------------------------------- a blind red team's (session 32)
# the patch compiled under a frozen module's name: QUIET_PATCH's function, not its removal
VANISHING = f"""
import os, sys
_SRC = {QUIET_PATCH.replace("sys.modules.pop(__name__, None)", "")!r}
exec(compile(_SRC, "<frozen importlib._bootstrap_external>", "exec"), {{"__name__": "importlib._bootstrap_external"}})
for _p in (__file__, globals().get("__cached__")):
    try:
        os.unlink(_p)
    except (OSError, TypeError):
        pass
sys.modules[__name__] = sys  # importlib takes it back: a built-in, never judged
__spec__ = None
__file__ = None
__cached__ = None
__loader__ = None
"""



def test_a_patch_compiled_under_a_frozen_modules_name_blocks(pinned, failing, target):
    """A sitecustomize.py in site-packages that compiles its patch under the
    file name of a frozen module (functions from '<...>' had been passed
    over), removes itself from sys.modules and deletes its files after it
    ran: the patch's function is none of the code that module was frozen with."""
    planted = venvcopy.site_of(pinned) / "sitecustomize.py"
    planted.write_text(VANISHING)
    res = run_in(pinned, failing, target)
    assert not planted.exists()  # it ran, and removed itself
    assert_not_ready_naming(res, target, "function _quiet.<locals>.from_item_and_call (module "
                            "importlib._bootstrap_external, code named '<frozen importlib._bootstrap_external>') "
                            "is none of the code its frozen module was built with")
    assert any("sys.modules['sitecustomize'] is another module ('sys')" in l for l in res.outlines)


def forge_hash_pyc(cached: Path, source: Path, forged_source: str) -> None:
    code = compile(forged_source, str(source), "exec", dont_inherit=True)
    cached.parent.mkdir(parents=True, exist_ok=True)
    flags = 0b11  # hash-based, check_source
    cached.write_bytes(importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little") + b"\x00" * 8
                       + marshal.dumps(code))



def test_hash_based_caches_never_checked_never_reach_the_run(pinned, failing, target):
    """`python --check-hash-based-pycs never` runs a checked hash-based cache
    whose hash does not match its source (the judge took a mismatch for
    'not used'): the clean start (launch.py) leaves the option out, so the
    forged cache is checked, never run, and the verdict is the project's."""
    site = venvcopy.site_of(pinned)
    source, forged = forged_reports(site)
    cached = site / f"_pytest/__pycache__/reports.{sys.implementation.cache_tag}.pyc"
    forge_hash_pyc(cached, source, forged)
    res = failing.run(str(pinned), "--check-hash-based-pycs", "never", "-mpytest",
                      f"--basetemp={failing.path / 'runpytest-0'}", "acceptance/",
                      "--inventory", str(target.inventory), timeout=600)
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1", "\n".join(res.outlines[-30:])
    assert not os.path.lexists(target.marker) and res.ret != 0


def hostile_base(base: Path) -> None:
    real = Path(sys.base_prefix)
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (base / "bin").mkdir(parents=True)
    exe = Path(os.path.realpath(sys.executable))
    (base / "bin" / exe.name).symlink_to(exe)
    (base / "bin" / ver).exists() or (base / "bin" / ver).symlink_to(exe)
    lib = base / "lib" / ver
    lib.mkdir(parents=True)
    for entry in (real / "lib" / ver).iterdir():
        if entry.name in ("site-packages", "lib-dynload", "sitecustomize.py"):
            continue
        (lib / entry.name).symlink_to(entry)
    (lib / "site-packages").mkdir()
    dyn = lib / "lib-dynload"
    dyn.mkdir()
    for entry in (real / "lib" / ver / "lib-dynload").iterdir():
        (dyn / entry.name).symlink_to(entry)
    (lib / "sitecustomize.py").write_text(QUIET_PATCH.replace("sys.modules.pop(__name__, None)", ""))  # stays



def test_a_virtualenv_whose_home_is_another_standard_library_blocks(pinned, failing, target, safe_dir):
    """pyvenv.cfg's home names a directory made to look like an installation
    (the real standard library linked, plus a sitecustomize.py): the standard
    library must be the running interpreter's own installation's."""
    base = safe_dir / "base"
    hostile_base(base)
    cfg = pinned.parent.parent / "pyvenv.cfg"
    lines = [f"home = {base / 'bin'}" if l.startswith("home") else l for l in cfg.read_text().splitlines()]
    cfg.write_text("\n".join(lines) + "\n")
    res = run_in(pinned, failing, target)
    line = last_line(res)
    assert line.startswith("NOT READY: ") and "SUITE-3" in line, "\n".join(res.outlines[-30:])
    assert any(f"the standard library is taken from {base}" in l for l in res.outlines), "\n".join(res.outlines[-40:])
    assert not os.path.lexists(target.marker)


def forge_rewrite_cache(source: Path, text: str, rewritten: bool = False) -> Path:
    """pytest's assertion-rewriting cache beside `source` as pytest would load
    it (its header holds the source's hash) but holding the code of `text`
    (`rewritten`: pytest's own rewrite of it, so its functions are the rewrite's)."""
    import _pytest.assertion.rewrite as rw
    from pty_acceptance.gate.rewriting import assertion_rewriter
    cached = source.parent / "__pycache__" / (source.stem + rw.PYC_TAIL)
    cached.parent.mkdir(exist_ok=True)
    code = (assertion_rewriter().rewrite(text.encode(), str(source)) if rewritten
            else compile(text, str(source), "exec", dont_inherit=True))
    cached.write_bytes(importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00"
                       + importlib.util.source_hash(source.read_bytes())[:8] + marshal.dumps(code))
    return cached


def test_a_forged_assertion_rewriting_cache_of_a_test_module_blocks(failing, target):
    """A cache in acceptance/__pycache__ with the test module's source hash
    and the code of a module whose failing test passes: pytest checks the
    hash, never the code; the gate compares it with pytest's rewrite before
    pytest imports it, and refuses the start."""
    source = failing.path / "acceptance/test_all.py"
    cached = forge_rewrite_cache(source, PASSING)
    res = failing.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory))
    assert_refused_at_start(res, target, f"its assertion-rewriting cache {cached} (which pytest runs for {source}) "
                            "holds other code than pytest's rewrite of that source")


def test_a_forged_assertion_rewriting_cache_that_removes_itself_blocks(failing, target):
    """The same forged cache, its first statement removing the cache file (a
    blind red team's second pass: at the decision there was no cache left to
    compare, READY): the functions that ran are compared with pytest's rewrite
    of their source, whatever they were loaded from."""
    import _pytest.assertion.rewrite as rw
    source = failing.path / "acceptance/test_all.py"
    cached = source.parent / "__pycache__" / ("test_all" + rw.PYC_TAIL)
    forge_rewrite_cache(source, f"import os as _os\ntry:\n    _os.unlink({str(cached)!r})\nexcept OSError:\n"
                                f"    pass\n" + PASSING)
    res = failing.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory))
    assert cached.exists()  # judged before pytest imported it: it never ran (a third pass's fix);
    # one placed after that judgement is named at the decision by its functions, which are
    # compared with pytest's rewrite of their source whatever they were loaded from
    assert_refused_at_start(res, target, f"its assertion-rewriting cache {cached} (which pytest runs for "
                            f"{source}) holds other code than pytest's rewrite of that source")


def test_a_genuine_assertion_rewriting_cache_is_what_ran(failing, target, tmp_path):
    """The control: the cache pytest itself writes for the test module (a
    pytest run with bytecode written, elsewhere, on the same source), then
    loaded by the run: its one failure only."""
    import _pytest.assertion.rewrite as rw
    source = failing.path / "acceptance/test_all.py"
    elsewhere = tmp_path / "rw"
    elsewhere.mkdir()
    shutil.copy2(source, elsewhere / "test_all.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_all.py"], cwd=elsewhere,
                   env=env, capture_output=True, timeout=120)
    written = elsewhere / "__pycache__" / ("test_all" + rw.PYC_TAIL)
    assert written.exists(), "pytest wrote no cache"
    cached = source.parent / "__pycache__" / written.name
    cached.parent.mkdir(exist_ok=True)
    shutil.copy2(written, cached)
    res = failing.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory))
    assert last_line(res) == "NOT READY: 1 blockers: OWN-1", "\n".join(res.outlines[-30:])
    from pty_acceptance.gate.rewriting import assertion_rewriter
    assert loaded_code.rewritten_pyc_problem(str(source), assertion_rewriter()) is None
    assert "was not given" in loaded_code.rewritten_pyc_problem(str(source), None)


# ------------------------------------------------------------ the rules
def test_a_cached_file_that_matches_its_source_is_what_ran(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")
    cached = tmp_path / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"
    forge_pyc(source, cached, source.read_text())
    assert loaded_code.pyc_problem(str(source), str(cached)) is None
    forge_pyc(source, cached, "X = 2\n")
    assert "holds other code" in loaded_code.pyc_problem(str(source), str(cached))
    os.utime(source, (0, 0))  # stale: the interpreter compiles the source instead
    assert loaded_code.pyc_problem(str(source), str(cached)) is None


def test_places_of_the_lab_process():
    p = loaded_code.places(REPO, [])
    assert p.kind(str(REPO / "acceptance/pty_acceptance/gate/gate.py")) == "checkout"
    assert p.kind(str(REPO / "conftest.py")) == "checkout"
    assert p.kind(str(REPO / "tests/conftest.py")) == "checkout-other"
    assert p.kind(os.path.realpath(subprocess.__file__)) == "stdlib"
    assert p.kind(str(venvcopy.lab_site() / "pytest/__init__.py")) == "site"
    assert p.kind(os.path.join(p.stdlib_dirs[0], "site-packages/x.py")) is None
    assert p.kind("/tmp/x.py") is None


# ---------------------------------------------------- a blind red team's third pass: self-removing forged caches
def test_a_forged_rewrite_cache_patching_from_a_string_and_removing_itself(failing, target):
    """The cache holds pytest's rewrite of the real source with statements
    appended at its end (the test functions' code is exactly the rewrite's):
    they patch pytest's report with code compiled as '<string>' (functions
    named '<...>' other than '<frozen ...>' are not judged) and delete the
    cache, so there is no cache left to compare with at the decision."""
    import _pytest.assertion.rewrite as rw
    source = failing.path / "acceptance/test_all.py"
    cached = source.parent / "__pycache__" / (source.stem + rw.PYC_TAIL)
    forge_rewrite_cache(source, ONE_FAILING
                        + f"\nimport os as _os\nexec(compile({QUIET!r}, '<string>', 'exec'), {{}})\n"
                        f"try:\n    _os.unlink({str(cached)!r})\nexcept OSError:\n    pass\n", rewritten=True)
    res = failing.runpytest_subprocess("acceptance/", "--inventory", str(target.inventory))
    assert cached.exists(), "the forged cache ran"
    assert_refused_at_start(res, target, "holds other code than pytest's rewrite of that source")


PATCH_IN_MODULE = QUIET + "del _quiet\n"


def test_a_forged_pyc_of_an_early_imported_suite_module_that_removes_itself(failing, target):
    """host/terminal.py is imported by the early guard through the
    interpreter's own loader (not pytest's rewriting hook, which compares
    functions with its rewrite): its bytecode cache beside the source, with
    the source's mtime and size, holds terminal.py's code plus a patch of
    pytest's report (functions whose file is terminal.py, a module in
    sys.modules, are not judged one by one) and deletes itself."""
    from pty_acceptance.host import terminal

    source = Path(terminal.__file__).resolve()
    cached = Path(importlib.util.cache_from_source(str(source)))
    forged = source.read_text() + PATCH_IN_MODULE + (
        f"\nimport os as _os\ntry:\n    _os.unlink({str(cached)!r})\nexcept OSError:\n    pass\n")
    st = source.stat()
    code = compile(forged, str(source), "exec", dont_inherit=True)
    saved = cached.read_bytes() if cached.exists() else None
    cached.parent.mkdir(exist_ok=True)
    cached.write_bytes(importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF,
                                                                  st.st_size & 0xFFFFFFFF) + marshal.dumps(code))
    try:
        done = start(failing, [PYTEST, *suite_args(target)])
        # it deleted itself in the start before the clean start (the early guard imported it there);
        # the clean start compiled terminal.py anew
        ran = not cached.exists() or marshal.dumps(code) not in cached.read_bytes()
    finally:
        if cached.exists():
            cached.unlink()
        if saved is not None:
            cached.write_bytes(saved)
    assert ran, "the forged cache did not run"
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    assert lines[-1].startswith("NOT READY: "), said(done)
    assert not os.path.lexists(target.marker), "a marker was written"
