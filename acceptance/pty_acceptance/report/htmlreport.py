"""The verdict as one HTML file a reviewer opens anywhere: no script, no
network (a Content-Security-Policy forbids both), every host-derived string
through terminal.escape (control characters become visible \\xNN) and then
html.escape, so that evidence can never become markup.

Layout: the first screen a reviewer reads (issue 32 item 5): the gate's
verdict (READY's last line, or NOT READY and the count), the host as the
inventory names it, the suite that judged (version, commit, whether its files
differed from it, their digest), the counts (tests, passed, passed with concerns, failed,
not run), the in-toto Statement's result (WARNED when any test carries a
concern), the IDs with concerns; the first causes of what did not pass,
grouped (one line per cause with its count and the tests under it), the
blockers; the matrix by section, each ID a
cell coloured by its outcome in that section and linking to the ID's entry;
the inventory's pins and the hashes read at start and at marker time; one
entry per catalogue ID listing its test cases; one entry per test case with
its evidence, concerns and failure text.
"""

from __future__ import annotations

import html
import re

from dataclasses import dataclass

from pty_acceptance.host import terminal
from pty_acceptance.spec.requirements import BY_ID, CATALOGUE, CONCERN, sort_key
from pty_acceptance.report import intoto
from pty_acceptance.report.verdict import ACKNOWLEDGED, MUST_FIX, PASS, Case, Row, Verdict

STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#111}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #999;padding:.25em .5em;vertical-align:top;text-align:left}
.PASS{background:#c8f0c8}.CONCERN{background:#ffe19a}.MUST-FIX{background:#f6b0b0}
.ACKNOWLEDGED{background:#bcd8ff}
pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;padding:.4em;margin:.2em 0}
.verdict{font-size:1.3em;font-weight:bold;padding:.4em}
.glance th{background:#eee;width:11em}.glance td{font-size:1.1em}
code{word-break:break-all}
"""
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'none'"


def text(s: str) -> str:
    """Host text as HTML text: control characters visible, markup inert."""
    return html.escape(terminal.escape(s, keep_newlines=True), quote=True)


def anchor(kind: str, key: str) -> str:
    return f"{kind}-" + "".join(c if c.isalnum() or c in "-_" else f"_{ord(c):x}" for c in key)


def id_status(row: Row, i: str, waived: dict[str, str]) -> str:
    if i in row.failing:
        return MUST_FIX
    if any(c.startswith(f"{i}:") for c in row.concerns):
        return ACKNOWLEDGED if i in waived else CONCERN
    return PASS


_WRAPPED = re.compile(r'^failed on (?:setup|teardown) with "(?P<m>.*)"$')
# how pytest names the exception before its message: the suite's one way to fail, an assert
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?:Failed|AssertionError): ")
CAUSES_SHOWN = 5


def cause_of(c: Case) -> str:
    """What a case that did not pass says first, without pytest's wrapping."""
    first = c.failure.split("\n", 1)[0].strip()
    m = _WRAPPED.match(first)
    return _RAISED.sub("", m.group("m") if m else first)


def first_causes(v: Verdict) -> list[tuple[str, list[Case]]]:
    """Why cases did not pass, grouped by what they say first, most cases
    first ("setup failed: the system bus is not reachable" x105 is one line),
    at most CAUSES_SHOWN of them: a single failure's own first line too, so
    the first screen says why, not only which test. A preflight's cause is its
    full text (the report's `preflight` property)."""
    groups: dict[str, list[Case]] = {}
    for c in v.cases:
        if not c.passed:
            groups.setdefault(cause_of(c), []).append(c)
    full = (v.values("preflight") or [""])[0]
    out = []
    for cause, cases in sorted(groups.items(), key=lambda g: -len(g[1])):
        shown = f"not run: preflight: {full}" if cause.startswith("not run: preflight") and full else cause
        out.append((shown, cases))
    return out[:CAUSES_SHOWN]


PASSED_WITH_CONCERNS = "passed with concerns"


def case_class(c: Case) -> str:
    """A case's colour: a pass that carries a concern is never a plain green pass."""
    return (CONCERN if intoto.warned(c) else PASS) if c.passed else MUST_FIX


def case_word(c: Case) -> str:
    return PASSED_WITH_CONCERNS if c.passed and intoto.warned(c) else c.outcome


@dataclass(frozen=True)
class Counts:
    """The test cases by what a reviewer asks first (the Statement's
    passedTests, warnedTests and failedTests; failed split from not run)."""
    tests: int
    passed: int  # and no concern
    concerns: int  # passed, with a concern (warnedTests)
    failed: int  # failed or erred
    not_run: int  # withheld ("not run: ..."), or skipped

    @classmethod
    def of(cls, v: Verdict) -> "Counts":
        not_run = [c for c in v.cases if not c.passed
                   and (c.outcome == "skipped" or cause_of(c).startswith("not run"))]
        concerns = [c for c in v.cases if c.passed and intoto.warned(c)]
        passed = sum(1 for c in v.cases if c.passed) - len(concerns)
        return cls(len(v.cases), passed, len(concerns), len(v.cases) - passed - len(concerns) - len(not_run),
                   len(not_run))


def glance(v: Verdict, table: list[Row]) -> list[str]:
    """The first screen: host, counts, the Statement's result, the concerns."""
    n = Counts.of(v)
    warned = [c.nodeid for c in v.cases if c.passed and intoto.warned(c)]
    result = intoto.result(v.ready, warned)
    inventory = (v.values("inventory") or [""])[0].rpartition(" host ")[0]
    host = f"<b>{text(v.host or '(not recorded)')}</b>"
    if inventory:
        host += f" (inventory <code>{text(inventory)}</code>)"
    if v.hostname and v.hostname != v.host:
        host += f"; the machine calls itself {text(v.hostname)}"
    counts = (f"<b>{n.tests}</b> tests: <span class=\"{PASS}\">{n.passed} passed</span>, "
              f"<span class=\"{CONCERN if n.concerns else PASS}\">{n.concerns} {PASSED_WITH_CONCERNS}</span>, "
              f"<span class=\"{MUST_FIX if n.failed else PASS}\">{n.failed} failed</span>, "
              f"<span class=\"{MUST_FIX if n.not_run else PASS}\">{n.not_run} not run</span>")
    word = {"PASSED": PASS, "WARNED": CONCERN}.get(result, MUST_FIX)
    why = {"PASSED": "READY, no test carries a concern",
           "WARNED": f"READY; {n.concerns} tests carry a concern: warnedTests",
           "FAILED": "not READY"}[result]
    concerned: dict[str, str] = {}
    for r in table:
        for c in r.concerns:
            i = c.split(":", 1)[0]
            concerned[i] = id_status(r, i, v.waivers()) if i in r.ids else CONCERN
    ids = " ".join(f'<a class="{st}" href="#{anchor("req", i)}">{text(i)}</a>'
                   for i, st in sorted(concerned.items(), key=lambda kv: sort_key(kv[0])))
    blockers = f'<a href="#blockers">{len(v.blockers)}</a>' if v.blockers else "none"
    version, commit = (v.values("suite-version") or [""])[0], (v.values("suite-commit") or [""])[0]
    tree = (v.values("suite-tree") or [""])[0].partition("  ")[0]
    modified = (v.values("suite-modified") or [""])[0]
    suite = (f"opencode-pty-acceptance <b>{text(version)}</b>, commit <code>{text(commit)}</code>"
             f" (modified: {text(modified)}), files <code>{text(tree)}</code>" if version or tree
             else "(not recorded)")
    out = ['<table class="glance" id="glance">',
           f"<tr><th>Host</th><td>{host}</td></tr>",
           f'<tr><th>Suite</th><td id="suite">{suite}</td></tr>',
           f"<tr><th>Tests</th><td>{counts}</td></tr>",
           f'<tr><th>in-toto Statement</th><td><span class="{word}"><b>{result}</b></span> ({why})</td></tr>',
           f"<tr><th>Concerns</th><td>{ids or 'none'}</td></tr>",
           f"<tr><th>Blockers</th><td>{blockers}</td></tr>",
           f"<tr><th>Report time</th><td>{text(v.timestamp or '(not recorded)')}</td></tr>",
           "</table>"]
    return out


def render(v: Verdict, table: list[Row], title: str) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
           f"<title>{text(title)}</title><style>{STYLE}</style></head><body>",
           f"<h1>{text(title)}</h1>"]
    word = "READY" if v.ready else "NOT READY"
    headline = v.last_line if v.ready else f"NOT READY: {len(v.blockers)} blockers"
    out.append(f'<p class="verdict {"PASS" if v.ready else "MUST-FIX"}" id="verdict">'
               f"{text(headline)}</p>")
    out += glance(v, table)
    out.append(f"<p>Gate: <b>{word}</b>. This is host acceptance only (SCOPE-4): it never stands in for "
               "the source review's verdict.</p>")
    causes = first_causes(v)
    if causes:
        out.append('<h2 id="causes">First causes</h2><ul>')
        for cause, cases in causes:
            modules: dict[str, list[Case]] = {}
            for c in cases:
                modules.setdefault(c.module, []).append(c)
            listed = "".join(f"<li><code>{text(m)}</code>: {len(cs)}: "
                             + ", ".join(text(c.nodeid.split("::", 1)[-1]) for c in cs) + "</li>"
                             for m, cs in modules.items())
            out.append(f'<li class="MUST-FIX">{text(cause)} <b>x{len(cases)}</b>'
                       f"<details><summary>the {len(cases)} tests, by module</summary><ul>{listed}"
                       "</ul></details></li>")
        out.append("</ul>")
    if v.blockers:
        out.append('<h2 id="blockers">Blockers</h2><ul>')
        out += [f"<li>{text(b)}</li>" for b in v.blockers]
        out.append("</ul>")

    out.append('<h2 id="matrix">Requirement matrix</h2><table><tr><th>Section</th><th>Module</th>'
               "<th>Outcome</th><th>Requirements</th><th>Failing</th></tr>")
    for r in table:
        cells = "".join(f'<td class="{id_status(r, i, v.waivers())}"><a href="#{anchor("req", i)}">{text(i)}</a></td>'
                        for i in r.ids)
        failing = " ".join(f'<a href="#{anchor("req", i)}">{text(i)}</a>' for i in r.failing)
        out.append(f'<tr><td>{text(r.title)}</td><td><code>{text(r.module)}</code></td>'
                   f'<td class="{r.status}">{r.status}</td>'
                   f'<td><table><tr>{cells}</tr></table></td><td>{failing}</td></tr>')
        for concern in r.concerns:
            out.append(f'<tr><td></td><td colspan="4" class="CONCERN">concern: {text(concern)}</td></tr>')
        for i in dict.fromkeys(c.split(":", 1)[0] for c in r.concerns):
            if i in v.waivers():
                out.append(f'<tr><td></td><td colspan="4" class="ACKNOWLEDGED">waiver: '
                           f"{text(v.waivers()[i])}</td></tr>")
    out.append("</table>")

    out.append('<h2 id="hashes">Pins and hashes</h2><table><tr><th>What</th><th>Value</th></tr>')
    for name in ("waiver", "waiver-file", "pin", "plugin-bun-pin", "plugin-harness-pin",
                 "binary-at-start", "runtime-at-start", "binary-at-marker-time",
                 "runtime-at-marker-time", "inventory-file", "checklist-file", "inventory",
                 "marker", "supervisor-at-start", "MARK-4", "SUITE-5", "suite-version", "suite-commit",
                 "suite-modified", "suite-tree", "suite-distributions", "suite"):
        for value in v.values(name):
            out.append(f"<tr><td>{text(name)}</td><td><code>{text(value)}</code></td></tr>")
    out.append("</table>")

    index = {c.nodeid: n for n, c in enumerate(v.cases)}
    out.append('<h2 id="requirements">Requirements</h2>')
    for req in CATALOGUE:
        cases = [c for c in v.cases if req.id in c.ids]
        sev = " (CONCERN: reported, never blocking)" if req.severity == CONCERN else ""
        out.append(f'<h3 id="{anchor("req", req.id)}">{text(req.id)}{sev}: {text(req.title)}</h3><ul>')
        if not cases:
            out.append("<li>no test case of this report names it</li>")
        for c in cases:
            out.append(f'<li class="{case_class(c)}">{text(case_word(c))} '
                       f'<a href="#{anchor("case", str(index[c.nodeid]))}">{text(c.nodeid)}</a></li>')
        out.append("</ul>")

    out.append('<h2 id="cases">Test cases</h2>')
    for n, c in enumerate(v.cases):
        ids = " ".join(f'<a href="#{anchor("req", i)}">{text(i)}</a>' if i in BY_ID else text(i)
                       for i in c.ids)
        out.append(f'<h3 id="{anchor("case", str(n))}" class="{case_class(c)}">'
                   f"{text(case_word(c))}: {text(c.nodeid)}</h3><p>Requirements: {ids}</p>")
        for e in c.evidence:
            out.append(f"<pre>evidence: {text(e)}</pre>")
        for e in c.concerns:
            out.append(f'<pre class="CONCERN">concern: {text(e)}</pre>')
        if c.failure:
            out.append(f'<pre class="MUST-FIX">{text(c.failure)}</pre>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
