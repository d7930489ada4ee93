"""Vendor the Go supervisor's dependencies from Debian's packaged sources.

    python3 -I tests/reference/vendor.py SUPDIR

Writes SUPDIR/vendor/ as `go mod vendor` (Go 1.19) would for the modules
SUPDIR/go.mod requires (Go 1.24's consistency check accepts it too), with no
network and no module cache: the sources are this host's golang-*-dev
packages under /usr/share/gocode/src (bookworm's or trixie's; MODULES
names the package of each module; its version must be the one go.mod
requires). As `go mod vendor` does, it

- vendors every package of those modules that the main module's packages
  (their tests included) import, directly or through each other, under any
  build tags (a file tagged `ignore` imports nothing);
- copies of each such package the regular files of its directory but
  `*_test.go`, `go.mod`/`go.sum` (the main module says go >= 1.17) and `.go`
  files tagged `ignore`; no subdirectory that is not itself a vendored
  package (testdata, examples, generators);
- copies LICENSE-like files (metaPrefixes) of the directories between a
  package and its module's root;
- writes vendor/modules.txt: per module `# path version`, `## explicit; go X`
  (X from the module's own go.mod), then its vendored packages, sorted.

The output is deterministic: the tree is removed and written anew, files
0644, directories 0755. With vendor/modules.txt present and go.mod saying
go >= 1.14, Go builds from vendor/ by default (no -mod flag needed).
Standard library only; deploy.sh runs it in the guest, expected.py imports it.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

GOCODE = pathlib.Path("/usr/share/gocode/src")
# module path -> (directory under GOCODE, the Debian package that ships it)
MODULES = {
    "github.com/godbus/dbus/v5": ("github.com/godbus/dbus", "golang-dbus-dev"),
    "github.com/coreos/go-systemd/v22": ("github.com/coreos/go-systemd", "golang-github-coreos-go-systemd-dev"),
    "golang.org/x/sys": ("golang.org/x/sys", "golang-golang-x-sys-dev"),
}
META_PREFIXES = ("AUTHORS", "CONTRIBUTORS", "COPYLEFT", "COPYING", "COPYRIGHT", "LEGAL", "LICENSE",
                 "NOTICE", "PATENTS")


class VendorError(Exception):
    pass


# --- go.mod -------------------------------------------------------------------

def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].strip()


def read_gomod(path: pathlib.Path) -> tuple[str, str | None, dict[str, str]]:
    """(module path, go directive or None, {required module: version})."""
    module, go, req = "", None, {}
    in_req = False
    for raw in path.read_text().splitlines():
        line = _strip_comment(raw)
        if not line:
            continue
        if in_req:
            if line == ")":
                in_req = False
            else:
                mod, ver = line.split()[:2]
                req[mod] = ver
            continue
        words = line.split()
        if words[0] == "module":
            module = words[1].strip('"')
        elif words[0] == "go":
            go = words[1]
        elif words[0] == "require":
            if words[1] == "(":
                in_req = True
            else:
                req[words[1]] = words[2]
    if not module:
        raise VendorError(f"{path}: no module line")
    return module, go, req


def debian_version(package: str) -> str:
    """The upstream version of an installed Debian package ('' if not installed)."""
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Status} ${Version}", package],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    if r.returncode != 0 or "install ok installed" not in r.stdout:
        return ""
    v = r.stdout.rsplit(" ", 1)[-1]
    v = v.split(":", 1)[-1]  # epoch
    return v.rsplit("-", 1)[0] if "-" in v else v  # Debian revision


# --- build constraints (cmd/go/internal/imports with AnyTags) -------------------

def _header(text: str) -> tuple[list[str], str | None]:
    """(the // +build lines that count, the //go:build expression or None): the
    leading run of blank lines and comments, +build lines only before the last
    blank line of it (parseFileHeader)."""
    plus: list[str] = []
    pending: list[str] = []
    go_build = None
    in_star = False
    for raw in text.split("\n"):
        line = raw.strip()
        if in_star:
            if "*/" in line:
                in_star = False
                rest = line.split("*/", 1)[1].strip()
                if rest:
                    break
            continue
        if not line:
            plus += pending
            pending = []
            continue
        if line.startswith("//"):
            if re.match(r"//go:build(\s|$)", line):
                if go_build is not None:
                    return [], "ignore"  # multiple //go:build: an error, not built
                go_build = line[len("//go:build"):].strip()
            elif re.match(r"//\s*\+build(\s|$)", line):
                pending.append(line)
            continue
        if line.startswith("/*"):
            if "*/" not in line[2:]:
                in_star = True
                continue
            if line.split("*/", 1)[1].strip():
                break
            continue
        break
    return plus, go_build


def _eval_go_build(expr: str) -> bool:
    """A //go:build expression with every tag satisfiable but `ignore` (AnyTags)."""
    tokens = re.findall(r"\|\||&&|!|\(|\)|[^\s!()&|]+", expr)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise VendorError(f"bad //go:build expression {expr!r}")
        pos += 1
        return tokens[pos - 1]

    def or_(prefer: bool) -> bool:
        v = and_(prefer)
        while peek() == "||":
            take()
            v = and_(prefer) or v
        return v

    def and_(prefer: bool) -> bool:
        v = not_(prefer)
        while peek() == "&&":
            take()
            v = not_(prefer) and v
        return v

    def not_(prefer: bool) -> bool:
        t = take()
        if t == "!":
            return not not_(not prefer)
        if t == "(":
            v = or_(prefer)
            if take() != ")":
                raise VendorError(f"bad //go:build expression {expr!r}")
            return v
        return _tag(t, prefer)

    v = or_(True)
    if pos != len(tokens):
        raise VendorError(f"bad //go:build expression {expr!r}")
    return v


def _tag(name: str, prefer: bool) -> bool:
    if not re.fullmatch(r"[A-Za-z0-9_.]+", name):
        return False
    return prefer if name != "ignore" else False


def _eval_plus_build(line: str) -> bool:
    words = re.sub(r"^//\s*\+build", "", line).split()
    for w in words:  # OR of terms, each an AND of comma-separated (optionally negated) tags
        if all((not _tag(t[1:], False)) if t.startswith("!") else _tag(t, True) for t in w.split(",")):
            return True
    return not words


def should_build(text: str) -> bool:
    plus, go_build = _header(text)
    if go_build is not None:
        try:
            return _eval_go_build(go_build)
        except VendorError:
            return False
    return all(_eval_plus_build(p) for p in plus)


# --- imports ------------------------------------------------------------------

_TOKEN = re.compile(r"""\s+|//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|`[^`]*`|[A-Za-z_][A-Za-z0-9_]*|.""", re.S)


def imports(text: str) -> list[str]:
    """The import paths of a Go file: its import declarations after the package clause."""
    toks = (t for t in (m.group(0) for m in _TOKEN.finditer(text))
            if not (t.isspace() or t.startswith(("//", "/*"))))
    out: list[str] = []
    if next(toks, None) != "package":
        return out
    next(toks, None)
    t = next(toks, None)
    while t is not None:
        if t == ";":
            t = next(toks, None)
            continue
        if t != "import":
            break
        t = next(toks, None)
        if t == "(":
            t = next(toks, None)
            while t is not None and t != ")":
                if t[0] in "\"`":
                    out.append(t[1:-1])
                t = next(toks, None)
        else:
            while t is not None and t[0] not in "\"`":
                t = next(toks, None)
            if t is not None:
                out.append(t[1:-1])
        t = next(toks, None)
    return out


# --- vendoring ----------------------------------------------------------------

def _go_files(d: pathlib.Path, tests: bool) -> list[pathlib.Path]:
    return sorted(p for p in d.iterdir()
                  if p.is_file() and not p.is_symlink() and p.name.endswith(".go")
                  and not p.name.startswith((".", "_")) and (tests or not p.name.endswith("_test.go")))


def _package_imports(d: pathlib.Path, tests: bool) -> set[str]:
    found: set[str] = set()
    for f in _go_files(d, tests):
        text = f.read_text(errors="replace")
        if should_build(text):
            found.update(imports(text))
    return found


def _main_packages(supdir: pathlib.Path) -> list[pathlib.Path]:
    dirs = []
    for root, subdirs, _files in os.walk(supdir):
        r = pathlib.Path(root)
        subdirs[:] = sorted(s for s in subdirs if not s.startswith((".", "_")) and s != "testdata"
                            and not (r == supdir and s == "vendor") and not (r / s / "go.mod").exists())
        if _go_files(r, True):
            dirs.append(r)
    return dirs


def _module_of(pkg: str, required: dict[str, str]) -> str | None:
    best = None
    for mod in required:
        if pkg == mod or pkg.startswith(mod + "/"):
            if best is None or len(mod) > len(best):
                best = mod
    return best


def plan(supdir: pathlib.Path, gocode: pathlib.Path = GOCODE,
         check_packages: bool = True) -> dict[str, list[str]]:
    """{module: sorted vendored packages} for the modules supdir/go.mod requires."""
    main, _go, required = read_gomod(supdir / "go.mod")
    for mod, ver in required.items():
        if mod not in MODULES:
            raise VendorError(f"go.mod requires {mod} {ver}: no Debian package for it in vendor.py MODULES")
        src, deb = MODULES[mod]
        if not (gocode / src).is_dir():
            raise VendorError(f"{mod} {ver}: {gocode / src} missing (install {deb})")
        if check_packages:
            have = debian_version(deb)
            if "v" + have != ver:
                raise VendorError(f"{mod}: go.mod requires {ver}, {deb} is "
                                  f"{have or 'not installed'} ({gocode / src})")
    todo: list[str] = []
    for d in _main_packages(supdir):
        todo.extend(sorted(_package_imports(d, tests=True)))
    seen: set[str] = set()
    by_mod: dict[str, list[str]] = {m: [] for m in required}
    while todo:
        pkg = todo.pop()
        if pkg in seen or pkg == "C":
            continue
        first = pkg.split("/", 1)[0]
        if pkg == main or pkg.startswith(main + "/") or "." not in first:
            continue  # the main module's own packages, the standard library
        seen.add(pkg)
        mod = _module_of(pkg, required)
        if mod is None:
            raise VendorError(f"{pkg} is imported but no module go.mod requires provides it")
        d = package_dir(pkg, mod, gocode)
        if not d.is_dir() or not _go_files(d, False):
            raise VendorError(f"{pkg}: no Go package at {d}")
        by_mod[mod].append(pkg)
        todo.extend(sorted(_package_imports(d, tests=False)))
    return {m: sorted(p) for m, p in by_mod.items()}


def package_dir(pkg: str, mod: str, gocode: pathlib.Path = GOCODE) -> pathlib.Path:
    return gocode / MODULES[mod][0] / pkg[len(mod):].lstrip("/")


def _copy(src: pathlib.Path, dst: pathlib.Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)


def _source_file(p: pathlib.Path) -> bool:
    if p.name.endswith("_test.go") or p.name in ("go.mod", "go.sum"):
        return False
    if p.name.endswith(".go"):
        return should_build(p.read_text(errors="replace"))
    return True


def vendor(supdir: pathlib.Path, gocode: pathlib.Path = GOCODE, check_packages: bool = True) -> str:
    """Write supdir/vendor/; returns the text of its modules.txt."""
    supdir = pathlib.Path(supdir)
    packages = plan(supdir, gocode, check_packages)
    _main, _go, required = read_gomod(supdir / "go.mod")
    vdir = supdir / "vendor"
    if vdir.is_symlink() or vdir.is_file():
        vdir.unlink()
    elif vdir.exists():
        shutil.rmtree(vdir)
    lines = []
    for mod in sorted(required):
        root = gocode / MODULES[mod][0]
        _m, go, _r = read_gomod(root / "go.mod") if (root / "go.mod").is_file() else (mod, None, {})
        lines.append(f"# {mod} {required[mod]}\n")
        lines.append(f"## explicit; go {go}\n" if go else "## explicit\n")
        for pkg in packages[mod]:
            lines.append(pkg + "\n")
            src = package_dir(pkg, mod, gocode)
            dst = vdir / pkg
            dst.mkdir(parents=True, exist_ok=True)
            for f in sorted(src.iterdir()):
                if f.is_file() and not f.is_symlink() and _source_file(f):
                    _copy(f, dst / f.name)
            # metadata (LICENSE...) of the directories above, up to the module's root
            rel = pkg
            while rel != mod:
                rel = rel.rsplit("/", 1)[0]
                psrc, pdst = package_dir(rel, mod, gocode), vdir / rel
                for f in sorted(psrc.iterdir()):
                    if f.is_file() and not f.is_symlink() and f.name.startswith(META_PREFIXES):
                        _copy(f, pdst / f.name)
    text = "".join(lines)
    vdir.mkdir(exist_ok=True)
    (vdir / "modules.txt").write_text(text)
    os.chmod(vdir / "modules.txt", 0o644)
    for root, dirs, _files in os.walk(vdir):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    os.chmod(vdir, 0o755)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -I vendor.py SUPDIR", file=sys.stderr)
        return 2
    try:
        text = vendor(pathlib.Path(argv[0]))
    except (VendorError, OSError, ValueError) as e:
        print(f"vendor.py: {e}", file=sys.stderr)
        return 1
    n = sum(1 for line in text.splitlines() if not line.startswith("#"))
    print(f"vendor.py: {argv[0]}/vendor: {n} packages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
