"""The marker verifier (`pty-acceptance verify-marker --root`): accepts the
well-formed marker tree and refuses every bad variant with its own rule."""

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from pty_acceptance.decision import readiness_marker as marker
from pty_acceptance import cli

from conftest import REPO

REV = "2ac698d65aa4690a694307e9cbdf44537ea9a4fb"
SRC = "fff146df36754bc59d473a070985c4310cb57bdad64473ec7f68b5be5014286f"
BINS = marker.DEFAULT_BINARIES


@pytest.fixture
def tree(safe_dir):
    """safe_dir laid out as a root: /usr/local/libexec binaries, /etc/opencode."""
    root = safe_dir / "root"
    for n, p in enumerate(BINS):
        real = root / p.lstrip("/")
        real.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        real.write_bytes(f"binary {n}\n".encode())
    (root / "etc/opencode").mkdir(parents=True, mode=0o755)
    return root


def good_content(root: Path) -> bytes:
    records = [(hashlib.sha256((root / p.lstrip("/")).read_bytes()).hexdigest(), p) for p in BINS]
    return marker.render(REV, SRC, records)


def place(root: Path, content: bytes, mode=0o644) -> Path:
    m = root / "etc/opencode/pty-supervisor-verified"
    m.write_bytes(content)
    m.chmod(mode)
    return m


def pins(root: Path) -> list[str]:
    """The review's pin of each stand-in binary, as verify-marker's options
    (issue 38 item 10: never judged without them)."""
    out = []
    for role, p in zip(("supervisor", "launcher", "client"), BINS, strict=True):
        out += [f"--{role}-sha256", hashlib.sha256((root / p.lstrip("/")).read_bytes()).hexdigest()]
    return out


def verify(root: Path, capsys, pinned: list[str] | None = None) -> tuple[int, str]:
    code = cli.main(["verify-marker", "--root", str(root), "--revision", REV, "--source-sha256", SRC,
                     *(pins(root) if pinned is None else pinned)])
    return code, capsys.readouterr().out.strip()


def test_well_formed_marker_is_accepted(tree, capsys):
    place(tree, good_content(tree))
    code, out = verify(tree, capsys)
    assert (code, out.split()[0]) == (0, "OK"), out


def _lines(c: bytes) -> list[bytes]:
    return c.splitlines(keepends=True)


def _swap(c, i, j):
    ls = _lines(c)
    ls[i], ls[j] = ls[j], ls[i]
    return b"".join(ls)


def _symlink_dir(root):
    real = root.parent / "elsewhere"
    real.mkdir(mode=0o755)
    (root / "etc/opencode").rename(real / "opencode")
    (root / "etc/opencode").symlink_to(real / "opencode")


def _hardlink(root):
    os.link(root / "etc/opencode/pty-supervisor-verified", root / "etc/opencode/second-name")


def _change_binary(root):
    with open(root / BINS[1].lstrip("/"), "ab") as f:
        f.write(b"patched after the marker was written\n")


# (id, transform content, act on the tree after placing, mode, expected rule)
CASES = [
    ("absent", None, lambda r: (r / "etc/opencode/pty-supervisor-verified").unlink(), 0o644, "absent"),
    ("symlink", None, lambda r: ((r / "etc/opencode/real").write_bytes(good_content(r)),
                                 (r / "etc/opencode/pty-supervisor-verified").unlink(),
                                 (r / "etc/opencode/pty-supervisor-verified").symlink_to("real")),
     0o644, "symlink"),
    ("directory", None, lambda r: ((r / "etc/opencode/pty-supervisor-verified").unlink(),
                                   (r / "etc/opencode/pty-supervisor-verified").mkdir()),
     0o644, "not-regular"),
    ("empty", lambda c: b"", None, 0o644, "empty"),
    ("wrong owner", None, lambda r: os.chown(r / "etc/opencode/pty-supervisor-verified", 1000, 1000),
     0o644, "owner"),
    ("group-writable", None, None, 0o664, "writable"),
    ("mode 0600", None, None, 0o600, "mode"),
    ("hard link", None, _hardlink, 0o644, "hard-link"),
    ("crlf", lambda c: c.replace(b"\n", b"\r\n"), None, 0o644, "carriage-return"),
    ("missing final newline", lambda c: c[:-1], None, 0o644, "no-final-newline"),
    ("extra blank line", lambda c: c + b"\n", None, 0o644, "blank-line"),
    ("trailing duplicate line", lambda c: c + _lines(c)[-1], None, 0o644, "line-count"),
    ("three lines", lambda c: b"".join(_lines(c)[:3]), None, 0o644, "line-count"),
    ("arbitrary revision", lambda c: c.replace(REV.encode(), b"1" * 40), None, 0o644, "revision-mismatch"),
    ("source mismatch", lambda c: c.replace(SRC.encode(), b"2" * 64), None, 0o644, "source-mismatch"),
    ("upper-case hex", lambda c: re.sub(rb"\n([0-9a-f]{64})", lambda m: b"\n" + m.group(1).upper(), c, count=1),
     None, 0o644, "uppercase-hex"),
    ("upper-case revision", lambda c: c.replace(REV.encode(), REV.upper().encode()), None, 0o644, "uppercase-hex"),
    ("one space", lambda c: c.replace(b"  /usr/local/libexec/opencode-pty-launcher",
                                      b" /usr/local/libexec/opencode-pty-launcher"),
     None, 0o644, "malformed-record"),
    ("binary flag", lambda c: c.replace(b"  /usr/local/libexec/opencode-pty-client",
                                        b" */usr/local/libexec/opencode-pty-client"),
     None, 0o644, "binary-flag"),
    ("wrong order", lambda c: _swap(c, 1, 2), None, 0o644, "wrong-order"),
    ("wrong path", lambda c: c.replace(b"opencode-pty-client\n", b"opencode-pty-helper\n"), None, 0o644, "wrong-path"),
    ("duplicate record", lambda c: b"".join([_lines(c)[0], _lines(c)[1], _lines(c)[1], _lines(c)[3]]),
     None, 0o644, "duplicate-record"),
    ("malformed first line", lambda c: c.replace(b"revision=", b"rev=", 1), None, 0o644, "malformed-revision-line"),
    ("too large", lambda c: c + b"x" * 5000 + b"\n", None, 0o644, "too-large"),
    ("symlinked directory", None, _symlink_dir, 0o644, "unsafe-directory"),
    ("group-writable directory", None, lambda r: os.chmod(r / "etc/opencode", 0o775), 0o644, "unsafe-directory"),
    ("binary changed after the marker", None, _change_binary, 0o644, "binary-mismatch"),
    ("binary missing", None, lambda r: (r / BINS[2].lstrip("/")).unlink(), 0o644, "binary-unreadable"),
    ("binary is a symlink", None, lambda r: ((r / BINS[0].lstrip("/")).rename(r / "usr/local/libexec/real"),
                                            (r / BINS[0].lstrip("/")).symlink_to("real")),
     0o644, "binary-unreadable"),
]


@pytest.mark.parametrize("name,transform,act,mode,rule", CASES, ids=[c[0] for c in CASES])
def test_bad_marker_is_refused_with_its_rule(tree, capsys, name, transform, act, mode, rule):
    content = good_content(tree)
    pinned = pins(tree)  # the review's pins, taken before any binary changes
    place(tree, transform(content) if transform else content, mode)
    if act:
        act(tree)
    code, out = verify(tree, capsys, pinned)
    assert code == 1 and "\n" not in out, out
    assert out.startswith(f"REFUSED {rule}: "), out


def test_table_covers_at_least_twenty_distinct_cases():
    assert len(CASES) >= 20
    assert len({c[4] for c in CASES}) >= 20


def test_installed_command_line_tool(tree):
    place(tree, good_content(tree))
    exe = REPO / ".venv/bin/pty-acceptance"
    argv = [str(exe)] if exe.exists() else ["python3", "-m", "pty_acceptance.cli"]
    ok = subprocess.run(argv + ["verify-marker", "--root", str(tree), "--revision", REV,
                                "--source-sha256", SRC, *pins(tree)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    place(tree, good_content(tree), 0o664)
    bad = subprocess.run(argv + ["verify-marker", "--root", str(tree), "--revision", REV,
                                 "--source-sha256", SRC, *pins(tree)], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stdout.startswith("REFUSED writable:"), bad.stdout


def test_expectation_from_inventory(tree, capsys, tmp_path):
    place(tree, good_content(tree))
    data = yaml.safe_load((REPO / "inventories/target.yml").read_text())
    data["all"]["hosts"]["pilot"]["units"]["candidate"] = "opencode-v2-candidate.service"
    data["all"]["hosts"]["pilot"]["runtime"]["sha256"] = "ab" * 32  # the operator's RUNTIME-1 pin
    data["all"]["hosts"]["pilot"]["plugin"].update(bun_sha256="cd" * 32, harness_sha256="ef" * 32,  # PLUGIN-1's
                                                   success={"last_line": "^PASS ", "result_file": "^r$"})
    inv = tmp_path / "target.yml"
    inv.write_text(yaml.safe_dump(data))
    code = cli.main(["verify-marker", "--root", str(tree), "--inventory", str(inv)])
    out = capsys.readouterr().out
    # Same revision and source as the target inventory, but the stand-in
    # binaries are not the claimed artifacts.
    assert code == 1 and out.startswith("REFUSED claim-mismatch: line 2:"), out


# ------------------------------------------------------------ the review's pins (issue 38 item 10)
def test_a_hand_written_marker_over_any_binaries_is_never_ok_without_the_pins(tree, capsys):
    """The review's reproduction: --revision and --source-sha256 alone, no
    --inventory, and a marker written by hand over arbitrary binaries (its
    records the binaries' own hashes) returned OK. Every pin is needed."""
    for n, p in enumerate(BINS):
        (tree / p.lstrip("/")).write_bytes(f"anything at all {n}\n".encode())
    place(tree, good_content(tree))
    code, out = verify(tree, capsys, pinned=[])
    assert code == 1 and out == ("REFUSED pins: without --inventory the review's pins are given as options, "
                                 "every one: --supervisor-sha256, --launcher-sha256, --client-sha256 missing (the "
                                 "marker is never judged against hashes it names itself)"), out


def test_every_missing_pin_is_named(tree, capsys):
    place(tree, good_content(tree))
    code, out = verify(tree, capsys, pinned=pins(tree)[:2])
    assert code == 1 and out.startswith("REFUSED pins: ") and "--launcher-sha256, --client-sha256 missing" in out


def test_with_every_pin_a_binary_the_review_did_not_pin_is_refused(tree, capsys):
    pinned = pins(tree)
    for n, p in enumerate(BINS):
        (tree / p.lstrip("/")).write_bytes(f"not the reviewed build {n}\n".encode())
    place(tree, good_content(tree))  # a marker that matches the binaries there now
    code, out = verify(tree, capsys, pinned)
    assert code == 1 and out.startswith("REFUSED claim-mismatch: line 2:"), out


def test_a_pin_option_must_be_the_inventorys(tree, capsys, tmp_path):
    data = yaml.safe_load((REPO / "inventories/target.yml").read_text())
    data["all"]["hosts"]["pilot"]["units"]["candidate"] = "opencode-v2-candidate.service"
    data["all"]["hosts"]["pilot"]["runtime"]["sha256"] = "ab" * 32
    data["all"]["hosts"]["pilot"]["plugin"].update(bun_sha256="cd" * 32, harness_sha256="ef" * 32,
                                                   success={"last_line": "^PASS ", "result_file": "^r$"})
    inv = tmp_path / "target.yml"
    inv.write_text(yaml.safe_dump(data))
    place(tree, good_content(tree))
    code = cli.main(["verify-marker", "--root", str(tree), "--inventory", str(inv), "--revision", "1" * 40])
    out = capsys.readouterr().out.strip()
    assert code == 1 and out.startswith(f"REFUSED pins: --revision {'1' * 40} is not the inventory's {REV}"), out


def test_the_library_verifier_never_judges_without_the_pins(tree):
    place(tree, good_content(tree))
    with pytest.raises(marker.MarkerRefused) as e:
        marker.verify("/etc/opencode/pty-supervisor-verified", marker.Expectation(REV, SRC, BINS), root=str(tree))
    assert e.value.reason == "pins"
