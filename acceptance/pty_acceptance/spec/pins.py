"""The Python distributions the suite runs on, as the checkout pins them:
`requirements/target.txt` (SUITE-3).

tools/setup-target.sh installs exactly these into the target's virtualenv
(pip --require-hashes); the gate judges what the process loaded against
them (decision/loaded_code.py): a module of the virtualenv comes from a
distribution of one of these names at its pinned version, or from the
suite's own (DISTRIBUTION, installed from the checkout, never pinned by
hash). Names compare in their normalized form (PEP 503: `PyYAML`,
`pyyaml` and `py_yaml` are one name).
"""

from __future__ import annotations

import re
from pathlib import Path

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs

FILE = "requirements/target.txt"
DISTRIBUTION = "opencode-pty-acceptance"  # the suite's own (pyproject.toml's [project] name)
LIMIT = 1 << 20
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)$")


class PinsError(AcceptanceError):
    requirements = ("SUITE-3",)


def normalize(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str, where: str) -> dict[str, str]:
    """normalized name -> version, from pip's requirements format as
    tools/pins.sh writes it: `name==version \\` then `--hash=...` lines."""
    out: dict[str, str] = {}
    logical = re.sub(r"\\\n", " ", text)
    for n, line in enumerate(logical.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        m = _PIN.match(words[0])
        if not m or not all(w.startswith("--hash=") for w in words[1:]):
            raise PinsError(f"{where}: requirement {n}: expected 'name==version --hash=...', got {line[:120]!r}")
        name = normalize(m.group(1))
        if name in out:
            raise PinsError(f"{where}: {name} is pinned twice")
        out[name] = m.group(2)
    if not out:
        raise PinsError(f"{where}: pins nothing")
    return out


def load(root: Path) -> dict[str, str]:
    where = str(root / FILE)
    try:
        data = hostfs.read_file(where, LIMIT)
    except OSError as e:
        raise PinsError(f"{where}: {e.strerror or e}: the gate cannot know which distributions the suite "
                        "runs on") from None
    try:
        return parse(data.decode("utf-8"), where)
    except UnicodeDecodeError as e:
        raise PinsError(f"{where}: not UTF-8 (byte {e.start})") from None
