"""A virtualenv of the lab's pinned distributions, for the tests that plant
something in one (tests/test_loaded_code.py): `python -m venv --without-pip`,
then every distribution requirements/target.txt pins, and the suite's own
editable install, copied from the lab's .venv file by file as their RECORDs
list them (their bytes, modes and times: the RECORD hashes and the cached
bytecode stay valid). Built once per session under /run (root-owned all the
way up: the gate's OWN-1 walk judges the virtualenv), then copied per test."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pty_acceptance.spec import pins

from conftest import REPO

SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"


def lab_site() -> Path:
    return Path(sys.prefix) / SITE


def build(dest: Path) -> Path:
    """A fresh virtualenv at `dest` holding the pinned distributions; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    site = dest / SITE
    pinned = pins.load(REPO)
    src = lab_site()
    for dist in importlib.metadata.distributions(path=[str(src)]):
        key = pins.normalize(dist.metadata["Name"])
        if key not in pinned and key != pins.DISTRIBUTION:
            continue
        for f in dist.files or ():
            rel = os.path.normpath(str(f))
            if rel.startswith(".."):
                continue  # scripts in bin/: never loaded by the gate's runs
            here, there = src / rel, site / rel
            if here.exists():
                there.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(here, there)
    return dest / "bin/python"


def copy(template: Path, dest: Path) -> Path:
    """A copy of a built virtualenv at the same depth (its scripts name their
    interpreter by path: only bin/python is used here)."""
    shutil.copytree(template, dest, symlinks=True)
    cfg = dest / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace(str(template), str(dest)))
    return dest / "bin/python"


def site_of(python: Path) -> Path:
    return python.parent.parent / SITE
