"""ROOT-ACCEPTANCE.md as the gate reads it: the table of sections, each with
the module that proves it and the requirement IDs it covers.

A row looks like:  | Ownership | `acceptance/test_ownership.py` | OWN-1, OWN-2 | ... |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.spec.requirements import BY_ID

ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*`(acceptance/test_[a-z0-9_]+\.py)`\s*\|\s*([^|]*?)\s*\|"
                 r"(?:\s*([^|]*?)\s*\|)?")
ID = re.compile(r"\b[A-Z]+-\d+\b")


class ChecklistError(AcceptanceError):
    pass


@dataclass(frozen=True)
class Section:
    title: str
    module: str  # path relative to the project root
    ids: tuple[str, ...]
    state: str = ""  # what the checklist says of it ("built", "planned", ...): for people


def load(path: Path) -> list[Section]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ChecklistError(f"{path}: {e.strerror}: the gate cannot know which modules must run") from None
    sections = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            ids = tuple(ID.findall(m.group(3)))
            bad = [i for i in ids if i not in BY_ID]
            if bad:
                raise ChecklistError(f"{path}: section {m.group(1)!r} names unknown IDs {bad}")
            sections.append(Section(m.group(1), m.group(2), ids, m.group(4) or ""))
    if not sections:
        raise ChecklistError(f"{path}: no module table found")
    modules = [s.module for s in sections]
    if len(set(modules)) != len(modules):
        raise ChecklistError(f"{path}: a module is listed twice")
    return sections
