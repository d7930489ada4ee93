"""The run as an in-toto Statement (predicate: test-result v0.1).

    subject        the three binaries and the runtime, each with the SHA-256
                   the gate read at marker time (JUnit properties
                   binary-at-marker-time, runtime-at-marker-time)
    result         PASSED only when the marker was written, else FAILED
    passedTests    node ids that passed and recorded no concern
    warnedTests    node ids that passed with a concern (CONCERN rows)
    failedTests    node ids that failed, erred or were skipped
    configuration  the inventory, the JUnit report and ROOT-ACCEPTANCE.md,
                   each a resource descriptor with its SHA-256 (the JUnit
                   report's annotated with the host the run judged: `host`,
                   the inventory's name for it, and `hostname`, the
                   machine's); and bun and
                   the smoke harness PLUGIN-1 runs, with their pins
                   (plugin-bun-pin, plugin-harness-pin): PLUGIN-1 passes
                   only when both hash to them before every run; and the
                   suite that judged (suite-tree, suite-commit,
                   suite-distributions: suite_identity.py): its files'
                   digest with its version, the checkout's git commit
                   with whether the files differed from it, and the
                   virtualenv's distribution set

Built from the same Verdict as the matrix (verdict.py). Signed, when the
operator names a key and a host tool (--sign-key), in a DSSE envelope beside
it (signing.py); never by a signature made here.
"""

from __future__ import annotations

import json

from pty_acceptance.spec.requirements import BY_ID, CONCERN
from pty_acceptance.report.verdict import Verdict

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
MEDIA_TYPE = "application/vnd.in-toto+json"
PLUGIN_PIN = ("the inventory's pin, from the review: PLUGIN-1 passes only when bun and the "
              "harness copy it runs hash to it, by descriptor, before every run")
SUITE = "opencode-pty-acceptance"
SUITE_TREE = ("the SHA-256 of sha256sum lines over the suite's files (acceptance/, conftest.py, "
              "ROOT-ACCEPTANCE.md, pyproject.toml, requirements/target.txt), sorted by path: "
              "`pty-acceptance suite-identity` prints them for any checkout")


def hashed(value: str) -> tuple[str, str] | None:
    """"<64 hex>  <path>" (sha256sum's line) -> (path, digest)."""
    digest, sep, path = value.partition("  ")
    if sep and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
        return path, digest
    return None


def _descriptors(values: list[str]) -> list[dict]:
    out = []
    for v in values:
        found = hashed(v)
        if found:
            out.append({"name": found[0], "digest": {"sha256": found[1]}})
    return out


def judged(v: Verdict) -> dict[str, str]:
    """The host the run judged, on the JUnit report's descriptor: its name in
    the inventory and the machine's own name, as the report records them
    (issue 38 item 10: a Statement says whose verdict it is)."""
    return {"host": v.host or "(not recorded)", "hostname": v.hostname or "(not recorded)"}


def host_of(statement: dict) -> tuple[str, str] | None:
    """(host, hostname) a Statement names on its JUnit report's descriptor, or None."""
    predicate = statement.get("predicate")
    configuration = predicate.get("configuration") if isinstance(predicate, dict) else None
    for c in configuration if isinstance(configuration, list) else []:
        notes = c.get("annotations") if isinstance(c, dict) else None
        if isinstance(notes, dict) and c.get("mediaType") == "application/xml" and "host" in notes:
            return str(notes.get("host")), str(notes.get("hostname"))
    return None


def _hex(value: str, n: int) -> bool:
    return len(value) == n and all(c in "0123456789abcdef" for c in value)


def suite_descriptors(v: Verdict) -> list[dict]:
    """The suite that judged: its files, its commit, its virtualenv (what the
    report's suite-* properties say; none for a report older than them)."""
    out: list[dict] = []
    version = (v.values("suite-version") or [""])[0]
    for value in v.values("suite-tree")[:1]:
        digest, _, files = value.partition("  ")
        if _hex(digest, 64):
            out.append({"name": f"{SUITE} files", "digest": {"sha256": digest},
                        "annotations": {"version": version, "files": files, "digestSource": SUITE_TREE}})
    for commit in v.values("suite-commit")[:1]:
        if _hex(commit, 40):
            out.append({"name": f"{SUITE} commit", "digest": {"gitCommit": commit},
                        "annotations": {"version": version,
                                        "modified": (v.values("suite-modified") or ["not recorded"])[0]}})
    for value in v.values("suite-distributions")[:1]:
        digest, _, names = value.partition("  ")
        if _hex(digest, 64):
            out.append({"name": f"{SUITE} virtualenv", "digest": {"sha256": digest},
                        "annotations": {"distributions": names.split()}})
    return out


def warned(case) -> bool:
    return bool(case.concerns) or any(BY_ID.get(i) and BY_ID[i].severity == CONCERN for i in case.ids)


def result(ready: bool, warned: list[str]) -> str:
    """The test-result predicate's word for the run: FAILED unless READY (the
    marker written); READY with any CONCERN row (warnedTests) is WARNED, never
    PASSED; PASSED only when READY with nothing recorded as a concern. A policy
    that accepts READY accepts PASSED and WARNED, and reads warnedTests."""
    if not ready:
        return "FAILED"
    return "WARNED" if warned else "PASSED"


def statement(v: Verdict, junit_name: str, junit_sha256: str) -> dict:
    subjects = _descriptors(v.values("binary-at-marker-time") + v.values("runtime-at-marker-time"))
    seen = {s["name"] for s in subjects}
    for source, why in (("binary-at-start", "read at session start, not at marker time"),
                        ("runtime-at-start", "read at session start, not at marker time"),
                        ("pin", "the inventory's claim; not read by the gate")):
        for d in _descriptors(v.values(source)):  # an older report, or unreadable at marker time
            if d["name"] not in seen:
                d["annotations"] = {"digestSource": why}
                subjects.append(d)
                seen.add(d["name"])
    config = _descriptors(v.values("inventory-file"))
    config.append({"name": junit_name, "digest": {"sha256": junit_sha256},
                   "mediaType": "application/xml", "annotations": judged(v)})
    config += _descriptors(v.values("checklist-file")) + _descriptors(v.values("waiver-file"))
    for source, role in (("plugin-bun-pin", "bun"), ("plugin-harness-pin", "harness")):
        for d in _descriptors(v.values(source)):
            d["annotations"] = {"requirement": "PLUGIN-1", "role": f"the plugin smoke {role}",
                                "digestSource": PLUGIN_PIN}
            config.append(d)
    config += suite_descriptors(v)
    passed = [c.nodeid for c in v.cases if c.passed and not warned(c)]
    warn = [c.nodeid for c in v.cases if c.passed and warned(c)]
    failed = [c.nodeid for c in v.cases if not c.passed]
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "result": result(v.ready, warn),
            "configuration": config,
            "passedTests": passed,
            "warnedTests": warn,
            "failedTests": failed,
        },
    }


def dumps(st: dict) -> bytes:
    """ASCII JSON: every control character and non-ASCII character of a node
    id is a \\u escape, never a raw byte."""
    return (json.dumps(st, indent=2, ensure_ascii=True) + "\n").encode("ascii")
