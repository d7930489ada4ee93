"""The requirement catalogue: every ID a test, a JUnit property or a failure
message may name. One record per requirement, in requirements.yml beside this
module (ID, severity, title, the checklist's text); this module loads and
checks it once, at import. Same IDs as ROOT-ACCEPTANCE.md, which is rendered
from the same records (checklist.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from pty_acceptance.errors import AcceptanceError

MUST_FIX = "MUST-FIX"
CONCERN = "CONCERN"
SEVERITIES = (MUST_FIX, CONCERN)
RECORDS = Path(__file__).with_name("requirements.yml")
DUTIES = "duties"  # the checklist's section of the suite's own duties (no module of its own)
_ID = re.compile(r"^[A-Z]+-[1-9]\d*$")


class CatalogueError(AcceptanceError):
    """requirements.yml is not a catalogue this suite can judge by."""

    requirements = ("SUITE-3",)


@dataclass(frozen=True)
class ChecklistItem:
    section: str  # a module of the table ("test_ownership.py") or DUTIES
    text: str  # markdown: one bullet of that section, its bold label first


@dataclass(frozen=True)
class SectionRecord:
    """A row of the checklist's table: a module of acceptance/ and what it is
    (checklist.Section is the row as the gate reads it back, with its IDs)."""

    module: str  # "test_ownership.py"
    title: str
    state: str


@dataclass(frozen=True)
class Requirement:
    id: str
    group: str
    severity: str
    title: str
    enforced_by_gate: bool = False
    checklist: tuple[ChecklistItem, ...] = ()


def _load(path: Path) -> tuple[tuple[SectionRecord, ...], tuple[Requirement, ...]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise CatalogueError(f"{path}: {e}") from None
    sections = tuple(SectionRecord(s["module"], s["title"], s["state"]) for s in data["sections"])
    known = {s.module for s in sections} | {DUTIES}
    out = []
    for rec in data["requirements"]:
        id_, severity = rec["id"], rec["severity"]
        if not _ID.match(id_) or severity not in SEVERITIES:
            raise CatalogueError(f"{path}: record {id_!r}: an ID is GROUP-<n> and severity one of {SEVERITIES}")
        items = tuple(ChecklistItem(i["in"], i["text"]) for i in rec.get("checklist") or ())
        stray = [i.section for i in items if i.section not in known]
        if stray:
            raise CatalogueError(f"{path}: {id_}: checklist text for sections the table does not list: {stray}")
        out.append(Requirement(id_, id_.split("-")[0], severity, rec["title"],
                               bool(rec.get("enforced_by_gate")), items))
    ids = [r.id for r in out]
    if len(set(ids)) != len(ids):
        raise CatalogueError(f"{path}: an ID has more than one record")
    return sections, tuple(out)


SECTIONS, CATALOGUE = _load(RECORDS)
BY_ID: dict[str, Requirement] = {r.id: r for r in CATALOGUE}

# Duties of the run itself, enforced by the marker gate at the end of the
# session rather than by one test case: they need no covering acceptance test
# (their records say so: enforced_by_gate).
ENFORCED_BY_GATE = frozenset(r.id for r in CATALOGUE if r.enforced_by_gate)


def unknown(ids) -> list[str]:
    return [i for i in ids if i not in BY_ID]


def of_group(group: str) -> str:
    """The group's IDs as a message names them: 'UNIT-1..9' (from the catalogue, never typed)."""
    nums = sorted(int(r.id.split("-")[1]) for r in CATALOGUE if r.group == group)
    if not nums:
        raise KeyError(group)
    return f"{group}-{nums[0]}" if len(nums) == 1 else f"{group}-{nums[0]}..{nums[-1]}"


def sort_key(id_: str) -> tuple[int, int]:
    """Catalogue order, so that reports list IDs the way the checklist does."""
    order = [r.group for r in CATALOGUE]
    group, _, num = id_.partition("-")
    g = order.index(group) if group in order else len(order)
    return (g, int(num) if num.isdigit() else 0)
