"""Reviewed waivers: a CONCERN acknowledged, never a failure excused.

    waivers:
      - id: UNIT-9
        reason: exposure 2.1 accepted for the pilot (review note 14)
        who: A. Reviewer
        expires: 2027-01-31

`--waivers FILE` names the file. It must pass OWN-1's chain check (a
root-owned regular file no group or other can write, every directory from /
likewise, no link anywhere), or the run is NOT READY. Each waiver must name
an ID that recorded a concern in this run (a `concern` property, or a
CONCERN requirement such as UNIT-9 that a test names) and that no blocker
names; an expired waiver (its `expires` day is before today, UTC), a waiver
for a failing ID, for an ID with nothing to acknowledge or for an unknown ID
is itself a blocker. A valid waiver only turns a CONCERN row of the matrix
into an ACKNOWLEDGED one (the `waiver` JUnit property): it never changes
what blocks the marker.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import yaml

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs
from pty_acceptance.spec.requirements import BY_ID

LIMIT = 1 << 20
KEYS = ("id", "reason", "who", "expires")


class WaiverError(AcceptanceError):
    def __init__(self, rule: str, text: str):
        super().__init__(text, requirements=(rule,))


@dataclass(frozen=True)
class Waiver:
    id: str
    reason: str
    who: str
    expires: datetime.date

    def describe(self) -> str:
        return f"{self.id}: {self.reason} (acknowledged by {self.who}, until {self.expires.isoformat()})"


def load(path: str) -> list[Waiver]:
    path = os.path.abspath(path)
    problems = hostfs.chain_problems(path) + hostfs.Node.at(path).root_controlled_problems("regular file")
    if problems:
        raise WaiverError("OWN-1", f"waiver file {path} fails the OWN-1 chain check: {problems[0]}")
    try:
        data = hostfs.read_file(path, LIMIT)
    except OSError as e:
        raise WaiverError("OWN-1", f"waiver file {path} cannot be read safely: {e}") from None
    if len(data) > LIMIT:
        raise WaiverError("SUITE-3", f"waiver file {path} is over {LIMIT} bytes")
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise WaiverError("SUITE-3", f"waiver file {path} does not parse: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict) or set(doc) != {"waivers"} or not isinstance(doc["waivers"], list):
        raise WaiverError("SUITE-3", f"waiver file {path}: expected exactly one key 'waivers', a list")
    out = []
    for n, w in enumerate(doc["waivers"], start=1):
        where = f"waiver file {path}, waiver {n}"
        if not isinstance(w, dict) or set(w) != set(KEYS):
            raise WaiverError("SUITE-3", f"{where}: expected exactly the keys {', '.join(KEYS)}")
        for k in KEYS[:3]:
            if not isinstance(w[k], str) or not w[k].strip():
                raise WaiverError("SUITE-3", f"{where}: {k} must be a non-empty string")
        expires = w["expires"]
        if isinstance(expires, str):
            try:
                expires = datetime.date.fromisoformat(expires)
            except ValueError:
                pass
        if not isinstance(expires, datetime.date) or isinstance(expires, datetime.datetime):
            raise WaiverError("SUITE-3", f"{where}: expires must be a day (YYYY-MM-DD)")
        out.append(Waiver(w["id"].strip(), w["reason"].strip(), w["who"].strip(), expires))
    return out


def problems(waivers: list[Waiver], concern_ids: set[str], failing_ids: set[str],
             today: datetime.date) -> list[tuple[tuple[str, ...], str]]:
    """(IDs, reason) for every waiver that may not stand."""
    out: list[tuple[tuple[str, ...], str]] = []
    for w in waivers:
        if w.id not in BY_ID:
            out.append((("SUITE-3",), f"a waiver names {w.id!r}, which is no requirement ID"))
        elif w.expires < today:
            out.append(((w.id,), f"the waiver for {w.id} by {w.who} expired on {w.expires.isoformat()}"))
        elif w.id in failing_ids:
            out.append(((w.id,), f"a waiver for {w.id} (by {w.who}), which is MUST-FIX in this run: "
                                 "a waiver acknowledges a CONCERN, never a failure"))
        elif w.id not in concern_ids:
            out.append(((w.id,), f"a waiver for {w.id} (by {w.who}), which recorded no concern in this "
                                 "run: a waiver acknowledges a CONCERN, nothing else"))
    return out
