"""A signing key for the tests that sign the in-toto Statement
(test_signing.py, test_end_interrupts.py): made with the host's openssl."""

import os
import subprocess
from pathlib import Path


def openssl_key(keys: Path) -> tuple[Path, Path]:
    key, pub = keys / "statement.pem", keys / "statement.pub.pem"
    subprocess.run(["/usr/bin/openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True)
    os.chmod(key, 0o600)
    subprocess.run(["/usr/bin/openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True)
    return key, pub
