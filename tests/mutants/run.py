"""`pty-acceptance mutants`: every fault of the catalogue on its own fresh
reference host, plus one clean control run, and a kill table of the results.

    reports/mutants/<run id>/kill-table.json   rows: id, requirements, killed,
                                               caught_by, unexpected, marker, seconds
    reports/mutants/<run id>/kill-table.md
    reports/mutants/latest -> <run id>

`supervisor` (go or python, default go) is the reference supervisor
implementation every run deploys (tests/refhost/run.py SUPERVISORS), and
`release` (tests/refhost/tree.py RELEASES, default bookworm) the Debian
release every reference host is booted from; the kill table and the last line
name both.

Exit status 0 only when the control passes and every fault is killed by the
requirement IDs its entry names, but a fault the catalogue says this release's
systemd refuses (Fault.refused_on): its script must fail there (the refusal
proven, a catalogue fact: killed None, refused True), and the suite does not
run. A "withstood" fault (an attack the suite must
shrug off) is killed when the run ends within its deadline with a report,
fails nothing the control does not, gives the control's verdict and passes
its after-suite check. A "start-refused" fault (something at the marker path
that is not the suite's to delete) is killed when the run is refused at
start-up (exit 4, no report, no marker) by a NOT READY line that names one of
its IDs (and its `says`), and its after-suite check passes (what it planted
is still there).

The reference host has findings it truly fails on this machine kind
(tests/refhost/findings.py). The control must fail exactly those tests; a
fault is judged only by the tests it breaks beyond them.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from tests.refhost import findings
from tests.refhost.junit import Report
from tests.refhost.run import (AFTER_SUITE, DEFAULT_SUPERVISOR, EXIT_SETUP_FAILED, EXIT_TIMED_OUT, SUITE_STDERR,
                               SUPERVISORS, run_reference)
from tests.refhost.tree import DEFAULT_RELEASE, RELEASES

from . import catalogue


def _planned(repo: pathlib.Path) -> set[str]:
    sys.path.insert(0, str(repo / "acceptance"))
    from pty_acceptance.spec import checklist

    return {i for s in checklist.load(repo / "ROOT-ACCEPTANCE.md") if s.state == "planned" for i in s.ids}


def run_one(repo: pathlib.Path, out: pathlib.Path, fault: catalogue.Fault | None,
            supervisor: str = DEFAULT_SUPERVISOR, release: str = DEFAULT_RELEASE) -> dict:
    t0 = time.monotonic()
    scripts = []
    with tempfile.TemporaryDirectory(prefix="ptyacc-mutant-") as tmp:
        after = []
        if fault is not None:
            script = pathlib.Path(tmp, f"{fault.id}.sh")
            script.write_text(catalogue.apply_script(fault))
            scripts.append(script)
            if fault.after:
                check = pathlib.Path(tmp, f"{fault.id}-after.sh")
                check.write_text("set -eu\n" + fault.after + "\n")
                after.append(check)
        modules = list(fault.modules) if fault and fault.modules else ["acceptance/"]
        status = run_reference(repo, before_suite=scripts, after_suite=after, out_dir=out,
                               suite_paths=modules, quiet=True,
                               suite_timeout=fault.deadline_s if fault else None, supervisor=supervisor,
                               release=release)
    report = Report.find(out)
    marker = os.path.lexists(out / "pty-supervisor-verified")
    row = {"id": fault.id if fault else "control", "requirements": list(fault.breaks) if fault else [],
           "supervisor": supervisor, "release": release, "modules": modules, "status": status, "marker": marker,
           "kill": fault.kill if fault else None,
           "seconds": round(time.monotonic() - t0, 1)}
    why = fault.refusal(release) if fault else None
    if why is not None:  # a catalogue fact: the fault's own script must have failed, and nothing ran
        row.update(killed=None, caught_by=[], unexpected=[],
                   refused=status == EXIT_SETUP_FAILED and report is None and not marker,
                   note=f"refused by {release}'s systemd: {why}")
        if not row["refused"]:
            row["note"] = (f"the catalogue says {release} refuses it ({why}), but it applied "
                           f"(status {status})")
        return row
    if status == EXIT_TIMED_OUT:
        row.update(killed=False, caught_by=[], unexpected=[],
                   note=f"the suite was still running {fault.deadline_s:g} s later: stopped")
        if (out / AFTER_SUITE).is_file():
            row["after_suite"] = (out / AFTER_SUITE).read_text().strip()[-2000:]
        return row
    if fault is not None and fault.kill == "start-refused":
        return _start_refused(row, fault, out, status, report is not None)
    if report is None:
        row.update(killed=False, caught_by=[], unexpected=[],
                   note=f"no JUnit report: deployment or the fault script failed (status {status})")
        return row
    new = [c for c in report.failed() if not findings.known(c.name)]
    failed = sorted({i for c in new for i in c.requirements})
    row["caught_by"] = failed
    row["tests_failed"] = [c.name for c in new]
    row["messages"] = {c.name: c.message for c in new}  # so a CI log names what failed, not only where
    row["known_findings_failed"] = sorted(findings.case_key(c.name) for c in report.failed()
                                          if findings.known(c.name))
    if fault is None:
        row.update(killed=None, unexpected=failed, blockers=sorted(report.blocker_ids()),
                   finding_ids=sorted(findings.finding_ids(report)))
        return row
    must = set(fault.must_fail)
    if fault.kill == "marker-removed":
        removal = " ".join(report.prop("MARK-4"))
        fresh = marker and bool(fault.planted_marker) and \
            not (out / "pty-supervisor-verified").read_bytes().startswith(fault.planted_marker.encode())
        row["marker_fresh"] = fresh  # the run's own marker replaced the planted one
        row["killed"] = "removed an existing marker" in removal and (not marker or fresh)
        row["caught_by"] = sorted(set(failed) | ({"MARK-4"} if row["killed"] else set()))
    elif fault.kill == "withstood":  # the verdict is compared with the control's in run_mutants
        row["killed"] = not failed
    else:
        row["killed"] = bool(must & set(failed)) and not marker
    if fault.after:
        text = (out / AFTER_SUITE).read_text() if (out / AFTER_SUITE).is_file() else ""
        row["after_suite"] = text.strip()[-2000:]
        if not text.startswith("0 0\n"):
            row["killed"] = False
            row["note"] = ("the after-suite check failed: the attack achieved something" if fault.kill == "withstood"
                           else "the after-suite check failed: the suite touched what it must leave alone")
    if fault.says:
        saying = [c.message for c in new if must & set(c.requirements) and fault.says in (c.message or "")]
        row["says"] = (saying or [""])[0][:300]
        if not saying:
            row["killed"] = False
            row["note"] = f"no failure of {', '.join(sorted(must))} says {fault.says!r}"
    if fault.first_cause:
        first = (report.prop("blocker") or [""])[0]
        row["first_blocker"] = first[:300]
        if fault.first_cause not in first:
            row["killed"] = False
            row["note"] = f"the first blocker is not the fault's cause ({fault.first_cause!r})"
    if fault.secret:
        leaks = _leaks(out, fault.secret)
        if leaks:
            row["killed"] = False
            row["note"] = "the root-only secret or its SHA-256 is in " + ", ".join(leaks)
    row["unexpected"] = sorted(set(failed) - must - set(fault.breaks))
    return row


EXIT_REFUSED = 4  # pytest's usage error: the suite refused the run at start-up


def _start_refused(row: dict, fault: catalogue.Fault, out: pathlib.Path, status: int, reported: bool) -> dict:
    """A start-refused fault's row (the module docstring)."""
    text = "\n".join(p.read_text(errors="replace") for p in (out / SUITE_STDERR, out / "suite-output.txt")
                     if p.is_file())
    refusal = next((line for line in text.splitlines() if line.startswith("ERROR: NOT READY: ")), "")
    named = refusal.removeprefix("ERROR: NOT READY: ").split(": ", 1)[0].split()
    collected = out / "pty-supervisor-verified"  # what stands at the marker path now: the planted file
    if collected.is_file():
        from pty_acceptance.decision.readiness_marker import format_problem

        row["marker"] = format_problem(collected.read_bytes()) is None  # a marker, not what was planted
    caught = sorted(set(named) & set(fault.must_fail)) if status == EXIT_REFUSED else []
    row.update(caught_by=caught, unexpected=[], says=refusal[:300],
               killed=bool(caught) and not reported and not row["marker"] and fault.says in refusal)
    if not row["killed"]:
        row["note"] = (f"not refused at start-up naming {', '.join(fault.must_fail)}"
                       + (f" and {fault.says!r}" if fault.says else "") + f" (status {status})")
    after = (out / AFTER_SUITE).read_text() if (out / AFTER_SUITE).is_file() else ""
    row["after_suite"] = after.strip()[-2000:]
    if fault.after and not after.startswith("0 0\n"):
        row["killed"] = False
        row["note"] = "the after-suite check failed: the suite touched what it must leave alone"
    return row


def withstood(row: dict, control: dict | None) -> None:
    """A withstood fault's verdict must be the control's (READY with its marker on
    a reference host without findings, when no control ran)."""
    want = control["marker"] if control is not None else not findings.KNOWN_FINDINGS
    if row["killed"] and row["marker"] != want:
        row["killed"] = False
        row["note"] = (f"the verdict differs from the control's: marker {row['marker']}, the control's "
                       f"{want}")


def _leaks(out: pathlib.Path, secret: str) -> list[str]:
    """The files of a run's output holding `secret` or its SHA-256 (hex)."""
    needles = [secret.encode(), hashlib.sha256(secret.encode()).hexdigest().encode()]
    found = []
    for f in out.rglob("*"):
        if f.is_file() and not f.is_symlink():
            data = f.read_bytes()
            if any(n in data for n in needles):
                found.append(str(f.relative_to(out)))
    return sorted(found)


def table_md(rows: list[dict]) -> str:
    out = ["| fault | breaks | killed | caught by | unexpected | marker | s | note |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['id']} | {' '.join(r['requirements'])} | {r['killed']} | "
                   f"{' '.join(r['caught_by'])} | {' '.join(r.get('unexpected', []))} | "
                   f"{r['marker']} | {r['seconds']} | {r.get('note', '')} |")
    return "\n".join(out) + "\n"


def run_mutants(repo: pathlib.Path, *, only: list[str] | None = None, jobs: int = 1, control: bool = True,
                supervisor: str = DEFAULT_SUPERVISOR, release: str = DEFAULT_RELEASE) -> int:
    """The faults `only` names (None: the whole catalogue; []: none, the control alone)."""
    repo = repo.resolve()
    if supervisor not in SUPERVISORS:
        print(f"mutants: unknown supervisor implementation {supervisor!r}: one of {sorted(SUPERVISORS)}",
              file=sys.stderr)
        return 4
    if release not in RELEASES:
        print(f"mutants: unknown release {release!r}: one of {sorted(RELEASES)}", file=sys.stderr)
        return 4
    unknown = [o for o in only or () if o not in catalogue.BY_ID]
    if unknown:
        print(f"mutants: unknown fault ids {unknown}", file=sys.stderr)
        return 4
    faults = list(catalogue.FAULTS) if only is None else [catalogue.BY_ID[o] for o in only]
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)
    root = repo / "reports" / "mutants"
    out = root / run_id
    out.mkdir(parents=True)
    t0 = time.monotonic()
    work = ([None] if control else []) + faults
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        rows = list(pool.map(lambda f: run_one(repo, out / (f.id if f else "control"), f, supervisor, release),
                             work))
    planned = _planned(repo)
    problems = []
    if control:
        c = rows[0]
        # The control must pass every test but the known findings, and fail all of
        # those; the gate withholds the marker for planned sections and findings only.
        excused = planned | set(c.get("finding_ids", []))
        ok = not c["caught_by"] and set(c.get("blockers", [])) <= excused and \
            set(c.get("known_findings_failed", [])) == set(findings.KNOWN_FINDINGS) and \
            (c["marker"] or excused) and not (c["marker"] and excused)
        c["killed"] = None
        c["control_ok"] = bool(ok)
        if not ok:
            problems.append(f"control run failed: {c}")
    for r in rows[1 if control else 0:]:
        if "refused" in r:
            if not r["refused"]:
                problems.append(f"{r['id']}: {r['note']}")
            continue
        if r["kill"] == "withstood":
            withstood(r, rows[0] if control else None)
        if not r["killed"]:
            problems.append(f"{r['id']}: not killed (caught by {r['caught_by']}, marker {r['marker']})")
        if r["marker"] and not r.get("marker_fresh") and r["kill"] != "withstood":
            problems.append(f"{r['id']}: a marker was written")
    (out / "kill-table.json").write_text(json.dumps(rows, indent=2) + "\n")
    md = f"supervisor implementation: {supervisor}\nrelease: {release}\n\n" + table_md(rows) + \
        f"\nwall time {round(time.monotonic() - t0, 1)} s, jobs {jobs}\n"
    (out / "kill-table.md").write_text(md)
    tmp = root / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_id)
    tmp.replace(root / "latest")
    print(md)
    for p in problems:
        print("MUTANT PROBLEM:", p)
    refused = sum(1 for r in rows if r.get("refused"))
    print(f"mutants ({release}, {supervisor} supervisor): {len(faults)} faults, "
          f"{sum(1 for r in rows if r['killed'])} killed" + (f", {refused} refused by {release}'s systemd"
                                                             if refused else "") + f"; report in {out}")
    return 1 if problems else 0
