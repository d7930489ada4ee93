"""The verdict a reviewer reads: one row per ROOT-ACCEPTANCE.md section.

One source: the JUnit report the gate published (its global properties carry
the gate's blockers, the inventory's pins and the hashes seen at start and at
marker time; its cases carry each test's IDs, evidence, concerns and failure
text; its verdict case, reports.VERDICT_CASE, is the gate's and not one of
the checklist's tests). `from_junit` reads it: the run is judged once, by
the gate (decision/rules.decide and the end's steps), and here only that
recorded judgement is read back, by the rule that wrote it
(reports.is_ready). It is READY only when every place of the report agrees
(`disagreements`): the `gate` property READY, no `blocker`, the `marker`
named, the one verdict case passed, and every test case passed; a report
that says READY in some places only (edited: its blockers removed, `gate`
READY, a `marker` added, the verdict case's failure dropped, a test still
failing) is NOT READY, and when it names no blocker it gets one,
`SUITE-2: read back, this report is not READY: <which places>`, that the
matrix, the HTML and the Statement show.

Every place of a report can agree and still be an edited one: a NOT READY
report whose failing test case was deleted (its totals fixed) reads READY
everywhere. What must have run comes from outside the file: the node-id
list (acceptance/node-ids.txt) of the suite that wrote it. A re-render
(`pty-acceptance report`, `fleet-summary`) passes the suite it runs from as
`expected` (`Suite`: its `suite-tree` value and node-id list); the report is then
READY only when it names that very suite-tree and every listed node id is a
passed case of it, and no case is one the list does not name (`against`).
A report of another suite-tree, or of none, cannot have its cases checked
here and is NOT READY, saying so. The gate itself renders the report it
just published without `expected`: it compared what it collected with the list
(nodeid_blockers) and read its tree again at marker time (SUITE-3), in the
run; a fixture project's gate has its own list, not this checkout's.

`rows` turns it into the matrix the terminal,
the HTML report (htmlreport.py) and the in-toto Statement (intoto.py) show.
The gate renders the very report it published, so `pty-acceptance report
FILE.xml` prints what the gate printed.

A row is ACKNOWLEDGED when it would be CONCERN and a reviewed waiver that
stood (waivers.py, the `waiver` property) covers every ID of its concerns.
A row is MUST-FIX when an ID of the section is named by a blocker or a test
of its module did not pass; CONCERN when nothing fails but a test of the
module recorded a `concern` property or the section holds a CONCERN-severity
ID (UNIT-9); PASS otherwise. CONCERN never changes the gate's verdict.

Everything here is host text: the renderers escape it (terminal.escape,
html.escape); this module keeps it as it was recorded.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.report import reports
from pty_acceptance.spec.checklist import Section
from pty_acceptance.spec.requirements import BY_ID, CONCERN, ENFORCED_BY_GATE, sort_key

PASS = "PASS"
MUST_FIX = "MUST-FIX"
ACKNOWLEDGED = "ACKNOWLEDGED"
GATE_ROW = "The run itself (gate)"


@dataclass
class Case:
    nodeid: str
    module: str  # "acceptance/test_x.py"
    ids: list[str]
    outcome: str  # passed, failed, error, skipped
    evidence: list[str] = field(default_factory=list)
    concerns: list[str] = field(default_factory=list)  # "<ID>: text"
    failure: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


@dataclass
class Verdict:
    ready: bool  # the marker was written
    gate: str  # the gate's word in the report: READY / NOT READY
    blockers: list[str]  # "<IDs>: reason"
    cases: list[Case]  # the checklist's tests (the gate's verdict case is not one)
    properties: list[tuple[str, str]]  # the report's global properties, in order
    hostname: str = ""  # the machine's own name (the report's hostname attribute)
    timestamp: str = ""
    suite: str = ""  # the test suite's name: the gate names it after the inventory's host

    def values(self, name: str) -> list[str]:
        return [v for n, v in self.properties if n == name]

    @property
    def host(self) -> str:
        """The host the run judged, as its inventory names it (the `inventory`
        property, "<file> host <name>"); else the suite's name, which the gate
        gives it from the inventory; else the machine's hostname."""
        for value in self.values("inventory"):
            _file, sep, name = value.rpartition(" host ")
            if sep and name:
                return name
        return self.suite if self.suite and self.suite != "pytest" else self.hostname

    def waivers(self) -> dict[str, str]:
        """ID -> the waiver (the `waiver` properties: waivers that stood)."""
        return {w.split(":", 1)[0]: w for w in self.values("waiver")}

    def blocker_ids(self) -> set[str]:
        return reports.blocker_ids(self.blockers)

    @property
    def last_line(self) -> str:
        if self.ready:
            marker = (self.values("marker") or ["?"])[0].split(" (", 1)[0]
            return f"READY: marker written {marker}"
        return reports.not_ready_line(self.blockers)


@dataclass
class Row:
    title: str
    module: str
    ids: tuple[str, ...]
    status: str
    failing: list[str]
    concerns: list[str]  # "<ID>: text"
    cases: list[Case]


class VerdictError(AcceptanceError):
    pass


@dataclass(frozen=True)
class Suite:
    """What a re-render checks a report's cases against, from outside the
    report: the suite the command runs from."""
    tree: str  # its `suite-tree` value, "<sha256>  <n> files" (suite_identity.tree_of)
    node_ids: tuple[str, ...]  # every test of its checklist (acceptance/node-ids.txt)
    where: str  # what it was read from: "the checkout /x", "the installed package /y"


def _nodeid(case: ET.Element) -> tuple[str, str]:
    classname, name = case.get("classname", ""), case.get("name", "")
    module = case.get("file") or classname.rsplit(".", 1)[0].replace(".", "/") + ".py"
    dotted = module[:-3].replace("/", ".") if module.endswith(".py") else module
    rest = classname[len(dotted) + 1:] if classname.startswith(dotted + ".") else ""
    return "::".join([module] + ([*rest.split(".")] if rest else []) + [name]), module


def _failure(case: ET.Element) -> tuple[str, str]:
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        found = case.findall(tag)
        if found:
            text = "\n".join(filter(None, (e.get("message", "") + "\n" + (e.text or "")
                                            for e in found)))
            return outcome, text.strip()
    return "passed", ""


def from_junit(root: ET.Element, expected: Suite | None = None) -> Verdict:
    """The verdict a JUnit report of this suite holds (reports.parse's tree);
    `expected`: a re-render's suite, whose node-id list the cases must be (against)."""
    suite = root.find("./testsuite")
    if suite is None:
        raise VerdictError("not a JUnit report (no testsuite)")
    props = [(reports.base_name(p.get("name", "")), p.get("value", ""))
             for p in suite.findall("./properties/property")]
    cases: list[Case] = []
    seen: dict[str, Case] = {}
    said: list[str] = []  # the gate's verdict case: its outcomes (reports.settle)
    for c in suite.findall("./testcase"):
        if reports.is_verdict_case(c):
            said.append(_failure(c)[0])
            continue
        nodeid, module = _nodeid(c)
        outcome, failure = _failure(c)
        case = seen.get(nodeid)
        if case is None:  # a case reported twice (a teardown error) keeps its worst
            case = seen[nodeid] = Case(nodeid, module, [], outcome, failure=failure)
            cases.append(case)
        elif outcome != "passed":
            case.outcome, case.failure = outcome, "\n".join(filter(None, [case.failure, failure]))
        for p in c.findall("./properties/property"):
            name, value = p.get("name", ""), p.get("value", "")
            if name == "requirement" and value not in case.ids:
                case.ids.append(value)
            elif name == "evidence":
                case.evidence.append(value)
            elif name == "concern":
                case.concerns.append(value)
    gate = ([v for n, v in props if n == "gate"] or ["NOT READY"])[-1]
    blockers = [v for n, v in props if n == "blocker"]
    marker = next((v for n, v in props if n == "marker"), None)
    # the judgement the gate recorded, read by the rule it was written by
    # (reports.is_ready), and READY only when every place of the report agrees:
    # the gate property, no blocker, the marker named, its one verdict case
    # passed, and every test case of the checklist passed (disagreements)
    why_not = disagreements(gate, marker, said, cases)
    if expected is not None:
        why_not += against(expected, [v for n, v in props if n == "suite-tree"], cases)
    ready = reports.is_ready(blockers, marker) and not why_not
    if not ready and not blockers:  # NOT READY, and the report names no blocker: say which part disagrees
        blockers = [f"{DISAGREES}{'; '.join(why_not)}"]
    return Verdict(ready=ready, gate=gate, blockers=blockers, cases=cases, properties=props,
                   hostname=suite.get("hostname", ""), timestamp=suite.get("timestamp", ""),
                   suite=suite.get("name", ""))


DISAGREES = "SUITE-2: read back, this report is not READY: "  # the blocker a re-render adds (from_junit)


def disagreements(gate: str, marker: str | None, said: list[str], cases: list[Case]) -> list[str]:
    """Each place of a report that does not say READY (none: every place
    agrees). An edited report (its blockers removed, `gate` set READY, a
    `marker` added, the verdict case's failure dropped) still holds the test
    case that failed: it is never READY."""
    out = []
    if gate != "READY":
        out.append(f"its gate property says {gate}")
    if marker is None:
        out.append("it names no marker written")
    if said != ["passed"]:
        out.append("its verdict case is missing" if not said else
                   f"its verdict case appears {len(said)} times" if len(said) > 1 else
                   f"its verdict case {said[0]}")
    if not cases:
        out.append("it holds no test case of the checklist")
    failing = [c for c in cases if not c.passed]
    if failing:
        named = ", ".join(f"{c.nodeid} ({c.outcome})" for c in failing[:5])
        out.append(f"{len(failing)} of its {len(cases)} test cases did not pass: {named}"
                   + (f" and {len(failing) - 5} more" if len(failing) > 5 else ""))
    return out


def against(suite: Suite, trees: list[str], cases: list[Case]) -> list[str]:
    """What a report's cases lack against the node-id list of the suite that
    wrote it (none: every listed test is a case of it, and no other case is
    there; that each case passed is disagreements'). `trees`: its
    `suite-tree` values. Only a report of `suite`'s own tree can be checked
    against `suite`'s list: any other is said, with both trees, and never
    READY."""
    if trees != [suite.tree]:
        named = ("names no suite-tree" if not trees else f"names suite-tree {trees[0]}" if len(trees) == 1
                 else f"names {len(trees)} suite-trees ({', '.join(trees)})")
        return [f"it {named}, not {suite.tree} of {suite.where}: its test cases cannot be checked "
                "against the node-id list of the suite that wrote it; re-render it with the checkout "
                "of that suite"]
    out = []
    held = {c.nodeid for c in cases}  # a held case that did not pass: disagreements names it
    missing = [n for n in suite.node_ids if n not in held]
    if missing:
        out.append(f"{len(missing)} of the {len(suite.node_ids)} tests its suite's node-id list names "
                   f"are not among its cases: {', '.join(missing[:5])}"
                   + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    listed = set(suite.node_ids)
    stray = [c.nodeid for c in cases if c.nodeid not in listed]
    if stray:
        out.append(f"{len(stray)} of its test cases are not in its suite's node-id list: {', '.join(stray[:5])}"
                   + (f" and {len(stray) - 5} more" if len(stray) > 5 else ""))
    return out


def _concerns(cases: list[Case], ids: tuple[str, ...]) -> list[str]:
    out = []
    for c in cases:
        out += [t for t in c.concerns if t.split(":", 1)[0] in ids]
        for i in c.ids:  # a CONCERN-severity requirement is reported, never just passed
            if i in ids and BY_ID.get(i) and BY_ID[i].severity == CONCERN \
                    and not any(t.startswith(f"{i}:") for t in c.concerns):
                out += [f"{i}: {e}" for e in c.evidence] or [f"{i}: recorded by {c.nodeid}"]
    return list(dict.fromkeys(out))


def rows(v: Verdict, sections: list[Section] | tuple[Section, ...]) -> list[Row]:
    """One row per section, then the run's own duties (SUITE-1/3/5) and any
    blocker ID no section lists."""
    blocked = v.blocker_ids()
    out: list[Row] = []
    listed: set[str] = set()
    for s in sections:
        listed.update(s.ids)
        cases = [c for c in v.cases if c.module == s.module]
        failing = set(s.ids) & blocked
        for c in cases:
            if not c.passed:
                failing.update(c.ids or ["SUITE-3"])
        if not cases:
            failing.update(s.ids or ["SUITE-3"])
        concerns = _concerns(cases, s.ids)
        status = MUST_FIX if failing else CONCERN if concerns else PASS
        if status == CONCERN and {c.split(":", 1)[0] for c in concerns} <= set(v.waivers()):
            status = ACKNOWLEDGED
        out.append(Row(s.title, s.module, s.ids, status, sorted(failing, key=sort_key),
                       concerns, cases))
    gate_ids = tuple(sorted(set(ENFORCED_BY_GATE) | (blocked - listed), key=sort_key))
    modules = {s.module for s in sections}
    stray = [c for c in v.cases if c.module not in modules]
    failing = (blocked - listed) | {i for c in stray if not c.passed for i in (c.ids or ["SUITE-3"])}
    if not v.ready and not blocked:
        failing.add("SUITE-3")
    out.append(Row(GATE_ROW, "", gate_ids, MUST_FIX if failing else PASS,
                   sorted(failing, key=sort_key), [], stray))
    return out


def terminal_lines(v: Verdict, table: list[Row], width: int = 160) -> list[str]:
    """The matrix as text lines (not yet escaped: the caller escapes each)."""
    lines = ["requirement matrix (one row per ROOT-ACCEPTANCE.md section):"]
    for r in table:
        head = f"  {r.status:<9} {r.title} [{' '.join(r.ids)}]"
        if r.failing:
            head += f"  failing: {' '.join(r.failing)}"
        lines.append(head)
        for c in r.concerns:
            lines.append("            concern " + (c if len(c) <= width else c[:width] + "..."))
        waived = v.waivers()
        for i in dict.fromkeys(c.split(":", 1)[0] for c in r.concerns):
            if i in waived:
                lines.append("            waiver " + waived[i])
    return lines
