"""What the gate says in the JUnit report's suite-level properties, as
(name, value) pairs made from the records (run_records.py, rules.Decision):
at session start the preflight, MARK-4's removal, which suite judges
(suite_identity.py: its version, commit, tree digest and distributions), the
pins and what was read (SCOPE-2, RUNTIME-1); when the marker is decided the marker-time readings,
the signing and the waivers, before pytest's JUnit writer writes.
recorder.SuiteProperties adds them. The verdict (every blocker, `gate`,
`marker` and the verdict test case) is the end's to set, when it publishes
the report and when the marker stands (reports.settle, end_of_run.py: MARK-1,
SUITE-2).
"""

from __future__ import annotations

from pty_acceptance.decision.run_records import NOT_READ, AtMarkerTime, AtStart, Setup
from pty_acceptance.decision.rules import Decision

FOREIGN_KEPT = 500  # loaded_code's problems kept in the report (the blockers name the first few)
SCOPE_4 = ("host acceptance only: this report says whether this host passed root acceptance; it "
           "is not, and never stands in for, the independent source review's MERGE verdict")


def at_start(setup: Setup, start: AtStart, cleaned: str, sigint: str | None) -> list[tuple[str, str]]:
    """The preflight first (an operator reads the cause before the rest).
    `cleaned`: what the start-up removed of an earlier run; `sigint`: said
    when SIGINT is ignored."""
    out = []
    found = setup.preflight
    if found is not None:
        bad = found.failed
        out.append(("preflight", bad[0].cause if bad else f"passed ({len(found.findings)} checks)"))
        out += [("preflight", f.cause) for f in bad[1:]]
        out += [("host", line.removeprefix("host: ")) for line in found.host_lines()]
    out += [("MARK-4", setup.removal), ("SUITE-5", cleaned)]
    out += [("report-name", setup.report_claim)] if setup.report_claim else []
    out += start.suite.lines() if start.suite is not None else [("suite", start.suite_error)]
    inv = setup.inventory
    if inv is None:
        return out + [("inventory", f"{setup.inventory_file}: did not load")]
    out += [("sigint", sigint)] if sigint else []
    out += [("inventory", f"{inv.file} host {inv.host}"), ("hostname", setup.hostname), ("SCOPE-4", SCOPE_4)]
    out += [("binary-at-start", f"{digest}  {path}") for path, digest in start.hashes.items()]
    out.append(("runtime-at-start", start.runtime[1]))
    out += [("pin", f"revision {inv.revision}"), ("pin", f"source-manifest {inv.source_manifest_sha256}")]
    out += [("pin", f"{b.sha256}  {b.path}") for b in inv.binaries_list]
    out.append(("pin", f"{inv.runtime.sha256}  {inv.runtime.binary}"))
    p = inv.plugin  # PLUGIN-1 runs only these bytes (smoke.py): the Statement's configuration
    out += [("plugin-bun-pin", f"{p.bun_sha256}  {p.bun}"),
            ("plugin-harness-pin", f"{p.harness_sha256}  {p.harness}"),
            ("inventory-file", start.inventory_digest), ("checklist-file", start.checklist_digest),
            ("supervisor-at-start", start.supervisor)]
    return out


def at_decision(setup: Setup, now: AtMarkerTime | None, decision: Decision) -> list[tuple[str, str]]:
    """The marker-time readings (`now` None: the decision failed before they
    were read), the signing and the waivers that stand."""
    content = now.content if now is not None else None
    hashes = content.hashes if content is not None else {}
    out = [("binary-at-marker-time", f"{digest}  {path}") for path, digest in hashes.items()]
    out.append(("runtime-at-marker-time", (content.runtime if content is not None else NOT_READ)[1]))
    if now is not None and now.waivers_digest is not None:
        out.append(("waiver-file", now.waivers_digest))
    if setup.signer:
        out.append(("signing", f"{setup.signer.tool} key {setup.signer.key}"
                    + (": refused, nothing signed" if decision.sign_refused else
                       ": the Statement is signed in a DSSE envelope beside it")))
    out += [("waiver", w.describe()) for w in decision.waivers]
    out += [("foreign-code", p) for p in (now.foreign_code if now is not None else ())[:FOREIGN_KEPT]]
    return out


def watched(stops: tuple[str, ...], unwatched: str | None, bound: str | None) -> list[tuple[str, str]]:
    """SUITE-5: the run's bound and each stop from outside, every one (the
    blockers name the first few)."""
    out = [("run-bound", bound)] if bound else []
    out += [("stop-from-outside", s) for s in stops]
    return out + ([("unwatched", unwatched)] if unwatched else [])
