"""The in-toto Statement signed in a DSSE envelope, by a tool already on the
host (`--sign-key PATH --sign-tool openssl|ssh-keygen|gpg`). No cryptography
here: the signature is made and checked by the host program, run by absolute
path (programs.py) with root's environment built here; this module only
builds the DSSE pre-authentication encoding and the envelope
(secure-systems-lab/dsse, protocol.md and envelope.md):

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
    {"payloadType": type, "payload": base64(body),
     "signatures": [{"keyid": ..., "sig": base64(signature over PAE)}]}

`type` is application/vnd.in-toto+json and `body` the exact bytes of
`<stem>.intoto.json`. What `sig` holds, per tool:

    openssl     the raw signature of `openssl pkeyutl -sign -rawin` with an
                Ed25519 private key (PEM): 64 bytes, what in-toto and
                sigstore verifiers expect for ed25519. keyid: the one a
                verifier computes by default (securesystemslib's
                SSlibKey.from_crypto: SHA-256 of the canonical JSON
                {"keytype":"ed25519","keyval":{"public":<raw key, hex>},
                "scheme":"ed25519"}), so that the in-toto tools verify the
                envelope with nothing said about the key but the key.
    ssh-keygen  the SSHSIG armour (`-----BEGIN SSH SIGNATURE-----` ...) of
                `ssh-keygen -Y sign -n in-toto` with an OpenSSH private key.
                keyid: the key's SHA256: fingerprint.
    gpg         a binary OpenPGP detached signature (`gpg --detach-sign`)
                made with an exported, passphrase-less secret key file
                (`gpg --export-secret-keys KEYID`), imported into a private
                home directory that is removed afterwards. keyid: the
                signing key's fingerprint.

openssl is the default when only a key is given. The key is root's secret
(SUITE-4): the file and every directory from / down to it must be owned by
root (or, for `pty-acceptance report` run by another user, by that user),
no link anywhere, the directories not group/other-writable and the key not
group/other-readable or -writable; it is opened by a descriptor walk that
follows no link and handed to the tool as /dev/fd/N, so the tool signs
with exactly the file judged. Its bytes are never printed: a tool message
that quotes the key file is withheld.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs, programs
from pty_acceptance.report import intoto

TOOLS = ("openssl", "ssh-keygen", "gpg")
DEFAULT_TOOL = "openssl"
PAYLOAD_TYPE = intoto.MEDIA_TYPE
SSH_NAMESPACE = "in-toto"
SSH_PRINCIPAL = "pty-acceptance"
KEY_LIMIT = 1 << 16
ENVELOPE_LIMIT = 64 << 20
TIMEOUT = 60  # seconds a signing or verifying tool may run


class SignError(AcceptanceError):
    def __init__(self, rule: str, text: str):
        super().__init__(text, requirements=(rule,))


@dataclass(frozen=True)
class Signer:
    key: str  # absolute path
    tool: str = DEFAULT_TOOL


def pae(payload_type: str, body: bytes) -> bytes:
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


# ------------------------------------------------ the key, judged and opened
def key_problems(path: str, owner: int = 0) -> list[str]:
    """Why `path` may not be used as a signing key by uid `owner` (lstat only:
    nothing is opened here)."""
    owners = {0, owner}
    out = []
    for d in hostfs.ancestors(path):
        node = hostfs.Node.at(d)
        if node.st is None or node.kind != "directory":
            out.append(f"{d} is a {node.kind}, expected a directory (not followed)")
            break
        if node.st.st_uid not in owners:
            out.append(f"{d} is owned by uid {node.st.st_uid}, not {_who(owner)}")
        if stat.S_IMODE(node.st.st_mode) & 0o022:
            out.append(f"{d} is writable by group or other (mode {stat.S_IMODE(node.st.st_mode):04o})")
    node = hostfs.Node.at(path)
    if node.st is None:
        return out + [f"{path} does not exist"]
    if node.kind != "regular file":
        return out + [f"{path} is a {node.kind}, expected a regular file (not followed)"]
    if node.st.st_uid != owner:
        out.append(f"{path} is owned by uid {node.st.st_uid}, not {_who(owner)}")
    mode = stat.S_IMODE(node.st.st_mode)
    if mode & 0o066:
        out.append(f"{path} is readable or writable by group or other (mode {mode:04o})")
    return out


def _who(owner: int) -> str:
    return "root" if owner == 0 else f"root or uid {owner}"


def where_a_key_may_live(owner: int = 0) -> str:
    """Said with every refused key: where one passes the check."""
    return (f"a key may live where only {_who(owner)} can reach it: owned by {_who(owner)}, chmod 600, "
            "in a directory of root's that no one else may write, e.g. /etc/opencode/keys (0700) "
            "or /root; not under /tmp or a home directory others own")


def open_key(path: str, owner: int = 0) -> int:
    """A descriptor of the key file, after the chain check; judged again by
    fstat on the descriptor itself."""
    found = key_problems(path, owner)
    if found:
        raise SignError("SUITE-4", f"signing key {path} fails the OWN-1 chain check: {found[0]} "
                        f"({where_a_key_may_live(owner)})")
    try:
        fd = hostfs.open_file(path)
    except OSError as e:
        raise SignError("SUITE-4", f"signing key {path} cannot be opened safely: {e}") from None
    st = os.fstat(fd)
    if st.st_uid != owner or stat.S_IMODE(st.st_mode) & 0o066 or st.st_size > KEY_LIMIT:
        os.close(fd)
        raise SignError("SUITE-4", f"signing key {path} changed while it was opened, or is over "
                        f"{KEY_LIMIT} bytes")
    return fd


def preflight(signer: Signer, owner: int = 0) -> list[SignError]:
    """What stops signing, found before the marker decision: the key's chain
    check and the tool (and what it needs) being installed."""
    out = []
    found = key_problems(signer.key, owner)
    if found:
        out.append(SignError("SUITE-4", f"signing key {signer.key} fails the OWN-1 chain check: "
                             + "; ".join(found) + f" ({where_a_key_may_live(owner)})"))
    for name in _programs(signer.tool):
        if not os.path.isfile(programs.path(name)):
            out.append(SignError("SUITE-2", f"--sign-tool {signer.tool}: {programs.path(name)} "
                                 "is not installed"))
    return out


def _programs(tool: str) -> tuple[str, ...]:
    return ("gpg", "gpgconf") if tool == "gpg" else (tool,)


# ------------------------------------------------ running the tool
def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return fd


def _run(tool: str, args: list[str], fds: tuple[int, ...] = (), stdin: bytes = b"",
         env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [programs.path(tool)] + args
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, pass_fds=fds,
                              env=env or dict(programs.ROOT_ENV), timeout=TIMEOUT, check=False)
    except FileNotFoundError:
        raise SignError("SUITE-2", f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise SignError("SUITE-2", f"{argv[0]} {args[0]} was still running after {TIMEOUT} s") from None


def said(res: subprocess.CompletedProcess, secret: bytes = b"") -> str:
    """The tool's last line of complaint, for a message: escaped by the
    caller, at most 200 characters, withheld when it quotes the key file."""
    lines = [l.strip() for l in res.stderr.splitlines() if l.strip()]
    if not lines:
        return f"exit status {res.returncode}"
    if any(_quotes(l, secret) for l in lines):
        return f"exit status {res.returncode} (its message quotes the key file: withheld)"
    return f"exit status {res.returncode}: " + lines[-1][:200].decode("utf-8", "backslashreplace")


def _quotes(line: bytes, secret: bytes, run: int = 12) -> bool:
    """Whether `line` holds `run` bytes in a row of the key (its armour lines,
    `-----BEGIN ... KEY-----`, are not secret and not counted)."""
    body = b"\n".join(l for l in secret.splitlines() if not l.startswith(b"-----"))
    return any(line[i:i + run] in body for i in range(max(0, len(line) - run + 1))) if body else False


def _failed(tool: str, what: str, res: subprocess.CompletedProcess, secret: bytes = b"") -> SignError:
    return SignError("SUITE-2", f"{tool} {what} failed: {said(res, secret)}")


def sign(signer: Signer, body: bytes, owner: int = 0) -> bytes:
    """The DSSE envelope (JSON bytes) of `body` signed with the operator's key."""
    kfd = open_key(signer.key, owner)
    mfd = -1
    try:
        secret = os.pread(kfd, KEY_LIMIT + 1, 0)  # only to withhold a message that quotes it
        mfd = _memfd("pae", pae(PAYLOAD_TYPE, body))
        key, msg = f"/dev/fd/{kfd}", f"/dev/fd/{mfd}"
        if signer.tool == "openssl":
            sig, keyid = _sign_openssl(key, msg, (kfd, mfd), secret)
        elif signer.tool == "ssh-keygen":
            sig, keyid = _sign_ssh(key, mfd, kfd, secret)
        elif signer.tool == "gpg":
            sig, keyid = _sign_gpg(key, msg, (kfd, mfd), secret)
        else:
            raise SignError("SUITE-2", f"--sign-tool {signer.tool!r}: expected one of {', '.join(TOOLS)}")
    finally:
        os.close(kfd)
        if mfd >= 0:
            os.close(mfd)
    return envelope(body, [(keyid, sig)])


def envelope(body: bytes, sigs: list[tuple[str, bytes]]) -> bytes:
    doc = {"payloadType": PAYLOAD_TYPE,
           "payload": base64.b64encode(body).decode("ascii"),
           "signatures": [{"keyid": k, "sig": base64.b64encode(s).decode("ascii")} for k, s in sigs]}
    return (json.dumps(doc, indent=2, ensure_ascii=True) + "\n").encode("ascii")


def _sign_openssl(key: str, msg: str, fds, secret: bytes) -> tuple[bytes, str]:
    res = _run("openssl", ["pkeyutl", "-sign", "-rawin", "-inkey", key, "-in", msg], fds)
    if res.returncode != 0 or not res.stdout:
        raise _failed("openssl", "pkeyutl -sign", res, secret)
    pub = _run("openssl", ["pkey", "-in", key, "-pubout", "-outform", "DER"], fds)
    if pub.returncode != 0 or not pub.stdout:
        raise _failed("openssl", "pkey -pubout", pub, secret)
    return res.stdout, default_keyid(pub.stdout)


ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")  # DER SubjectPublicKeyInfo of an Ed25519 key, less the key


def default_keyid(der: bytes) -> str:
    """securesystemslib's default keyid of a public key given as DER
    SubjectPublicKeyInfo (compute_default_keyid over its canonical JSON). An
    Ed25519 key is the one openssl signs with here; any other key's keyid is
    the SHA-256 of its DER."""
    if len(der) != len(ED25519_SPKI) + 32 or not der.startswith(ED25519_SPKI):
        return hashlib.sha256(der).hexdigest()
    key = {"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": der[len(ED25519_SPKI):].hex()}}
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def ssh_fingerprint(public_line: bytes) -> str:
    """SHA256:<base64, unpadded> of an OpenSSH public key line's key blob."""
    fields = public_line.split()
    if len(fields) < 2:
        raise SignError("SUITE-2", "ssh-keygen gave no public key")
    try:
        blob = base64.b64decode(fields[1], validate=True)
    except binascii.Error:
        raise SignError("SUITE-2", "ssh-keygen's public key is not base64") from None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def _sign_ssh(key: str, mfd: int, kfd: int, secret: bytes) -> tuple[bytes, str]:
    body = os.pread(mfd, os.fstat(mfd).st_size, 0)
    res = _run("ssh-keygen", ["-Y", "sign", "-f", key, "-n", SSH_NAMESPACE], (kfd,), stdin=body)
    if res.returncode != 0 or b"BEGIN SSH SIGNATURE" not in res.stdout:
        raise _failed("ssh-keygen", "-Y sign", res, secret)
    pub = _run("ssh-keygen", ["-y", "-f", key], (kfd,))
    if pub.returncode != 0:
        raise _failed("ssh-keygen", "-y", pub, secret)
    return res.stdout, ssh_fingerprint(pub.stdout)


@contextlib.contextmanager
def _gpg_home():
    """A private GnuPG home directory (0700, removed afterwards), and its
    agent stopped if one was started in it."""
    with tempfile.TemporaryDirectory(prefix="pty-acceptance-gpg-") as home:
        env = dict(programs.ROOT_ENV, GNUPGHOME=home)
        try:
            yield home, env
        finally:
            try:
                subprocess.run([programs.path("gpgconf"), "--homedir", home, "--kill", "all"],
                               env=env, capture_output=True, timeout=TIMEOUT, check=False)
            except (OSError, subprocess.TimeoutExpired):
                pass  # no agent to stop (gpgconf gone), or it would not stop: the home goes anyway


def _sign_gpg(key: str, msg: str, fds, secret: bytes) -> tuple[bytes, str]:
    with _gpg_home() as (home, env):
        opts = ["--homedir", home, "--batch", "--no-tty"]
        imp = _run("gpg", opts + ["--import", key], fds, env=env)
        if imp.returncode != 0:
            raise _failed("gpg", "--import", imp, secret)
        res = _run("gpg", opts + ["--status-fd", "2", "--detach-sign", "--output", "-", msg], fds, env=env)
        if res.returncode != 0 or not res.stdout:
            raise _failed("gpg", "--detach-sign", res, secret)
    created = [l.split() for l in res.stderr.splitlines() if l.startswith(b"[GNUPG:] SIG_CREATED ")]
    if not created:
        raise SignError("SUITE-2", "gpg --detach-sign reported no SIG_CREATED")
    return res.stdout, created[-1][-1].decode("ascii", "backslashreplace")


# ------------------------------------------------ verifying an envelope
@dataclass
class Verified:
    statement: dict
    keyid: str
    body: bytes = b""  # the payload's exact bytes: the Statement file that was signed


def read_regular(path: str, limit: int) -> bytes:
    """A file given on the command line (an envelope, a public key): public
    material, but a FIFO or device is never read and a size is bounded."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise hostfs.PathRefused(f"{path} is not a regular file")
    return hostfs.read_fd(fd, limit, path)


def _b64(text) -> bytes:
    if not isinstance(text, str):
        raise ValueError("not a string")
    text = text.strip()
    alphabet = "-_" if ("-" in text or "_" in text) else "+/"
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=alphabet.encode(), validate=True)


def verify(envelope_bytes: bytes, pubkey: bytes, tool: str = DEFAULT_TOOL) -> Verified:
    """The Statement of a DSSE envelope whose signature (one of them) the
    public key verifies over PAE(payloadType, payload). SignError otherwise."""
    try:
        doc = json.loads(envelope_bytes)
    except (ValueError, UnicodeDecodeError) as e:
        raise SignError("SUITE-2", f"the envelope is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("signatures"), list) or not doc["signatures"]:
        raise SignError("SUITE-2", "the envelope has no signatures")
    if doc.get("payloadType") != PAYLOAD_TYPE:
        raise SignError("SUITE-2", f"payloadType is {doc.get('payloadType')!r}, not {PAYLOAD_TYPE}")
    try:
        body = _b64(doc.get("payload"))
    except (ValueError, binascii.Error):
        raise SignError("SUITE-2", "the payload is not base64") from None
    message = pae(PAYLOAD_TYPE, body)
    why = []
    for n, s in enumerate(doc["signatures"], start=1):
        try:
            sig = _b64(s.get("sig") if isinstance(s, dict) else None)
        except (ValueError, binascii.Error):
            why.append(f"signature {n}: sig is not base64")
            continue
        problem = _check(tool, message, sig, pubkey)
        if problem is None:
            try:
                st = json.loads(body)
            except (ValueError, UnicodeDecodeError) as e:
                raise SignError("SUITE-2", f"the signed payload is not JSON: {e}") from None
            if not isinstance(st, dict) or st.get("_type") != intoto.STATEMENT_TYPE:
                raise SignError("SUITE-2", "the signed payload is not an in-toto Statement v1")
            return Verified(st, str(s.get("keyid", "")), body)
        why.append(f"signature {n}: {problem}")
    raise SignError("SUITE-2", "no signature verifies: " + "; ".join(why))


def _check(tool: str, message: bytes, sig: bytes, pubkey: bytes) -> str | None:
    fds = (_memfd("pae", message), _memfd("sig", sig), _memfd("pub", pubkey))
    msg, sigf, pub = (f"/dev/fd/{fd}" for fd in fds)
    try:
        if tool == "openssl":
            res = _run("openssl", ["pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", pub,
                                   "-sigfile", sigf, "-in", msg], fds)
            ok = res.returncode == 0 and b"Signature Verified Successfully" in res.stdout
        elif tool == "ssh-keygen":
            fields = pubkey.split()
            if len(fields) < 2:
                return "the public key is not an OpenSSH public key line"
            allowed = _memfd("allowed", b"%s %s %s\n" % (SSH_PRINCIPAL.encode(), fields[0], fields[1]))
            try:
                res = _run("ssh-keygen", ["-Y", "verify", "-f", f"/dev/fd/{allowed}", "-I", SSH_PRINCIPAL,
                                          "-n", SSH_NAMESPACE, "-s", sigf], fds + (allowed,), stdin=message)
            finally:
                os.close(allowed)
            ok = res.returncode == 0
        elif tool == "gpg":
            with _gpg_home() as (home, env):
                opts = ["--homedir", home, "--batch", "--no-tty"]
                imp = _run("gpg", opts + ["--import", pub], fds, env=env)
                if imp.returncode != 0:
                    return f"gpg --import of the public key failed: {said(imp)}"
                res = _run("gpg", opts + ["--status-fd", "1", "--verify", sigf, msg], fds, env=env)
            ok = res.returncode == 0 and b"[GNUPG:] VALIDSIG " in res.stdout
        else:
            return f"--sign-tool {tool!r}: expected one of {', '.join(TOOLS)}"
    finally:
        for fd in fds:
            os.close(fd)
    return None if ok else f"{tool} says it does not verify ({said(res)})"
