"""The reference host's virtualenv, made the way a target's own setup makes it
(tools/setup-target.sh): `python3 -m venv` without the system's
site-packages, then exactly the distributions requirements/target.txt pins,
from a wheelhouse tools/wheelhouse.sh built on this machine (pip
--require-hashes). The gate runs only on those (decision/loaded_code.py:
every module from the checkout, a pinned distribution whose files match its
RECORD, or the standard library; a virtualenv that includes the system's
site-packages, as the cached tree's own venv does, earns no marker).

Built once per tree and pin set, under CACHE_DIR, by a throwaway
systemd-nspawn on the tree (--volatile=overlay: the shared tree is never
written), at GUEST_VENV's path (a venv names its own path in its scripts);
then bound read-only over the tree's venv at GUEST_VENV in every reference
host (binds()). The wheels are cached too (WHEELS_DIR, one directory per pin
set and Python version); fetching them is the one step that needs the network.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

from .common import log
from .tree import CACHE_DIR as TREES_DIR, GUEST_VENV, nspawn_argvs

RECIPE_VERSION = "pinned-venv-1"
CACHE_DIR = TREES_DIR.parent / "venvs"
WHEELS_DIR = TREES_DIR.parent / "wheelhouse"
PINS = "requirements/target.txt"
LOCK = ".ptyacc-venv.lock"


def python_version(tree: pathlib.Path) -> str:
    """The tree's python3, as "3.11" (its /usr/bin/python3 link)."""
    name = os.readlink(tree / "usr/bin/python3")
    return name.removeprefix("python")


def pins_digest(repo: pathlib.Path) -> str:
    return hashlib.sha256((repo / PINS).read_bytes()).hexdigest()[:16]


def venv_key(repo: pathlib.Path, tree: pathlib.Path) -> str:
    h = hashlib.sha256()
    for part in (RECIPE_VERSION, tree.name, (repo / PINS).read_text(), GUEST_VENV):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    log("$ " + " ".join(argv))
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, env=env, timeout=1200)


def ensure_wheels(repo: pathlib.Path, version: str) -> pathlib.Path:
    """The pinned wheels for CPython `version` (tools/wheelhouse.sh, each
    checked against its pinned SHA-256)."""
    done = WHEELS_DIR / f"{pins_digest(repo)}-py{version}"
    if done.is_dir():
        return done
    tmp = done.with_name(done.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(["sh", str(repo / "tools/wheelhouse.sh"), str(tmp), version], env=dict(os.environ, PYTHON=sys.executable))
    tmp.rename(done)
    return done


def ensure(repo: pathlib.Path, tree: pathlib.Path) -> pathlib.Path:
    """The pinned virtualenv for `tree` (built if missing); its host directory."""
    repo, tree = pathlib.Path(repo).resolve(), pathlib.Path(tree).resolve()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(CACHE_DIR, 0o755)
    done = CACHE_DIR / f"{tree.name}-{venv_key(repo, tree)}"
    with open(CACHE_DIR / LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_dir():
            return done
        _prune(tree.name, keep=done.name)
        wheels = ensure_wheels(repo, python_version(tree))
        tmp = done.with_name(done.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o755)
        script = (f"/usr/bin/python3 -m venv {GUEST_VENV} && {GUEST_VENV}/bin/python -m pip install -q "
                  "--disable-pip-version-check --no-input --no-index --find-links /opt/wheelhouse "
                  f"--only-binary=:all: --require-hashes -r /opt/pins/target.txt")
        log(f"building the pinned virtualenv {done} in {tree}")
        _run(["systemd-nspawn", "--quiet", f"--directory={tree}", "--volatile=overlay", "--private-network",
              "--register=no", "--keep-unit", "--setenv=PIP_NO_CACHE_DIR=1",
              f"--bind={tmp}:{GUEST_VENV}", f"--bind-ro={wheels}:/opt/wheelhouse",
              f"--bind-ro={repo / 'requirements'}:/opt/pins", "/bin/sh", "-ec", script])
        subprocess.run(["chmod", "-R", "go-w", str(tmp)], check=True)
        tmp.rename(done)
        return done


def _prune(tree: str, keep: str) -> None:
    """This tree's virtualenvs of other pin sets, and crashed builds, removed
    unless a machine has one bound (its path in a running nspawn's argv);
    other trees' stay."""
    in_use = {a.split("=", 1)[1].split(":", 1)[0] for argv in nspawn_argvs() for a in argv
              if a.startswith("--bind")}
    for entry in CACHE_DIR.iterdir():
        if not entry.name.startswith(tree + "-") or entry.name == keep or str(entry) in in_use:
            continue
        log(f"removing stale virtualenv {entry}")
        shutil.rmtree(entry, ignore_errors=True)


def binds(repo: pathlib.Path, tree: pathlib.Path) -> list[tuple[str, str, bool]]:
    """(host, guest, read-only): the pinned virtualenv over the tree's own."""
    return [(str(ensure(repo, tree)), GUEST_VENV, True)]
