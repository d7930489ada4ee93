"""Compute the values inventories/reference.yml must carry, on the build host.

    python3 tests/reference/expected.py [--write]

Builds the three binaries twice from two different copies of
tests/reference/src/supervisor (outside any git work tree, so Go stamps no VCS
data) with the BUILD-1 command and checks that the two sets are identical;
computes the source manifest exactly as deploy.sh does, but from the repo's
files under the deployed absolute paths; makes the code tree's one commit the
way deploy.sh does and reads its revision; hashes the bun deploy.sh installs
(npm @oven/bun-linux-x64, tests/refhost/npmdist.py's cache) and the smoke
harness (PLUGIN-1's pins). --write updates the values in
inventories/reference.yml in place. Needs /usr/bin/go (bookworm golang-go)
and git. Imports nothing from acceptance/.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from refhost import nodedist  # noqa: E402  (the harness's SEA build: same bytes deploy.sh installs)
from refhost import npmdist  # noqa: E402  (bun, pinned and integrity-checked: same bytes deploy.sh installs)

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
INV = REPO / "inventories" / "reference.yml"
PILOT = "/home/byk/.local/share/opencode-v2-pilot"
CODE = "/home/byk/Code/opencode-v2-pilot"
BINS = ("supervisor", "launcher", "client")
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "opencode reference", "GIT_AUTHOR_EMAIL": "reference@opencode.invalid",
    "GIT_COMMITTER_NAME": "opencode reference", "GIT_COMMITTER_EMAIL": "reference@opencode.invalid",
    "GIT_AUTHOR_DATE": "2026-09-08T08:00:00+00:00", "GIT_COMMITTER_DATE": "2026-09-08T08:00:00+00:00",
}


def copy_tree(src: pathlib.Path, dst: pathlib.Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    for p in dst.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


def build(tmp: pathlib.Path, sub: str) -> dict[str, str]:
    src = tmp / sub / "supervisor"
    copy_tree(HERE / "src" / "supervisor", src)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(tmp / sub / "home"),
           "GOCACHE": str(tmp / sub / "cache"), "GOPATH": str(tmp / sub / "gopath"),
           "GOFLAGS": "-mod=mod", "GOPROXY": "off",
           "CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": "amd64"}
    out = {}
    for n in BINS:
        subprocess.run(["go", "build", "-trimpath", "-ldflags=-buildid=", "-o", f"bin/opencode-pty-{n}",
                        f"./cmd/{n}"], cwd=src, env=env, check=True)
        out[n] = hashlib.sha256((src / "bin" / f"opencode-pty-{n}").read_bytes()).hexdigest()
    return out


def manifest() -> tuple[str, str]:
    """(listing text, sha256) with deployed paths mapped onto repo files."""
    m: dict[str, pathlib.Path] = {}
    sup = HERE / "src" / "supervisor"
    for p in sup.rglob("*.go"):
        m[f"{PILOT}/supervisor/{p.relative_to(sup)}"] = p
    for p in (HERE / "tree/code/packages/plugin/src").glob("*.ts"):
        if p.is_file():
            m[f"{CODE}/packages/plugin/src/{p.name}"] = p
    for f in ("go.mod", "go.sum", "opencode-pty.slice", "opencode-pty-supervisor.service"):
        m[f"{PILOT}/supervisor/{f}"] = sup / f
    for f in ("config/opencode/plugins/pty.ts", "config/opencode/plugins/pty-transport.ts",
              "config/opencode/tsconfig.json", "config/opencode/package.json",
              "config/opencode/bun.lock", "opencode-v2.service"):
        m[f"{PILOT}/{f}"] = HERE / "tree/pilot" / f
    for f in ("packages/plugin/package.json", "bun.lock"):
        m[f"{CODE}/{f}"] = HERE / "tree/code" / f
    lines = []
    for path in sorted(m, key=lambda s: s.encode()):
        lines.append(f"{hashlib.sha256(m[path].read_bytes()).hexdigest()}  {path}\n")
    text = "".join(lines)
    return text, hashlib.sha256(text.encode()).hexdigest()


def revision(tmp: pathlib.Path) -> str:
    d = tmp / "code"
    copy_tree(HERE / "tree" / "code", d)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8", **GIT_ENV}
    subprocess.run(["git", "-c", "init.defaultBranch=main", "init", "-q", "."], cwd=d, env=env, check=True)
    subprocess.run(["git", "add", "-A"], cwd=d, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "--no-gpg-sign", "-m", "opencode-v2-pilot reference fixture"],
                   cwd=d, env=env, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=d, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="opencode-reference-") as t:
        tmp = pathlib.Path(t)
        a = build(tmp, "a")
        b = build(tmp, "b/deeper/elsewhere")
        rev = revision(tmp)
    text, msha = manifest()
    sea = nodedist.sea_sha256(HERE / "src/candidate/server.js")
    bun = hashlib.sha256(npmdist.ensure(npmdist.pin("@oven/bun-linux-x64")).read_bytes()).hexdigest()
    harness = hashlib.sha256((HERE / "tree/pilot/pty-smoke/pty-plugin-smoke.ts").read_bytes()).hexdigest()
    go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
    print(go)
    print(text, end="")
    print(f"revision={rev}\nsource_manifest_sha256={msha}")
    print(f"runtime: {sea}\nbun: {bun}\nharness: {harness}")
    for n in BINS:
        print(f"{n}: {a[n]}" + ("" if a[n] == b[n] else f" DIFFERS from second build {b[n]}"))
    if a != b:
        print("NOT REPRODUCIBLE", file=sys.stderr)
        return 1
    if "--write" in sys.argv:
        s = INV.read_text()
        s = re.sub(r'(revision: ")[0-9a-f]*(")', rf"\g<1>{rev}\2", s)
        s = re.sub(r'(source_manifest_sha256: ")[0-9a-f]*(")', rf"\g<1>{msha}\2", s)
        for n in BINS:
            s = re.sub(rf'({n}: {{path: [^,]*, sha256: ")[0-9a-f]*(")', rf"\g<1>{a[n]}\2", s)
        s = re.sub(r'(\n *sha256: ")[0-9a-f]*(")', rf"\g<1>{sea}\2", s)
        s = re.sub(r'(\n *bun_sha256: ")[0-9a-f]*(")', rf"\g<1>{bun}\2", s)
        s = re.sub(r'(\n *harness_sha256: ")[0-9a-f]*(")', rf"\g<1>{harness}\2", s)
        INV.write_text(s)
        print(f"updated {INV}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
