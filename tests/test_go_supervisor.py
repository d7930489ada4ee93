"""The reference Go supervisor's own tests: `go test -race ./...` over its
tree, staged as deploy.sh stages it (tests/reference/vendor.py vendors the
dependencies from bookworm's golang-*-dev packages) in a temporary copy, with
the host's Go (/usr/bin/go, bookworm's golang-go) and cgo (the race detector
needs gcc). Fails with Go's output. tools/setup.sh installs what it needs: a
machine without it fails here, it does not skip. Go's build cache (content
addressed, safe to share) is kept in /var/cache/opencode-pty-acceptance, as
the harness's other downloads are: a cold -race build takes a minute."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO
from tests.reference import vendor

SUP = REPO / "tests/reference/src/supervisor"
GO = "/usr/bin/go"
GCC = "/usr/bin/gcc"
GO_TEST_TIMEOUT_S = 600
GOCACHE = "/var/cache/opencode-pty-acceptance/go-build"


def _missing() -> list[str]:
    missing = [p for p in (GO, GCC) if not shutil.which(p)]
    missing += [pkg for d, pkg in vendor.MODULES.values() if not (vendor.GOCODE / d).is_dir()]
    return missing


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    missing = _missing()
    assert not missing, f"go test -race needs {missing}: run tools/setup.sh"
    d = tmp_path_factory.mktemp("go-supervisor") / "supervisor"
    shutil.copytree(SUP, d)
    vendor.vendor(d)
    return d


def _go(staged, *args: str) -> subprocess.CompletedProcess:
    work = staged.parent
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(work / "home"),
           "GOCACHE": GOCACHE, "GOPATH": str(work / "gopath"), "GOPROXY": "off",
           "GOTOOLCHAIN": "local", "GOFLAGS": "", "CGO_ENABLED": "1", "CC": GCC}
    return subprocess.run([GO, *args], cwd=staged, env=env, capture_output=True, text=True,
                          timeout=GO_TEST_TIMEOUT_S)


def test_go_vet(staged):
    r = _go(staged, "vet", "./...")
    assert r.returncode == 0, f"go vet ./... failed ({r.returncode}):\n{r.stdout}{r.stderr}"


def test_go_test_race(staged):
    r = _go(staged, "test", "-race", "-count=1", "./...")
    out = r.stdout + r.stderr
    print(out)  # the per-package lines, in the test's captured output
    assert r.returncode == 0 and "DATA RACE" not in out, f"go test -race ./... failed ({r.returncode}):\n{out}"
    assert "ok  \topencode-pty/cmd/supervisor" in out, f"the supervisor's tests did not run:\n{out}"


def test_the_supervisor_has_tests_for_what_it_must_hold():
    """The tests `go test` runs are there: the frame reader, START's limits, the
    exit mapping, admission, orphan matching, forged signals, a peer that does
    not read (a tree whose tests were deleted would pass go test vacuously)."""
    text = "".join(p.read_text() for p in (SUP / "cmd/supervisor").glob("*_test.go"))
    for name in ("TestFrameHeaderBounds", "TestParseStartLimits", "TestExitMapping", "TestUnauthenticatedQuota",
                 "TestTokenBucket", "TestMainPIDExemption", "TestOrphanMatching",
                 "TestSignalsFromAnotherSenderAreDropped", "TestForgedEndIsNotBelieved",
                 "TestPeerThatStopsReadingWhenTheUnitEnds", "TestSessionEndsWhileSignalsArrive"):
        assert f"func {name}(t *testing.T)" in text, name
