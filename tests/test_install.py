"""The installed package stands alone (issue 32 item 1): a wheel built from
the checkout, installed with its dependencies into a fresh venv, run from a
directory that is no checkout. Every command either works (the checklist
and the inventories are package data: `report`, `verify-marker`,
`preflight`, `inventory check`; `verify-statement`, `fleet-summary`,
`source-manifest` and `--version` need nothing else) or says in one line that
it needs a checkout (`node-ids`, `reference`, `mutants`, `bench`), exit
status 4. No traceback, and nothing looked for beside site-packages."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO
from reportsuite import fixture_as_suite, suite_of
from signkeys import openssl_key

# what a wheel is built from: the sdist's files (MANIFEST.in): the package and every file of the suite
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", "README.md", "ROOT-ACCEPTANCE.md",
           "inventories", "acceptance", "conftest.py", "requirements/target.txt")
SHIPPED = ("ROOT-ACCEPTANCE.md", "inventories/target.yml", "inventories/reference.yml", "acceptance/node-ids.txt",
           "suite-tree.txt")
EARLY_PTH = "pty_acceptance_early.pth"  # gate/early.py's start-up file
# the start-up file as the suite distribution's RECORD lists it, and what it holds
RECORDED_PTH = ("import base64, hashlib, importlib.metadata as m; "
                "d = m.distribution('opencode-pty-acceptance'); "
                f"(f,) = [f for f in d.files if str(f) == {EARLY_PTH!r}]; data = f.locate().read_bytes(); "
                "assert f.hash.mode == 'sha256' and f.size == len(data), f; "
                "assert f.hash.value == base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode(); "
                "print(data.decode(), end='')")
NEEDS_CHECKOUT = ("node-ids", "reference", "mutants", "bench")
DEADLINE = 600


def _run(argv, cwd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=DEADLINE, check=False, **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """bin/ of a fresh venv holding the wheel (and its dependencies, from the index pip is configured with)."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    for rel in SOURCES:
        if (REPO / rel).is_dir():
            shutil.copytree(REPO / rel, src / rel, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / rel, src / rel)
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "wheels", src], cwd=tmp)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp / "wheels").glob("opencode_pty_acceptance-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for rel in SHIPPED:
        assert f"pty_acceptance/shipped/{rel}" in names, f"the wheel does not carry {rel}"
    # what a re-render checks a report's cases against (SUITE-2): the tree it was built from, its node-id list
    shipped_tree = zipfile.ZipFile(wheel).read("pty_acceptance/shipped/suite-tree.txt").decode()
    assert shipped_tree == suite_of().tree + "\n"
    assert EARLY_PTH in names, "the wheel does not carry the early guard's start-up file at its root"
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", venv], cwd=tmp)
    assert made.returncode == 0, made.stderr
    done = _run([venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
                cwd=tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin"


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """A working directory that is no checkout."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    return d


BESIDE_SITE_PACKAGES = re.compile(r"/lib/python3\.\d+/(?:ROOT-ACCEPTANCE\.md|inventories/|acceptance/|tests/)")


def _clean(done: subprocess.CompletedProcess) -> None:
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said
    assert not BESIDE_SITE_PACKAGES.search(said), f"a file looked for beside site-packages: {said}"


def test_the_metadata_is_complete(installed, elsewhere):
    meta = _run([installed / "python", "-c", "import importlib.metadata as m, json; "
                 "d = m.metadata('opencode-pty-acceptance'); "
                 "print(json.dumps({k: d.get_all(k) for k in set(d.keys())}))"], cwd=elsewhere)
    assert meta.returncode == 0, meta.stderr
    d = json.loads(meta.stdout)
    assert d["Description-Content-Type"] == ["text/markdown"]  # the readme
    assert d["License-Expression"] and d["License-File"] == ["LICENSE"]
    assert d["Author"], d.keys()
    assert "Programming Language :: Python :: 3.11" in d["Classifier"]
    assert d["Requires-Python"] == [">=3.11"]


@pytest.mark.parametrize("how", ["the wheel", "the checkout's editable install"])
def test_the_early_guards_start_up_file_is_listed_and_hashed_in_the_record(installed, elsewhere, how):
    """gate/early.py's start-up file at the top of site-packages, in the suite
    distribution's RECORD with the hash of what is there (decision/loaded_code.py
    judges every .pth so), whether installed from a wheel or `pip install -e .`
    (tools/setup.sh, tools/setup-target.sh); one import line, and nothing
    else of the early guard runs in a process that is no pytest run."""
    python = installed / "python" if how == "the wheel" else Path(sys.executable).parent / "python"
    done = _run([python, "-c", RECORDED_PTH], cwd=elsewhere)
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("import ") and "pty_acceptance.gate.early" in line, line
    loaded = _run([python, "-c", "import sys; print(sorted(m for m in sys.modules if m.startswith('pty_')))"],
                  cwd=elsewhere)
    assert loaded.stdout.strip() == "['pty_acceptance', 'pty_acceptance.gate', 'pty_acceptance.gate.early']", \
        loaded.stdout + loaded.stderr


def test_version(installed, elsewhere):
    done = _run([installed / "pty-acceptance", "--version"], cwd=elsewhere)
    assert done.returncode == 0 and done.stdout.startswith("pty-acceptance 0."), done.stdout + done.stderr
    assert "installed package" in done.stdout and done.stdout.count("\n") == 1


@pytest.mark.parametrize("command", NEEDS_CHECKOUT)
def test_a_command_that_needs_a_checkout_says_so_in_one_line(installed, elsewhere, command):
    done = _run([installed / "pty-acceptance", command], cwd=elsewhere)
    _clean(done)
    assert done.returncode == 4 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"{command}: needs a checkout of the project")


def test_report_renders_with_the_checklist_the_package_carries(installed, elsewhere):
    """And checks the report's cases against the node-id list it carries, of
    the suite-tree it was built from (SUITE-2): a READY report of that suite
    is READY; one with a case deleted, or of another suite-tree, is not."""
    ready = fixture_as_suite("ready", elsewhere / "in")
    done = _run([installed / "pty-acceptance", "report", ready, "--out-dir", elsewhere / "out"], cwd=elsewhere)
    _clean(done)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (elsewhere / "out").iterdir()) == ["ready.html", "ready.intoto.json"]
    other = elsewhere / "other.xml"
    other.write_bytes(ready.read_bytes().replace(suite_of().tree.encode(), b"0" * 64 + b"  1 files"))
    done = _run([installed / "pty-acceptance", "report", other, "--out-dir", elsewhere / "other"], cwd=elsewhere)
    _clean(done)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"blocker: SUITE-2: read back, this report is not READY: it names suite-tree {'0' * 64}  1 files, "
            f"not {suite_of().tree} of the installed package ") in done.stdout, done.stdout


def test_the_inventory_commands_read_the_inventory_the_package_carries(installed, elsewhere):
    marker = _run([installed / "pty-acceptance", "verify-marker"], cwd=elsewhere)
    _clean(marker)
    assert marker.returncode == 1 and marker.stdout.count("\n") == 1
    assert marker.stdout.startswith("REFUSED inventory: ") and "shipped/inventories/target.yml" in marker.stdout
    assert "FILL-IN" in marker.stdout and "RUNTIME-1" in marker.stdout
    for argv, last in ((["preflight"], "PREFLIGHT "), (["inventory", "check"], "inventory check: ")):
        done = _run([installed / "pty-acceptance", *argv], cwd=elsewhere)
        _clean(done)
        assert done.stdout.splitlines()[-1].startswith(last), done.stdout + done.stderr


def test_the_commands_that_need_nothing_else(installed, elsewhere, safe_dir, target):
    pa = installed / "pty-acceptance"
    manifest = _run([pa, "source-manifest", "--pilot-root", target.pilot, "--code-root", target.code], cwd=elsewhere)
    _clean(manifest)
    assert manifest.returncode == 0 and manifest.stdout.strip() == target.manifest, manifest.stdout + manifest.stderr
    keys = safe_dir / "keys"
    keys.mkdir(mode=0o700)
    key, pub = openssl_key(keys)
    signed = _run([pa, "report", fixture_as_suite("ready", elsewhere / "in"), "--out-dir", elsewhere / "out",
                   "--sign-key", key], cwd=elsewhere)
    _clean(signed)
    assert signed.returncode == 0, signed.stdout + signed.stderr
    verified = _run([pa, "verify-statement", elsewhere / "out/ready.intoto.dsse.json", "--pubkey", pub],
                    cwd=elsewhere)
    _clean(verified)
    assert verified.returncode == 0 and verified.stdout.splitlines()[-1].startswith("VERIFIED (openssl"), \
        verified.stdout + verified.stderr
    (elsewhere / "fleet").mkdir()
    summary = _run([pa, "fleet-summary", elsewhere / "fleet", "--run-id", "20261206T000000Z-1", "pilot-1"],
                   cwd=elsewhere)
    _clean(summary)
    assert summary.returncode == 1 and summary.stdout == "pilot-1: UNREACHABLE/ERROR: did not report " \
        "(no result came back)\n", summary.stdout + summary.stderr


def test_the_checkout_is_still_its_own_home():
    """In the checkout (the editable install) the checkout's own files are
    read, never a copy: there is none in the tree."""
    from pty_acceptance import cli
    assert cli.IN_CHECKOUT and cli.CHECKLIST == REPO / "ROOT-ACCEPTANCE.md"
    assert cli.DEFAULT_INVENTORY == REPO / "inventories/target.yml"
    assert not (REPO / "acceptance/pty_acceptance/shipped").exists()
    assert os.path.isfile(REPO / "setup.py")
