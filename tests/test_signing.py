"""Signing the in-toto Statement (issue 13 item 3, last part): `--sign-key`
/ `--sign-tool` write `<stem>.intoto.dsse.json`, a DSSE envelope of the
Statement's exact bytes signed over PAE by the host tool (openssl Ed25519,
ssh-keygen SSHSIG, gpg); `pty-acceptance verify-statement` checks it with the
same tool. A key that is not root's alone, a missing tool or a tool that fails
blocks the marker, and nothing is signed; the key's bytes never appear in
anything the run prints or writes."""

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from pty_acceptance.report import bundle, signing
from pty_acceptance.spec import checklist

from conftest import REPO
from gateproject import earlier_marker, junit, last_line, run
from reportsuite import fixture_as_suite
from signkeys import openssl_key

CLI = REPO / ".venv/bin/pty-acceptance"
FIXTURES = REPO / "tests/fixtures/verdict"
SECTIONS = checklist.load(REPO / "ROOT-ACCEPTANCE.md")


def test_pae_is_the_dsse_test_vector():
    # secure-systems-lab/dsse protocol.md, "Test Vectors"
    assert signing.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert signing.pae("application/vnd.in-toto+json", b"") == b"DSSEv1 28 application/vnd.in-toto+json 0 "


# --------------------------------------------------------------- keys
@pytest.fixture
def keys(safe_dir) -> Path:
    d = safe_dir / "keys"
    d.mkdir(mode=0o700)
    return d


def ssh_key(keys: Path) -> tuple[Path, Path]:
    key = keys / "statement_ed25519"
    subprocess.run(["/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "acceptance",
                    "-f", str(key)], check=True)
    return key, Path(f"{key}.pub")


def gpg_key(keys: Path) -> tuple[Path, Path]:
    home = keys / "gnupg"
    home.mkdir(mode=0o700)
    env = {"PATH": "/usr/bin:/bin", "GNUPGHOME": str(home)}
    try:
        subprocess.run(["/usr/bin/gpg", "--batch", "--quiet", "--passphrase", "", "--quick-gen-key",
                        "Acceptance <acceptance@localhost>", "ed25519", "sign", "never"],
                       env=env, check=True, capture_output=True)
        secret = subprocess.run(["/usr/bin/gpg", "--batch", "--export-secret-keys"], env=env,
                                check=True, capture_output=True).stdout
        public = subprocess.run(["/usr/bin/gpg", "--batch", "--armor", "--export"], env=env,
                                check=True, capture_output=True).stdout
    finally:
        subprocess.run(["/usr/bin/gpgconf", "--kill", "all"], env=env, capture_output=True)
    key, pub = keys / "statement.gpg", keys / "statement.pub.asc"
    key.write_bytes(secret)
    os.chmod(key, 0o600)
    pub.write_bytes(public)
    return key, pub


def key_text(key: Path) -> list[str]:
    """The key's secret material as it could leak: every base64 line of it."""
    lines = key.read_bytes().decode("ascii", "replace").splitlines()
    # lines long enough to be key material (an armour's short checksum line,
    # or a one-character line, is found in any text by chance)
    found = [l for l in lines if len(l) >= 16 and not l.startswith("-----")]
    if not found:  # a binary key (gpg): its base64 and a run of its bytes
        data = key.read_bytes()
        found = [base64.b64encode(data).decode()[:40], data[20:60].hex()]
    return found


def verify(envelope: Path, pubkey: Path, tool: str = "openssl") -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "verify-statement", str(envelope), "--pubkey", str(pubkey),
                           "--sign-tool", tool], capture_output=True, text=True)


def everything_written(project, res) -> str:
    out = "\n".join(res.outlines + res.errlines)
    for f in (project.path / "reports").iterdir():
        out += f.read_bytes().decode("utf-8", "replace")
    return out


def assert_no_key_bytes(key: Path, text: str) -> None:
    for line in key_text(key):
        assert line not in text, "the signing key's bytes appear in the run's output"


# --------------------------------------------------------------- the gate signs
@pytest.mark.parametrize("tool, make", [("openssl", openssl_key), ("ssh-keygen", ssh_key)])
def test_a_ready_run_writes_a_signed_statement_that_verifies(project, target, keys, tool, make):
    key, pub = make(keys)
    res = run(project, target, "--sign-key", str(key), "--sign-tool", tool)
    assert last_line(res) == f"READY: marker written {target.marker}", "\n".join(res.outlines[-20:])
    report = junit(project)
    _, statement, envelope = (Path(p) for p in bundle.names(str(report)))
    assert f"bundle: {envelope}" in res.outlines
    doc = json.loads(envelope.read_text())
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(doc["payload"]) == statement.read_bytes(), "payload is not the Statement written"
    sig = base64.b64decode(doc["signatures"][0]["sig"])
    if tool == "openssl":
        assert len(sig) == 64  # a raw Ed25519 signature
    else:
        assert sig.startswith(b"-----BEGIN SSH SIGNATURE-----")
    independently_verified(tool, statement.read_bytes(), sig, pub, keys)
    ok = verify(envelope, pub, tool)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1].startswith(f"VERIFIED ({tool}, keyid ")
    assert ok.stdout.splitlines()[-1].endswith("result WARNED")  # the fixture's UNIT-9 is a CONCERN
    assert any(l.startswith("subject: ") and l.endswith(target.binaries[0]) for l in ok.stdout.splitlines())
    import socket
    assert f"host: fake (the machine calls itself {socket.gethostname()})" in ok.stdout.splitlines()  # issue 38
    props = report.read_text()
    assert f"{tool} key {key}: the Statement is signed" in props
    assert_no_key_bytes(key, everything_written(project, res))


def test_a_not_ready_run_signs_its_failed_statement(project, target, keys):
    key, pub = openssl_key(keys)
    (project.path / "acceptance/test_all.py").write_text(
        (project.path / "acceptance/test_all.py").read_text().replace("    pass\n", "    assert False\n"))
    res = run(project, target, "--sign-key", str(key))  # openssl when only a key is given
    assert last_line(res).startswith("NOT READY: ")
    ok = verify(Path(bundle.names(str(junit(project)))[2]), pub)
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1].endswith("result FAILED"), ok.stdout


def independently_verified(tool: str, body: bytes, sig: bytes, pub: Path, work: Path) -> None:
    """The signature checked by the tool itself over PAE spelled out here
    (DSSE protocol.md), not through signing.py."""
    pae = b"DSSEv1 28 application/vnd.in-toto+json %d %s" % (len(body), body)
    (work / "pae").write_bytes(pae)
    (work / "sig").write_bytes(sig)
    if tool == "openssl":
        argv = ["/usr/bin/openssl", "pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", str(pub),
                "-sigfile", str(work / "sig"), "-in", str(work / "pae")]
    else:
        (work / "allowed").write_text("someone " + " ".join(pub.read_text().split()[:2]) + "\n")
        argv = ["/usr/bin/ssh-keygen", "-Y", "verify", "-f", str(work / "allowed"), "-I", "someone",
                "-n", "in-toto", "-s", str(work / "sig")]
    res = subprocess.run(argv, input=pae, capture_output=True)
    assert res.returncode == 0, res.stdout + res.stderr


def tampered(envelope: Path, out: Path, change) -> Path:
    doc = json.loads(envelope.read_text())
    change(doc)
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("change", [
    lambda d: d.update(payload=base64.b64encode(
        base64.b64decode(d["payload"]).replace(b'"WARNED"', b'"FAILED"')).decode()),
    lambda d: d.update(payload=base64.b64encode(base64.b64decode(d["payload"]) + b" ").decode()),
    lambda d: d.update(payloadType="application/json"),
    lambda d: d["signatures"][0].update(sig=base64.b64encode(bytes(64)).decode()),
    lambda d: d.update(signatures=[]),
], ids=["result-flipped", "payload-extended", "payload-type", "zero-signature", "no-signature"])
def test_a_tampered_envelope_does_not_verify(keys, tmp_path, change):
    key, pub = openssl_key(keys)
    made, _ = bundle.from_file(str(FIXTURES / "ready.xml"), SECTIONS)
    env = tmp_path / "good.intoto.dsse.json"
    env.write_bytes(signing.sign(signing.Signer(str(key)), made.statement))
    assert verify(env, pub).returncode == 0
    bad = verify(tampered(env, tmp_path / "bad.json", change), pub)
    assert bad.returncode == 1 and bad.stdout.startswith("NOT VERIFIED: "), bad.stdout


def test_another_public_key_does_not_verify(keys, tmp_path):
    key, _ = openssl_key(keys)
    other = keys / "other"
    other.mkdir()
    _, other_pub = openssl_key(other)
    env = tmp_path / "e.json"
    env.write_bytes(signing.sign(signing.Signer(str(key)), b'{"_type": "x"}'))
    assert verify(env, other_pub).returncode == 1


def test_gpg_round_trip_through_the_report_command(keys, tmp_path):
    key, pub = gpg_key(keys)
    ready = fixture_as_suite("ready", tmp_path / "fixture")  # a READY report of this checkout's suite
    res = subprocess.run([str(CLI), "report", str(ready), "--out-dir", str(tmp_path),
                          "--sign-key", str(key), "--sign-tool", "gpg"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    envelope = tmp_path / "ready.intoto.dsse.json"
    assert f"bundle: {envelope}" in res.stdout.splitlines()
    assert base64.b64decode(json.loads(envelope.read_text())["payload"]) == \
        (tmp_path / "ready.intoto.json").read_bytes()
    ok = verify(envelope, pub, "gpg")
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1].endswith("result WARNED"), ok.stdout + ok.stderr
    bad = tampered(envelope, tmp_path / "bad.json", lambda d: d.update(
        payload=base64.b64encode(base64.b64decode(d["payload"]) + b"\n").decode()))
    assert verify(bad, pub, "gpg").returncode == 1
    assert_no_key_bytes(key, res.stdout + res.stderr)


# --------------------------------------------------------------- refused: blocks, nothing signed
def group_readable(key: Path) -> str:
    os.chmod(key, 0o640)
    return str(key)


def a_link(key: Path) -> str:
    link = key.parent / "link.pem"
    link.symlink_to(key)
    return str(link)


def another_users(key: Path) -> str:
    os.chown(key, 65534, 65534)
    return str(key)


def in_a_user_directory(key: Path) -> str:
    os.chown(key.parent, 65534, 65534)
    return str(key)


@pytest.mark.parametrize("spoil, says", [
    (group_readable, "is readable or writable by group or other (mode 0640)"),
    (a_link, "is a symlink, expected a regular file (not followed)"),
    (another_users, "is owned by uid 65534, not root"),
    (in_a_user_directory, "keys is owned by uid 65534, not root"),
], ids=["group-readable", "link", "another-users-key", "another-users-directory"])
def test_a_key_that_is_not_roots_alone_blocks_and_nothing_is_signed(project, target, keys, spoil, says):
    key, _ = openssl_key(keys)
    res = run(project, target, "--sign-key", spoil(key))
    assert last_line(res) == "NOT READY: 1 blockers: SUITE-4", "\n".join(res.outlines[-20:])
    assert any(l.startswith("BLOCKER [SUITE-4] signing key ") and "fails the OWN-1 chain check" in l
               and says in l and "a key may live where only root can reach it" in l
               for l in res.outlines), "\n".join(res.outlines[-20:])
    assert not os.path.lexists(target.marker)
    assert not os.path.lexists(bundle.names(str(junit(project)))[2]), "an envelope was written"
    assert os.path.exists(bundle.names(str(junit(project)))[1]), "the (unsigned) Statement is still written"
    assert_no_key_bytes(key, everything_written(project, res))


def test_a_missing_tool_blocks(project, target, keys, monkeypatch):
    key, _ = openssl_key(keys)
    monkeypatch.setattr(signing, "_programs", lambda tool: ("no-such-signing-tool",))
    res = run(project, target, "--sign-key", str(key))
    assert last_line(res) == "NOT READY: 1 blockers: SUITE-2"
    assert any("/usr/bin/no-such-signing-tool is not installed" in l for l in res.outlines)
    assert not os.path.lexists(target.marker)
    assert not os.path.lexists(bundle.names(str(junit(project)))[2])


def test_a_tool_that_fails_to_sign_blocks_before_the_marker(project, target, keys):
    key = keys / "not-a-key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nTk9UQUtFWVNFQ1JFVE1BVEVSSUFMMTIzNDU2Nzg5MA==\n"
                   "-----END PRIVATE KEY-----\n")
    os.chmod(key, 0o600)
    res = run(project, target, "--sign-key", str(key), "--sign-tool", "openssl")
    assert last_line(res) == "NOT READY: 1 blockers: SUITE-2", "\n".join(res.outlines[-20:])
    assert any("BLOCKER [SUITE-2] the in-toto Statement was not signed: openssl pkeyutl -sign failed"
               in l for l in res.outlines), "\n".join(res.outlines[-20:])
    assert not os.path.lexists(target.marker), "the marker was written although signing failed"
    report = junit(project)
    assert not os.path.lexists(bundle.names(str(report))[2])
    assert 'name="gate" value="NOT READY"' in report.read_text()
    st = json.loads(Path(bundle.names(str(report))[1]).read_text())
    assert st["predicate"]["result"] == "FAILED"
    assert_no_key_bytes(key, everything_written(project, res))


@pytest.mark.parametrize("args, says", [
    (["--sign-tool", "gpg"], "--sign-tool gpg given without --sign-key"),
    (["--sign-key", "/etc/k.pem", "--sign-tool", "rsa"], "--sign-tool 'rsa': expected one of openssl, ssh-keygen, gpg"),
], ids=["tool-without-key", "unknown-tool"])
def test_a_bad_signing_option_ends_not_ready_with_the_marker_removed(project, target, args, says):
    earlier_marker(target.marker)  # a marker in MARK-2's shape: only such a file is removed
    res = run(project, target, *args)
    text = "\n".join(res.outlines + res.errlines)
    assert says in text and "NOT READY" in text, text
    assert res.ret != 0
    assert not os.path.lexists(target.marker), "a stale marker survived a bad option"


def test_the_tool_messages_that_quote_the_key_are_withheld():
    res = subprocess.CompletedProcess([], 1, b"", b"bad line: SECRETMATERIAL0123\n")
    assert "withheld" in signing.said(res, b"xx SECRETMATERIAL0123 yy")
    assert "SECRETMATERIAL" not in signing.said(res, b"xx SECRETMATERIAL0123 yy")
    assert signing.said(res).endswith("bad line: SECRETMATERIAL0123")


def test_an_independent_verifier_checks_the_envelope_with_its_defaults(keys, tmp_path):
    """docs/verdict.md: securesystemslib (the in-toto project's library) verifies an
    openssl-signed envelope with nothing of the suite and nothing said about
    the key but the key (issue 32 item 4): DSSE's PAE, the Ed25519 signature,
    and the keyid the library computes by default for that key."""
    import copy

    from cryptography.hazmat.primitives import serialization
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    key, pub = openssl_key(keys)
    body = b'{"_type": "https://in-toto.io/Statement/v1"}'
    envelope = json.loads(signing.sign(signing.Signer(str(key)), body))
    public = serialization.load_pem_public_key(pub.read_bytes())
    verifier = SSlibKey.from_crypto(public)  # the library's default keyid, as docs/verdict.md shows
    assert envelope["signatures"][0]["keyid"] == verifier.keyid
    # Envelope.from_dict takes the signatures out of the dict it is given: a copy each time
    assert list(Envelope.from_dict(copy.deepcopy(envelope)).verify([verifier], 1)) == [verifier.keyid]
    envelope["payload"] = base64.b64encode(body + b" ").decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(copy.deepcopy(envelope)).verify([verifier], 1)
