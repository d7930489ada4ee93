"""tests/reference/vendor.py: the vendor/ tree deploy.sh and expected.py make
as `go mod vendor` (Go 1.19) would, from bookworm's golang-*-dev sources."""

import os
import shutil

import pytest

from conftest import REPO
from tests.reference import vendor

SUP = REPO / "tests/reference/src/supervisor"
STUB = """package main

import (
	"fmt"

	sd "github.com/coreos/go-systemd/v22/daemon"
	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

func main() { fmt.Println(sd.SdNotifyReady, sdbus.NewWithContext, dbus.SystemBus, unix.Getpid()) }
"""


@pytest.mark.parametrize("text, built", [
    ("//go:build ignore\n\npackage x\n", False),
    ("// +build ignore\n\npackage x\n", False),
    ("// +build ignore\npackage x\n", True),  # no blank line after it: not a constraint
    ("//go:build !windows && (linux || darwin)\n\npackage x\n", True),
    ("//go:build linux && !linux\n\npackage x\n", True),  # any tags: each term as it would build
    ("//go:build !ignore\n\npackage x\n", True),
    ("// Copyright\n\n//go:build ignore\n// +build ignore\n\npackage x\n", False),
    ("/* a\nblock */\n//go:build ignore\n\npackage x\n", False),
    ("package x\n\n//go:build ignore\n", True),  # after the package clause: a comment
])
def test_ignore_is_the_only_tag_that_keeps_a_file_out(text, built):
    assert vendor.should_build(text) is built


def test_imports_are_read_from_the_import_declarations_only():
    text = ('// x\npackage main // c\n\nimport "a/b"\nimport (\n\t"c" // c\n\tx "d/e"\n\t. "f"\n\t_ `g`\n'
            '\t/* "h" */\n)\n\nvar s = "import \\"no\\""\n\nimport "late"\n')
    assert vendor.imports(text) == ["a/b", "c", "d/e", "f", "g"]


def test_gomod_is_read():
    mod, go, req = vendor.read_gomod(SUP / "go.mod")
    assert (mod, go) == ("opencode-pty", "1.19")
    assert set(req) == set(vendor.MODULES)


@pytest.mark.skipif(not all((vendor.GOCODE / d).is_dir() for d, _ in vendor.MODULES.values()),
                    reason="needs golang-dbus-dev, golang-github-coreos-go-systemd-dev, golang-golang-x-sys-dev")
def test_a_tree_importing_the_four_packages_is_vendored_deterministically(tmp_path):
    trees = []
    for n in ("a", "b"):
        d = tmp_path / n
        shutil.copytree(SUP, d, ignore=shutil.ignore_patterns("vendor"))
        (d / "cmd/supervisor").mkdir(exist_ok=True)
        (d / "cmd/supervisor/main.go").write_text(STUB)
        text = vendor.vendor(d)
        trees.append({str(p.relative_to(d / "vendor")): (p.read_bytes() if p.is_file() else None,
                                                         p.stat().st_mode & 0o7777)
                      for p in (d / "vendor").rglob("*")})
    assert text == ("# github.com/coreos/go-systemd/v22 v22.3.2\n## explicit; go 1.12\n"
                    "github.com/coreos/go-systemd/v22/daemon\ngithub.com/coreos/go-systemd/v22/dbus\n"
                    "# github.com/godbus/dbus/v5 v5.1.0\n## explicit; go 1.12\ngithub.com/godbus/dbus/v5\n"
                    "# golang.org/x/sys v0.3.0\n## explicit; go 1.17\ngolang.org/x/sys/unix\n")
    assert trees[0] == trees[1]
    files = [k for k, (data, _) in trees[0].items() if data is not None]
    assert "github.com/godbus/dbus/v5/conn.go" in files and "golang.org/x/sys/unix/asm_linux_amd64.s" in files
    assert not [f for f in files if f.endswith("_test.go") or os.path.basename(f) in ("go.mod", "go.sum")]
    assert not [f for f in files if "/_examples/" in f or "/introspect/" in f or "/unix/linux/" in f]
    assert "golang.org/x/sys/unix/mkerrors.go" not in files  # tagged ignore (a generator)
    assert {mode for _, mode in trees[0].values()} == {0o644, 0o755}
    assert all(mode == 0o755 for k, (data, mode) in trees[0].items() if data is None)


@pytest.fixture
def no_gocode(tmp_path):
    """An empty module directory per required module (no package to vendor from)."""
    g = tmp_path / "gocode"
    for d, _ in vendor.MODULES.values():
        (g / d).mkdir(parents=True)
    return g


def test_the_python_implementation_vendors_no_package(tmp_path, no_gocode):
    d = tmp_path / "py"
    shutil.copytree(SUP, d, ignore=shutil.ignore_patterns("vendor"))
    shutil.rmtree(d / "cmd/supervisor", ignore_errors=True)
    shutil.copytree(REPO / "tests/reference/src/supervisor-python/cmd/supervisor", d / "cmd/supervisor")
    text = vendor.vendor(d, no_gocode, check_packages=False)
    assert [line for line in text.splitlines() if not line.startswith("#")] == []
    assert sorted(p.name for p in (d / "vendor").iterdir()) == ["modules.txt"]


def test_an_import_no_required_module_provides_is_refused(tmp_path, no_gocode):
    d = tmp_path / "t"
    shutil.copytree(SUP, d, ignore=shutil.ignore_patterns("vendor"))
    shutil.rmtree(d / "cmd/supervisor")  # the Go supervisor's other files import the required modules
    (d / "cmd/supervisor").mkdir()
    (d / "cmd/supervisor/main.go").write_text('package main\n\nimport "example.com/other"\n')
    with pytest.raises(vendor.VendorError, match="example.com/other"):
        vendor.vendor(d, no_gocode, check_packages=False)
