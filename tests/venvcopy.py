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


def install_script(python: Path, dist_name: str, script: str) -> Path:
    """bin/`script` of distribution `dist_name` in the virtualenv of `python`,
    as pip installs a console script: the lab's, its first line naming this
    virtualenv's python, and the distribution's RECORD line for it rewritten
    to those bytes (pip writes the RECORD of the script it made)."""
    import base64
    import hashlib
    venv = python.parent.parent
    src = Path(sys.prefix) / "bin" / script
    body = src.read_bytes().split(b"\n", 1)[1]
    dest = venv / "bin" / script
    dest.write_bytes(f"#!{python}\n".encode() + body)
    dest.chmod(0o755)
    data = dest.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    site = venv / SITE
    dist = importlib.metadata.distribution(dist_name)
    record = site / os.path.basename(str(dist._path)) / "RECORD"  # type: ignore[attr-defined]
    rel = os.path.relpath(dest, site)
    lines = [l if l.split(",", 1)[0] != rel else f"{rel},sha256={digest},{len(data)}"
             for l in record.read_text().splitlines()]
    assert f"{rel},sha256={digest},{len(data)}" in lines, f"{record} lists no {rel}"
    record.write_text("\n".join(lines) + "\n")
    return dest
