"""Build and cache the reference host's root tree (debootstrap + a venv), one
per Debian release (RELEASES).

The cache key is a hash over the recipe, the release included, so changing
the package list or the requirements builds a new tree and removes the old
one of that release; the current tree of every release stays cached side by
side (CACHE_DIR/<key>).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import time

RECIPE_VERSION = "refhost-tree-1"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = (
    "systemd,systemd-sysv,dbus,procps,python3,python3-venv,python3-pip,"
    "util-linux,strace,python3-jeepney,golang-go,git,iproute2,"
    "ca-certificates,libpam-systemd,libatomic1,"
    # the Go supervisor's dependencies, vendored at deploy (tests/reference/vendor.py)
    "golang-dbus-dev,golang-github-coreos-go-systemd-dev,golang-golang-x-sys-dev"
)
# The releases a reference host can be booted from (debootstrap's suite names),
# with what each brings that the reference deployment and the suite meet.
# bookworm stays the default (docs/reference-host.md: "The releases").
RELEASES = {
    "bookworm": "Debian 12: systemd 252, Go 1.19, Python 3.11",
    "trixie": "Debian 13: systemd 257, Go 1.24, Python 3.13",
}
DEFAULT_RELEASE = "bookworm"
CACHE_DIR = pathlib.Path("/var/cache/opencode-pty-acceptance/trees")
REQUIREMENTS = pathlib.Path(__file__).with_name("requirements-host.txt")
GUEST_VENV = "/opt/pty-acceptance/venv"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BUILD_LOCK = ".ptyacc-build.lock"
COMPLETE_MARK = ".ptyacc-tree-complete"


def log(msg: str) -> None:
    print(f"[refhost] {msg}", file=sys.stderr, flush=True)


class UnknownRelease(ValueError):
    pass


def check_release(release: str) -> str:
    if release not in RELEASES:
        raise UnknownRelease(f"unknown release {release!r}: one of {sorted(RELEASES)}")
    return release


def recipe_key(release: str = DEFAULT_RELEASE) -> str:
    """The tree's cache key. The release is debootstrap's suite, hashed where the
    one suite was (bookworm's key is the one it always had)."""
    h = hashlib.sha256()
    for part in (RECIPE_VERSION, check_release(release), MIRROR, PACKAGES, REQUIREMENTS.read_text()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def _remove(path: pathlib.Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path)


def _mounts_under(path: pathlib.Path) -> list[str]:
    prefix = str(path) + "/"
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return [p for p in points if p == str(path) or p.startswith(prefix)]


def _remove_tmp(path: pathlib.Path) -> None:
    """rmtree, but first unmount whatever a crashed debootstrap left mounted inside."""
    for point in sorted(_mounts_under(path), key=len, reverse=True):
        log(f"unmounting leftover {point}")
        subprocess.run(["umount", "-l", point], check=False)
    if _mounts_under(path):
        raise RuntimeError(f"still mounted under {path}: {_mounts_under(path)}")
    if path.exists() or path.is_symlink():
        _remove(path)


def nspawn_argvs() -> list[list[str]]:
    """The command line of every running systemd-nspawn (what a machine has in use)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "systemd-nspawn":
            out.append(argv)
    return out


def _booted_trees() -> set[str]:
    """--directory= of every running systemd-nspawn (a tree in use must not be removed)."""
    return {a.split("=", 1)[1].rstrip("/") for argv in nspawn_argvs() for a in argv if a.startswith("--directory=")}


def _prune() -> None:
    """Remove crashed builds (*.tmp) and trees built from recipes no release has
    now, unless booted; every release's current tree stays."""
    keep = {recipe_key(r) for r in RELEASES} | {BUILD_LOCK}
    in_use = _booted_trees()
    for entry in CACHE_DIR.iterdir():
        if entry.name in keep or entry.name.startswith(".#"):  # .#*.lck: nspawn's image locks
            continue
        if str(entry) in in_use:
            log(f"keeping stale tree {entry}: a systemd-nspawn is running on it")
            continue
        log(f"removing stale cache entry {entry}")
        _remove_tmp(entry)


def _sh(argv: list[str], env: dict[str, str] | None = None) -> None:
    log("$ " + " ".join(argv))
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, env=env)
    log(f"  ({time.monotonic() - t0:.0f} s)")


def _build(tmp: pathlib.Path, release: str) -> None:
    _sh(["debootstrap", "--variant=minbase", f"--include={PACKAGES}",
         release, str(tmp), MIRROR])
    resolv = tmp / "etc/resolv.conf"
    had_resolv = resolv.exists() or resolv.is_symlink()
    if had_resolv:
        resolv.rename(tmp / "etc/resolv.conf.ptyacc-orig")
    shutil.copyfile("/etc/resolv.conf", resolv)
    shutil.copyfile(REQUIREMENTS, tmp / "tmp/requirements-host.txt")
    # HTTPS may pass a TLS-inspecting proxy whose CA only the host trusts.
    shutil.copyfile(HOST_CA_BUNDLE, tmp / "tmp/host-ca.crt")
    try:
        _sh(["chroot", str(tmp), "/usr/bin/python3", "-m", "venv",
             "--system-site-packages", GUEST_VENV])
        # The host's pip configuration (local wheel dirs, certs) is not in the
        # chroot: give pip a clean environment that only knows PyPI.
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
               "PIP_DEFAULT_TIMEOUT": "120", "PIP_NO_CACHE_DIR": "1",
               "PIP_CERT": "/tmp/host-ca.crt"}
        _sh(["chroot", str(tmp), f"{GUEST_VENV}/bin/pip", "install", "--quiet",
             "-r", "/tmp/requirements-host.txt"], env=env)
    finally:
        resolv.unlink()
        if had_resolv:
            (tmp / "etc/resolv.conf.ptyacc-orig").rename(resolv)
        (tmp / "tmp/requirements-host.txt").unlink(missing_ok=True)
        (tmp / "tmp/host-ca.crt").unlink(missing_ok=True)
    (tmp / COMPLETE_MARK).write_text(recipe_key(release) + "\n")


def ensure_tree(release: str = DEFAULT_RELEASE) -> pathlib.Path:
    """Return a finished root tree of `release` for the current recipe, building
    it if needed.

    Holds an exclusive lock on the cache while it works, so concurrent callers
    wait for one build instead of removing each other's."""
    check_release(release)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_tree_locked(release)


def _ensure_tree_locked(release: str) -> pathlib.Path:
    key = recipe_key(release)
    _prune()
    tree = CACHE_DIR / key
    if (tree / COMPLETE_MARK).exists():
        log(f"using cached tree {tree}")
        return tree
    if tree.exists():
        log(f"removing incomplete tree {tree}")
        _remove(tree)
    tmp = CACHE_DIR / f"{key}.tmp"
    log(f"building tree {tree} (debootstrap {release} + venv); this takes a few minutes")
    t0 = time.monotonic()
    try:
        _build(tmp, release)
    except BaseException:
        log(f"tree build failed; removing {tmp}")
        _remove_tmp(tmp)
        raise
    tmp.rename(tree)
    log(f"tree ready in {time.monotonic() - t0:.0f} s: {tree}")
    return tree


if __name__ == "__main__":
    print(ensure_tree(*sys.argv[1:2]))
