"""ROOT-ACCEPTANCE.md as the gate reads it, and as it is rendered.

The gate reads the table of sections, each with the module that proves it and
the requirement IDs it covers. A row looks like:
  | Ownership | `acceptance/test_ownership.py` | OWN-1, OWN-2 | ... |

The table and every section's requirement bullets are not typed: they are
rendered (`render`) between `<!-- BEGIN ... -->` and `<!-- END ... -->` lines
from the requirement records (requirements.yml) and the IDs each module's
tests name (acceptance/node-ids.txt). The prose around them is the
checklist's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.spec.requirements import BY_ID, CATALOGUE, SECTIONS

ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*`(acceptance/test_[a-z0-9_]+\.py)`\s*\|\s*([^|]*?)\s*\|"
                 r"(?:\s*([^|]*?)\s*\|)?")
ID = re.compile(r"\b[A-Z]+-\d+\b")
ROOT_SECTION_PREFIX = "acceptance/"  # a row's module is the records' section module below acceptance/


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


_BLOCK = re.compile(r"^<!-- BEGIN (sections|requirements [a-z0-9_.]+) -->\n.*?^<!-- END \1 -->\n",
                    re.M | re.S)


def table_ids(ids_in_order: Iterable[str]) -> list[str]:
    """A module's IDs as its table row lists them: groups in the order its
    tests first name them, each group's IDs by number."""
    ids_in_order = list(ids_in_order)
    groups: list[str] = []
    for i in ids_in_order:
        g = i.split("-")[0]
        if g not in groups:
            groups.append(g)
    unique = list(dict.fromkeys(ids_in_order))
    return sorted(unique, key=lambda i: (groups.index(i.split("-")[0]), int(i.split("-")[1])))


def module_ids(node_ids: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """'test_x.py' -> its table IDs, from the node-id list (nodeids.parse)."""
    named: dict[str, list[str]] = {}
    for nodeid, ids in node_ids.items():
        named.setdefault(nodeid.split("::", 1)[0].removeprefix("acceptance/"), []).extend(ids)
    return {m: table_ids(ids) for m, ids in named.items()}


def _table(ids_of: dict[str, list[str]]) -> str:
    rows = ["| Section | Module | Requirements | State |", "|---|---|---|---|"]
    rows += [f"| {s.title} | `acceptance/{s.module}` | {', '.join(ids_of.get(s.module, []))} | {s.state} |"
             for s in SECTIONS]
    return "\n".join(rows) + "\n"


def _bullets(section: str, ids_of: dict[str, list[str]]) -> str:
    order = ids_of.get(section, [])
    items = [(order.index(r.id) if r.id in order else len(order), n, item)
             for n, r in enumerate(CATALOGUE) for item in r.checklist if item.section == section]
    out = []
    for *_, item in sorted(items, key=lambda t: t[:2]):
        first, *rest = item.text.rstrip("\n").split("\n")
        out.append("- " + first)
        out += ["  " + line if line else "" for line in rest]
    return "\n".join(out) + "\n" if out else ""


def render(text: str, node_ids: dict[str, tuple[str, ...]]) -> str:
    """ROOT-ACCEPTANCE.md with its generated blocks made anew from the records."""
    ids_of = module_ids(node_ids)

    def block(m: re.Match[str]) -> str:
        key = m.group(1)
        body = _table(ids_of) if key == "sections" else _bullets(key.split(" ", 1)[1], ids_of)
        return f"<!-- BEGIN {key} -->\n{body}<!-- END {key} -->\n"

    return _BLOCK.sub(block, text)
