"""`pty-acceptance`: the suite's command line.

    pty-acceptance verify-marker [--marker PATH] [--root DIR] [--inventory FILE]
                                 [--revision HEX40] [--source-sha256 HEX64]
                                 [--supervisor-sha256 HEX64 --launcher-sha256 HEX64 --client-sha256 HEX64]
    pty-acceptance source-manifest --pilot-root DIR --code-root DIR [--list]
    pty-acceptance reference [--release bookworm|trixie] [--supervisor go|python]
                             [--before-suite SCRIPT]... [--after-suite SCRIPT]... [--keep] [-- PYTEST-ARGS]
    pty-acceptance mutants [--release bookworm|trixie] [--supervisor go|python] [--only ID]... [--jobs N]
    pty-acceptance bench [--runs N] [--warmup N] [--repeats N] [--rev REV] [--what-if WORD] | --table FILE.json
    pty-acceptance report FILE.xml [--checklist ROOT-ACCEPTANCE.md] [--out-dir DIR] [--strict-junit]
                          [--sign-key PATH [--sign-tool openssl|ssh-keygen|gpg]]
    pty-acceptance verify-statement ENVELOPE --pubkey FILE [--sign-tool openssl|ssh-keygen|gpg]
    pty-acceptance fleet-summary DIR --run-id ID [--pubkey HOST=FILE [--sign-tool HOST=TOOL]]... HOST...
    pty-acceptance node-ids [--write]
    pty-acceptance checklist [--write]
    pty-acceptance suite-identity [--root DIR] [--list]
    pty-acceptance preflight [--inventory FILE]
    pty-acceptance inventory check [--inventory FILE]
    pty-acceptance --version

Installed off a checkout (a wheel, pipx), report, verify-marker, preflight and
inventory check read the checklist and inventories the package carries
(shipped/, setup.py); node-ids, checklist, reference, mutants and bench say in one line
that they need a checkout.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from pty_acceptance.decision import invcheck, nodeids, preflight, readiness_marker
from pty_acceptance.provenance import distributions, manifest, suite_identity
from pty_acceptance.report import bundle, fleet, intoto, reports, signing, verdict
from pty_acceptance.spec import checklist, inventory
from pty_acceptance.spec.requirements import CATALOGUE
from pty_acceptance.host.terminal import escape

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT = PACKAGE_DIR.parents[1]
# A checkout: the package lies in its acceptance/ beside pyproject.toml. An
# installed package (a wheel, pipx) carries what its commands read of one in
# shipped/ (setup.py): ROOT-ACCEPTANCE.md, the inventories, the node-id list
# and the `suite-tree` value of the checkout it was built from.
IN_CHECKOUT = (PROJECT / "pyproject.toml").is_file() and (PROJECT / "acceptance" / "conftest.py").is_file()
HOME = PROJECT if IN_CHECKOUT else PACKAGE_DIR / "shipped"
DEFAULT_INVENTORY = HOME / "inventories" / "target.yml"
CHECKLIST = HOME / "ROOT-ACCEPTANCE.md"
SHIPPED_TREE = "suite-tree.txt"  # setup.py: the suite-tree value of the checkout the package was built from
DISTRIBUTION = "opencode-pty-acceptance"
INVENTORY_HELP = "default inventories/target.yml (the checkout's, or the installed package's copy)"
SUPERVISOR_IMPLS = ("go", "python")  # the reference deployment's (tests/refhost/run.py SUPERVISORS)
RELEASES = ("bookworm", "trixie")  # the reference host's, the default first (tests/refhost/tree.py RELEASES)


def _hex(n: int):
    rx = re.compile(rf"^[0-9a-f]{{{n}}}$")

    def parse(s: str) -> str:
        if not rx.match(s):
            raise argparse.ArgumentTypeError(f"expected {n} lowercase hex digits")
        return s

    return parse


PIN_OPTIONS = ("--revision", "--source-sha256", *(f"--{role}-sha256" for role in inventory.ARTIFACTS))


def _pins_given(a: argparse.Namespace) -> dict[str, str | None]:
    """The review's pins given as options, by option (None: not given)."""
    return {opt: getattr(a, opt[2:].replace("-", "_")) for opt in PIN_OPTIONS}


def _pins(a: argparse.Namespace) -> tuple[readiness_marker.Expectation | None, str, str]:
    """(the review's pins as the verifier's expectation, the marker path, why
    not: "" when they are all there). From --inventory (or, with no pin
    option at all, the default inventory), where a pin option must agree with
    the inventory; else every pin is an option: the revision, the source
    manifest and each binary's SHA-256. Never OK without them all (issue 38
    item 10: a marker written by hand over any binaries passed)."""
    given = _pins_given(a)
    if a.inventory or not any(given.values()):
        try:
            inv = inventory.load(a.inventory or DEFAULT_INVENTORY)
        except inventory.InventoryError as e:
            return None, "", f"inventory: {e}"
        pinned = dict(zip(PIN_OPTIONS, (inv.revision, inv.source_manifest_sha256,
                                        *(b.sha256 for b in inv.binaries_list)), strict=True))
        differ = [f"{opt} {value} is not the inventory's {pinned[opt]}" for opt, value in given.items()
                  if value is not None and value != pinned[opt]]
        if differ:
            return None, "", f"pins: {'; '.join(differ)} ({inv.file})"
        exp = readiness_marker.Expectation(inv.revision, inv.source_manifest_sha256,
                                           tuple(b.path for b in inv.binaries_list),
                                           tuple(b.sha256 for b in inv.binaries_list))
        return exp, a.marker or inv.marker, ""
    missing = [opt for opt, value in given.items() if value is None]
    if missing:
        return None, "", (f"pins: without --inventory the review's pins are given as options, every one: "
                          f"{', '.join(missing)} missing (the marker is never judged against hashes it "
                          "names itself)")
    pins = [v for v in given.values() if v is not None]
    return (readiness_marker.Expectation(pins[0], pins[1], readiness_marker.DEFAULT_BINARIES, tuple(pins[2:])),
            a.marker or readiness_marker.DEFAULT_PATH, "")


def cmd_verify_marker(a: argparse.Namespace) -> int:
    exp, path, why_not = _pins(a)
    if exp is None:
        print(escape(f"REFUSED {why_not}"))
        return 1
    try:
        readiness_marker.verify(path, exp, root=a.root)
    except readiness_marker.MarkerRefused as e:
        print(escape(f"REFUSED {e.reason}: {e.detail}"))
        return 1
    print(escape(f"OK {marker_path_shown(a.root, path)}"))
    return 0


def marker_path_shown(root: str, path: str) -> str:
    return path if root == "/" else f"{path} under {root}"


def cmd_source_manifest(a: argparse.Namespace) -> int:
    try:
        digest, text = manifest.compute(a.pilot_root, a.code_root)
    except manifest.ManifestError as e:
        print(escape(f"source-manifest: {e}"), file=sys.stderr)
        return 1
    if a.list:  # the exact listing to a pipe or file; escaped on a terminal
        sys.stdout.write(escape(text, keep_newlines=True) if sys.stdout.isatty() else text)
    print(digest)
    return 0


def needs_checkout(command: str, what: str) -> int | None:
    """None in a checkout that has `what`; else one line saying what the
    command needs, and exit status 4."""
    if IN_CHECKOUT and (PROJECT / what).exists():
        return None
    where = f"this checkout has no {what}" if IN_CHECKOUT else \
        f"the installed package does not carry {what}"
    print(f"{command}: needs a checkout of the project ({where}): run it from the checkout, as "
          f"<checkout>/.venv/bin/pty-acceptance {command}", file=sys.stderr)
    return 4


def cmd_reference(a: argparse.Namespace) -> int:
    """Boot the bundled reference host and run the suite inside it. The
    harness is test fixture code: it exists only in a checkout."""
    if (status := needs_checkout("reference", "tests/refhost/run.py")) is not None:
        return status
    sys.path.insert(0, str(PROJECT))
    from tests.refhost.run import run_reference  # noqa: PLC0415 (fixture code, checkout only)

    extra = a.pytest_args[1:] if a.pytest_args[:1] == ["--"] else a.pytest_args
    return run_reference(PROJECT, before_suite=[Path(s) for s in a.before_suite],
                         after_suite=[Path(s) for s in a.after_suite], keep=a.keep, pytest_args=extra,
                         supervisor=a.supervisor, release=a.release)


def cmd_mutants(a: argparse.Namespace) -> int:
    """Every seeded fault on its own reference host, with a kill table."""
    if (status := needs_checkout("mutants", "tests/mutants/run.py")) is not None:
        return status
    sys.path.insert(0, str(PROJECT))
    from tests.mutants.run import run_mutants  # noqa: PLC0415 (fixture code, checkout only)

    return run_mutants(PROJECT, only=a.only or None, jobs=a.jobs, supervisor=a.supervisor, release=a.release)


def cmd_bench(a: argparse.Namespace) -> int:
    """The suite's wall time per module against the floor, on one reference host."""
    if (status := needs_checkout("bench", "tests/refhost/bench.py")) is not None:
        return status
    sys.path.insert(0, str(PROJECT))
    from tests.refhost.bench import retable, run_bench  # noqa: PLC0415 (fixture code, checkout only)

    if a.table:
        return retable(Path(a.table))
    return run_bench(PROJECT, runs=a.runs, warmup=a.warmup, repeats=a.repeats, rev=a.rev, what_if=a.what_if)


def this_suite() -> verdict.Suite:
    """The suite this command runs from, which a re-rendered report's cases
    must be (verdict.against): in a checkout its `suite-tree` value read now
    (suite_identity.tree_of) and its acceptance/node-ids.txt; an installed
    package carries both as they were when it was built (setup.py, shipped/).
    OSError or NodeIdsError when they cannot be read."""
    if IN_CHECKOUT:
        root, tree, where = PROJECT, suite_identity.tree_of(PROJECT), f"the checkout {PROJECT}"
    else:
        root = HOME
        tree = (HOME / SHIPPED_TREE).read_bytes()[:4096].decode("utf-8", errors="replace").strip()
        where = f"the installed package {PACKAGE_DIR} (built from a checkout of that tree)"
    return verdict.Suite(tree, tuple(nodeids.load(root)), where)


def cmd_report(a: argparse.Namespace) -> int:
    """The requirement matrix again from a JUnit report the suite wrote, and
    the HTML and in-toto Statement beside it in --out-dir (off the host). Its
    cases are checked against the node-id list of the suite this command runs
    from (this_suite): READY only when they are that list, each passed."""
    try:
        sections = checklist.load(Path(a.checklist))
    except checklist.ChecklistError as e:
        print(escape(f"report: {e}"), file=sys.stderr)
        return 2
    try:
        suite = this_suite()
    except (OSError, nodeids.NodeIdsError) as e:
        print(escape(f"report: the suite this command runs from cannot be read, so the report's cases "
                     f"cannot be checked: {e}"), file=sys.stderr)
        return 2
    try:
        made, junit_bytes = bundle.from_file(a.junit, sections, suite)
    except (OSError, reports.ReportError, verdict.VerdictError) as e:
        print(escape(f"report: {a.junit}: {e}"), file=sys.stderr)
        return 2
    if a.sign_key or a.sign_tool:
        if not a.sign_key:
            print("report: --sign-tool given without --sign-key", file=sys.stderr)
            return 2
        signer = signing.Signer(os.path.abspath(a.sign_key), a.sign_tool or signing.DEFAULT_TOOL)
        try:  # off the host the key may be the reviewer's own (their uid), never another's
            problems = signing.preflight(signer, owner=os.geteuid())
            if problems:
                raise problems[0]
            made.envelope = signing.sign(signer, made.statement, owner=os.geteuid())
        except (signing.SignError, OSError) as e:
            print(escape(f"report: NOT SIGNED: {e}"), file=sys.stderr)
            return 2
    out = Path(a.out_dir)
    written = []
    files = list(bundle.files(Path(a.junit).name, made))
    if a.strict_junit:
        strict_name = Path(a.junit).name.removesuffix(".xml") + ".strict.xml"
        files.append((strict_name, reports.strict(junit_bytes)))
    try:
        out.mkdir(parents=True, exist_ok=True)  # a folder that does not exist yet is made
        for path, data in files:
            target = out / Path(path).name
            if target.resolve() == Path(a.junit).resolve():
                print(escape(f"report: refusing to overwrite {target}"), file=sys.stderr)
                return 2
            target.write_bytes(data)
            written.append(target)
    except OSError as e:
        print(escape(f"report: --out-dir {out}: cannot write there: {e.strerror or e}"
                     + (f" ({e.filename})" if e.filename else "")), file=sys.stderr)
        return 2
    for b in made.verdict.blockers:  # as recorded, and what disagrees in a report that names none
        print(escape(f"blocker: {b}"))
    for line in verdict.terminal_lines(made.verdict, made.rows):
        print(escape(line))
    for target in written:
        print(escape(f"bundle: {target}"))
    print(escape(rerendered_line(made.verdict, a.junit)))
    return 0 if made.verdict.ready else 1


def rerendered_line(v: verdict.Verdict, junit: str) -> str:
    """The report command's last line: whose verdict it re-renders, recorded
    when, and that this command wrote no marker (off the host there is none)."""
    host = v.host or "(host not recorded)"
    when = v.timestamp or "(time not recorded)"
    return (f"re-rendered from {junit}: host {host}'s recorded verdict of {when}: {v.last_line} "
            "(as that run recorded it; this command wrote no marker)")


def cmd_verify_statement(a: argparse.Namespace) -> int:
    """A signed Statement (`<stem>.intoto.dsse.json`): PAE recomputed from the
    envelope and checked by the same host tool against the public key; on
    success the Statement's result and subjects."""
    try:
        envelope = signing.read_regular(a.envelope, signing.ENVELOPE_LIMIT)
        pubkey = signing.read_regular(a.pubkey, signing.KEY_LIMIT)
    except OSError as e:
        print(escape(f"NOT VERIFIED: {e}"))
        return 1
    try:
        found = signing.verify(envelope, pubkey, a.sign_tool)
    except signing.SignError as e:
        print(escape(f"NOT VERIFIED: {e}"))
        return 1
    st = found.statement
    pred = got if isinstance(got := st.get("predicate"), dict) else {}
    print(escape(f"predicateType: {st.get('predicateType')}"))
    judged = intoto.host_of(st) if isinstance(st, dict) else None
    print(escape(f"host: {judged[0]} (the machine calls itself {judged[1]})" if judged
                 else "host: not named (a Statement of an older suite)"))
    for s in st.get("subject") or []:
        if isinstance(s, dict):
            digest = (s.get("digest") or {}).get("sha256") if isinstance(s.get("digest"), dict) else None
            print(escape(f"subject: {digest}  {s.get('name')}"))
    for key in ("passedTests", "warnedTests", "failedTests"):
        tests = pred.get(key)
        print(escape(f"{key}: {len(tests) if isinstance(tests, list) else 'absent'}"))
    print(escape(f"VERIFIED ({a.sign_tool}, keyid {found.keyid or 'none'}): "
                 f"result {pred.get('result')}"))
    return 0


def cmd_fleet_summary(a: argparse.Namespace) -> int:
    """One line per host of a fleet run (fleet/pty-acceptance.yml); 0 only
    when every host is READY."""
    try:
        keys = fleet_keys(a.pubkey, a.sign_tool)
        try:
            suite = this_suite()
        except (OSError, nodeids.NodeIdsError) as e:
            raise ValueError(f"the suite this command runs from cannot be read, so no report's cases "
                             f"can be checked: {e}") from None
        lines, status = fleet.summarize(a.directory, a.hosts, a.run_id, keys, suite=suite)
        fleet.write_summary(a.directory, lines)
    except ValueError as e:
        print(escape(f"fleet-summary: {e}"), file=sys.stderr)
        return 2
    except OSError as e:
        print(escape(f"fleet-summary: {a.directory}: {e.strerror or e}"), file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return status


def _per_host(given: list[str], option: str) -> dict[str, str]:
    out = {}
    for g in given:
        host, sep, value = g.partition("=")
        if not sep or not host or not value:
            raise ValueError(f"{option} {g!r}: expected HOST=VALUE")
        out[host] = value
    return out


def fleet_keys(pubkeys: list[str], tools: list[str]) -> dict[str, fleet.Key]:
    """--pubkey HOST=FILE (read here: public, bounded, never a FIFO) and --sign-tool HOST=TOOL."""
    files, by_host = _per_host(pubkeys, "--pubkey"), _per_host(tools, "--sign-tool")
    if stray := sorted(set(by_host) - set(files)):
        raise ValueError(f"--sign-tool for {', '.join(stray)} without a --pubkey for it")
    if wrong := sorted(t for t in by_host.values() if t not in signing.TOOLS):
        raise ValueError(f"--sign-tool {wrong[0]!r}: expected one of {', '.join(signing.TOOLS)}")
    keys = {}
    for host, path in files.items():
        try:
            keys[host] = fleet.Key(signing.read_regular(path, signing.KEY_LIMIT),
                                   by_host.get(host, signing.DEFAULT_TOOL))
        except OSError as e:
            raise ValueError(f"--pubkey {host}={path}: {e.strerror or e}") from None
    return keys


LISTER = "pty_acceptance.gate.node_listing"  # run as a module: its docstring says what it prints
LISTING_TIMEOUT_S = 900  # a collection of the checkout takes seconds; one that hangs ends here


def collected(root: Path) -> dict[str, tuple[str, ...]]:
    """What the checkout at `root` collects (node id -> its requirement IDs),
    as gate/node_listing.collect finds it, run in a process of its own (its
    stderr is this process's). A listing that ends without saying either
    (an error of the suite's own, its traceback on stderr) ends this process
    with the listing's status, as it would have ended in this process. The
    listing runs in this process's environment: it loads the checkout's
    configuration and conftests as a run does, which read it."""
    try:
        done = subprocess.run([sys.executable, "-m", LISTER, str(root)], stdout=subprocess.PIPE, check=False,
                              env=dict(os.environ), timeout=LISTING_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise nodeids.NodeIdsError(f"collecting {root / 'acceptance'} did not end within "
                                   f"{LISTING_TIMEOUT_S} s") from None
    try:
        said = json.loads(done.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        said = None
    if isinstance(said, dict) and "error" in said:
        raise nodeids.NodeIdsError(said["error"])
    if done.returncode != 0 or not isinstance(said, dict) or "found" not in said:
        sys.stdout.buffer.write(done.stdout)
        raise SystemExit(done.returncode or 1)
    return {nodeid: tuple(ids) for nodeid, ids in said["found"]}


def cmd_node_ids(a: argparse.Namespace) -> int:
    """SUITE-3: the checkout's acceptance tests by node id, against the
    checked-in list (nodeids.py); --write makes the list anew."""
    if (status := needs_checkout("node-ids", "acceptance/")) is not None:
        return status
    try:
        found = collected(PROJECT)
    except nodeids.NodeIdsError as e:
        print(escape(f"node-ids: {e}"), file=sys.stderr)
        return 2
    target = PROJECT / nodeids.FILE
    if a.write:
        target.write_text(nodeids.render(found), encoding="utf-8")
        print(escape(f"node-ids: {len(found)} tests written to {target}"))
        return 0
    try:
        listed = nodeids.load(PROJECT)
    except nodeids.NodeIdsError as e:
        print(escape(f"node-ids: {e}"))
        return 1
    missing, extra, changed = nodeids.differences(listed, found)
    lines = [f"listed, not collected: {n}" for tests in missing.values() for n in tests]
    lines += [f"collected, not listed: {n}" for n in extra] + [f"IDs differ: {c}" for c in changed]
    for line in lines:
        print(escape(line))
    print(escape(f"node-ids: {len(found)} collected, {len(listed)} listed, "
                 + ("the list matches" if not lines else f"{len(lines)} differences: "
                    "run pty-acceptance node-ids --write and review the change")))
    return 1 if lines else 0


def cmd_checklist(a: argparse.Namespace) -> int:
    """ROOT-ACCEPTANCE.md's generated parts (the sections table, each section's
    requirement bullets) against their rendering from the requirement records
    (spec/requirements.yml) and acceptance/node-ids.txt; --write renders them anew."""
    if (status := needs_checkout("checklist", "acceptance/")) is not None:
        return status
    target = PROJECT / "ROOT-ACCEPTANCE.md"
    try:
        listed = nodeids.load(PROJECT)
        text = target.read_text(encoding="utf-8")
    except (nodeids.NodeIdsError, OSError) as e:
        print(escape(f"checklist: {e}"), file=sys.stderr)
        return 2
    made = checklist.render(text, listed)
    if a.write:
        target.write_text(made, encoding="utf-8")
        print(escape(f"checklist: {target} rendered from {len(CATALOGUE)} requirement records"))
        return 0
    if made == text:
        print(escape(f"checklist: {target} is the rendering of {len(CATALOGUE)} requirement records"))
        return 0
    print(escape(f"checklist: {target} differs from its rendering: run pty-acceptance checklist --write "
                 "and review the change"))
    return 1


def cmd_suite_identity(a: argparse.Namespace) -> int:
    """Which suite a checkout is (SUITE-3): what a run's report says of the
    suite that judged (suite_identity.py), here for any checkout, so that a
    reviewer compares the reviewed one's with a report's. The distributions
    are this command's virtualenv's."""
    root = Path(a.root) if a.root else PROJECT
    if not a.root and (status := needs_checkout("suite-identity", "acceptance/")) is not None:
        return status
    try:
        ident = suite_identity.read(root, distributions.site_dirs(sys.prefix))
    except OSError as e:
        print(escape(f"suite-identity: {e}"), file=sys.stderr)
        return 2
    for name, value in ident.lines():
        print(escape(f"{name}: {value}"))
    if a.list:
        for line in ident.listing:
            print(escape(line))
    return 0


def cmd_preflight(a: argparse.Namespace) -> int:
    """Is this a host the suite can judge? Read-only, what a run checks first."""
    found = preflight.check(a.inventory or str(DEFAULT_INVENTORY))
    for line in found.host_lines():  # recorded, never judged: the host named first
        print(escape(line))
    for f in found.findings:
        print(escape(f.line()))
    for p in found.protections:  # recorded, never judged (preflight.py)
        print(escape(f"{'finding' if p.off else 'recorded'}  {p.line()}"))
    if found.cause:
        print(escape(f"PREFLIGHT FAILED: {len(found.failed)} of {len(found.findings)} checks: "
                     f"first {found.cause}"))
        return 1
    print(f"PREFLIGHT OK: {len(found.findings)} checks")
    return 0


def cmd_inventory_check(a: argparse.Namespace) -> int:
    """Every fact the inventory states that can be read without a run, against
    this host (invcheck.py); 0 only when all of them match."""
    lines = invcheck.check(invcheck.path_of(a.inventory, DEFAULT_INVENTORY))
    for line in lines:
        print(escape(str(line)))
    bad = invcheck.failed(lines)
    print(escape(f"inventory check: {len(lines)} facts, "
                 + (f"{len(bad)} do not match (differs, missing, FILL-IN, invalid, or not read now)"
                    if bad else "all match")))
    return 1 if bad else 0


def version() -> str:
    """The installed distribution's version, and where its checklist comes from."""
    try:
        found = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        found = "(not installed)"
    return f"{found} ({'checkout ' + str(PROJECT) if IN_CHECKOUT else 'installed package ' + str(PACKAGE_DIR)})"


class Version(argparse.Action):
    """--version as one line, never wrapped (argparse's own wraps it to the terminal)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(escape(f"pty-acceptance {version()}"))
        parser.exit()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pty-acceptance")
    p.add_argument("--version", action=Version, nargs=0, help="print the version and where it runs from, and exit")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify-marker", help="exit 0 only for a valid readiness marker")
    v.add_argument("--marker", default=None)
    v.add_argument("--root", default="/", help="evaluate the marker and binaries as if DIR were /")
    v.add_argument("--inventory", default=None)
    v.add_argument("--revision", type=_hex(40), help="the review's revision (with --inventory: must be its)")
    v.add_argument("--source-sha256", type=_hex(64), help="the review's source manifest hash")
    for role in inventory.ARTIFACTS:
        v.add_argument(f"--{role}-sha256", type=_hex(64), metavar="HEX64",
                       help=f"the review's SHA-256 of the {role} binary (without --inventory every pin is needed)")
    v.set_defaults(func=cmd_verify_marker)
    m = sub.add_parser("source-manifest", help="SCOPE-1 manifest hash (review-source-hash)")
    m.add_argument("--pilot-root", required=True)
    m.add_argument("--code-root", required=True)
    m.add_argument("--list", action="store_true", help="print the sha256sum listing first")
    m.set_defaults(func=cmd_source_manifest)
    r = sub.add_parser("reference", help="run the suite on a freshly booted reference host")
    r.add_argument("--before-suite", action="append", default=[], metavar="SCRIPT")
    r.add_argument("--after-suite", action="append", default=[], metavar="SCRIPT",
                   help="run inside after the suite; what it puts in /opt/pty-acceptance/out/evidence "
                        "is collected")
    r.add_argument("--keep", action="store_true")
    r.add_argument("--supervisor", choices=SUPERVISOR_IMPLS, default="go",
                   help="the reference supervisor implementation deployed (default go; python: the "
                        "Go shim with the embedded Python supervisor, inventories/reference-python.yml)")
    r.add_argument("--release", choices=RELEASES, default=RELEASES[0],
                   help="the Debian release the reference host is booted from (default %(default)s; "
                        "trixie: inventories/reference-trixie[-python].yml)")
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_reference)
    mu = sub.add_parser("mutants", help="run the fault catalogue, each fault on its own reference host")
    mu.add_argument("--only", action="append", default=[], metavar="ID")
    mu.add_argument("--jobs", type=int, default=1)
    mu.add_argument("--supervisor", choices=SUPERVISOR_IMPLS, default="go",
                    help="the reference supervisor implementation every run deploys (default go)")
    mu.add_argument("--release", choices=RELEASES, default=RELEASES[0],
                    help="the Debian release every reference host is booted from (default %(default)s)")
    mu.set_defaults(func=cmd_mutants)
    be = sub.add_parser("bench", help="the suite's time per module against the floor the requirements "
                        "impose, on one reference host (median of --runs warm runs)")
    be.add_argument("--runs", type=int, default=3, help="counted suite runs (default 3; 0 with --warmup 0: "
                    "the floor probes alone, a few minutes)")
    be.add_argument("--warmup", type=int, default=1, help="suite runs first, not counted (default 1)")
    be.add_argument("--repeats", type=int, default=5, help="repeats of the bare unit probe (default 5)")
    be.add_argument("--rev", default="HEAD",
                    help="the commit whose suite runs (default HEAD; "
                         "the bench's own probe and clock are this checkout's)")
    be.add_argument("--what-if", metavar="WORD", default=None,
                    help="run the suite on a variant of the reference deployment (tests/refhost/bench.py "
                         "WHAT_IFS, e.g. session-stop-sendsighup); the floor stays the reference contract's")
    be.add_argument("--table", metavar="FILE.json", default=None,
                    help="only print the table again from an earlier bench's JSON")
    be.set_defaults(func=cmd_bench)
    rp = sub.add_parser("report", help="the requirement matrix, HTML report and in-toto Statement "
                        "again from a JUnit report the suite wrote")
    rp.add_argument("junit", metavar="FILE.xml")
    rp.add_argument("--checklist", default=str(CHECKLIST),
                    help="the ROOT-ACCEPTANCE.md whose sections the matrix lists (default: the "
                         "checkout's, or the one the installed package carries)")
    rp.add_argument("--out-dir", default=".", help="where the HTML and the Statement go (made when missing)")
    rp.add_argument("--strict-junit", action="store_true",
                    help="also write <stem>.strict.xml: the report in the strict JUnit form "
                         "(junit-10.xsd: each case's requirement IDs and evidence in its system-out)")
    rp.add_argument("--sign-key", default=None, metavar="PATH",
                    help="also write <stem>.intoto.dsse.json: the Statement signed with this key "
                         "(yours or root's alone: the OWN-1 chain check)")
    rp.add_argument("--sign-tool", default=None, choices=signing.TOOLS,
                    help="the host program that signs (default openssl: an Ed25519 PEM key)")
    rp.set_defaults(func=cmd_report)
    vs = sub.add_parser("verify-statement", help="verify a signed Statement (<stem>.intoto.dsse.json) "
                        "with a public key and the host tool that signed it")
    vs.add_argument("envelope", metavar="ENVELOPE")
    vs.add_argument("--pubkey", required=True, metavar="FILE",
                    help="openssl: PEM public key; ssh-keygen: an OpenSSH public key line; "
                         "gpg: an exported public key")
    vs.add_argument("--sign-tool", default=signing.DEFAULT_TOOL, choices=signing.TOOLS)
    vs.set_defaults(func=cmd_verify_statement)
    fs = sub.add_parser("fleet-summary", help="one line per host of a fleet run "
                        "(fleet/pty-acceptance.yml); exit 0 only when every host is READY")
    fs.add_argument("directory", metavar="DIR", help="the run's directory: DIR/<host>/ per host")
    fs.add_argument("--run-id", required=True, metavar="ID",
                    help="the playbook's run id: only DIR/<host>/<ID>.* files are read")
    fs.add_argument("--pubkey", action="append", default=[], metavar="HOST=FILE",
                    help="HOST signed its Statement (--sign-key): its envelope must verify with this "
                         "public key and sign the Statement that came back")
    fs.add_argument("--sign-tool", action="append", default=[], metavar="HOST=TOOL",
                    help=f"the tool HOST signed with (one of {', '.join(signing.TOOLS)}; default openssl)")
    fs.add_argument("hosts", nargs="+", metavar="HOST", help="every host the run was for")
    fs.set_defaults(func=cmd_fleet_summary)
    ni = sub.add_parser("node-ids", help=f"check {nodeids.FILE} (every acceptance test by node id, "
                        "SUITE-3) against what the checkout collects; exit 0 when it matches")
    ni.add_argument("--write", action="store_true", help="write the list anew from the checkout")
    ni.set_defaults(func=cmd_node_ids)
    cl = sub.add_parser("checklist", help="check ROOT-ACCEPTANCE.md's table and requirement bullets against "
                        "the requirement records (spec/requirements.yml) and the node-id list")
    cl.add_argument("--write", action="store_true", help="render them anew")
    cl.set_defaults(func=cmd_checklist)
    si = sub.add_parser("suite-identity", help="the suite a checkout is, as a run's report names the suite "
                        "that judged: version, commit, whether modified, the digest of its files, the "
                        "virtualenv's distributions")
    si.add_argument("--root", metavar="DIR", default=None, help="the checkout (default: this one)")
    si.add_argument("--list", action="store_true", help="also every line the files' digest is over")
    si.set_defaults(func=cmd_suite_identity)
    pf = sub.add_parser("preflight", help="read-only, in seconds: is this a host the suite can judge "
                        "(systemd, the bus, the inventory, what it names, the host programs)?")
    pf.add_argument("--inventory", default=None, help=INVENTORY_HELP)
    pf.set_defaults(func=cmd_preflight)
    ic = sub.add_parser("inventory", help="inventory check: every fact the inventory states that can "
                        "be read without a run, compared with this host, one line each")
    ic.add_argument("action", choices=["check"])
    ic.add_argument("--inventory", default=None, help=INVENTORY_HELP)
    ic.set_defaults(func=cmd_inventory_check)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
