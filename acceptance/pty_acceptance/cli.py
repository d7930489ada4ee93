"""`pty-acceptance`: the suite's command line.

    pty-acceptance verify-marker [--marker PATH] [--root DIR] [--inventory FILE]
                                 [--revision HEX40] [--source-sha256 HEX64]
    pty-acceptance source-manifest --pilot-root DIR --code-root DIR [--list]
    pty-acceptance reference [--before-suite SCRIPT]... [--after-suite SCRIPT]... [--keep] [-- PYTEST-ARGS]
    pty-acceptance mutants [--only ID]... [--jobs N]
    pty-acceptance bench [--runs N] [--warmup N] [--repeats N] [--rev REV] | --table FILE.json
    pty-acceptance report FILE.xml [--checklist ROOT-ACCEPTANCE.md] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from . import bundle, checklist, inventory, manifest, marker, reports, verdict
from .terminal import escape

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_INVENTORY = PROJECT / "inventories" / "target.yml"


def _hex(n: int):
    rx = re.compile(rf"^[0-9a-f]{{{n}}}$")

    def parse(s: str) -> str:
        if not rx.match(s):
            raise argparse.ArgumentTypeError(f"expected {n} lowercase hex digits")
        return s

    return parse


def cmd_verify_marker(a: argparse.Namespace) -> int:
    inv = None
    if a.inventory or not (a.revision and a.source_sha256):
        try:
            inv = inventory.load(a.inventory or DEFAULT_INVENTORY)
        except inventory.InventoryError as e:
            print(escape(f"REFUSED inventory: {e}"))
            return 1
    revision = a.revision or inv.revision
    source = a.source_sha256 or inv.source_manifest_sha256
    binaries = tuple(b.path for b in inv.binaries_list) if inv else marker.DEFAULT_BINARIES
    claimed = tuple(b.sha256 for b in inv.binaries_list) if inv else ()
    path = a.marker or (inv.marker if inv else marker.DEFAULT_PATH)
    try:
        marker.verify(path, marker.Expectation(revision, source, binaries, claimed), root=a.root)
    except marker.MarkerRefused as e:
        print(escape(f"REFUSED {e.rule}: {e.detail}"))
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


def cmd_reference(a: argparse.Namespace) -> int:
    """Boot the bundled reference host and run the suite inside it. The
    harness is test fixture code: it exists only in a checkout."""
    harness = PROJECT / "tests" / "refhost" / "run.py"
    if not harness.is_file():
        print(f"reference: {harness} not found: this needs a checkout of the project", file=sys.stderr)
        return 4
    sys.path.insert(0, str(PROJECT))
    from tests.refhost.run import run_reference  # noqa: PLC0415 (fixture code, checkout only)

    extra = a.pytest_args[1:] if a.pytest_args[:1] == ["--"] else a.pytest_args
    return run_reference(PROJECT, before_suite=[Path(s) for s in a.before_suite],
                         after_suite=[Path(s) for s in a.after_suite], keep=a.keep, pytest_args=extra)


def cmd_mutants(a: argparse.Namespace) -> int:
    """Every seeded fault on its own reference host, with a kill table."""
    runner = PROJECT / "tests" / "mutants" / "run.py"
    if not runner.is_file():
        print(f"mutants: {runner} not found: this needs a checkout of the project", file=sys.stderr)
        return 4
    sys.path.insert(0, str(PROJECT))
    from tests.mutants.run import run_mutants  # noqa: PLC0415 (fixture code, checkout only)

    return run_mutants(PROJECT, only=a.only, jobs=a.jobs)


def cmd_bench(a: argparse.Namespace) -> int:
    """The suite's wall time per module against the floor, on one reference host."""
    runner = PROJECT / "tests" / "refhost" / "bench.py"
    if not runner.is_file():
        print(f"bench: {runner} not found: this needs a checkout of the project", file=sys.stderr)
        return 4
    sys.path.insert(0, str(PROJECT))
    from tests.refhost.bench import retable, run_bench  # noqa: PLC0415 (fixture code, checkout only)

    if a.table:
        return retable(Path(a.table))
    return run_bench(PROJECT, runs=a.runs, warmup=a.warmup, repeats=a.repeats, rev=a.rev)


def cmd_report(a: argparse.Namespace) -> int:
    """The requirement matrix again from a JUnit report the suite wrote, and
    the HTML and in-toto Statement beside it in --out-dir (off the host)."""
    try:
        sections = checklist.load(Path(a.checklist))
    except checklist.ChecklistError as e:
        print(escape(f"report: {e}"), file=sys.stderr)
        return 2
    try:
        made, _ = bundle.from_file(a.junit, sections)
    except (OSError, reports.ReportError, verdict.VerdictError) as e:
        print(escape(f"report: {a.junit}: {e}"), file=sys.stderr)
        return 2
    out = Path(a.out_dir)
    html_name, statement_name = (Path(p).name for p in bundle.names(Path(a.junit).name))
    written = []
    for name, data in ((html_name, made.html), (statement_name, made.statement)):
        target = out / name
        if target.resolve() == Path(a.junit).resolve():
            print(escape(f"report: refusing to overwrite {target}"), file=sys.stderr)
            return 2
        target.write_bytes(data)
        written.append(target)
    for line in verdict.terminal_lines(made.verdict, made.rows):
        print(escape(line))
    for target in written:
        print(escape(f"bundle: {target}"))
    print(escape(made.verdict.last_line))
    return 0 if made.verdict.ready else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pty-acceptance")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify-marker", help="exit 0 only for a valid readiness marker")
    v.add_argument("--marker", default=None)
    v.add_argument("--root", default="/", help="evaluate the marker and binaries as if DIR were /")
    v.add_argument("--inventory", default=None)
    v.add_argument("--revision", type=_hex(40))
    v.add_argument("--source-sha256", type=_hex(64))
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
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_reference)
    mu = sub.add_parser("mutants", help="run the fault catalogue, each fault on its own reference host")
    mu.add_argument("--only", action="append", default=[], metavar="ID")
    mu.add_argument("--jobs", type=int, default=1)
    mu.set_defaults(func=cmd_mutants)
    be = sub.add_parser("bench", help="the suite's time per module against the floor the requirements "
                        "impose, on one reference host (median of --runs warm runs)")
    be.add_argument("--runs", type=int, default=3, help="counted suite runs (default 3)")
    be.add_argument("--warmup", type=int, default=1, help="suite runs first, not counted (default 1)")
    be.add_argument("--repeats", type=int, default=5, help="repeats of the bare unit probe (default 5)")
    be.add_argument("--rev", default="HEAD",
                    help="the commit whose suite runs (default HEAD; the bench's own probe and clock are this checkout's)")
    be.add_argument("--table", metavar="FILE.json", default=None,
                    help="only print the table again from an earlier bench's JSON")
    be.set_defaults(func=cmd_bench)
    rp = sub.add_parser("report", help="the requirement matrix, HTML report and in-toto Statement "
                        "again from a JUnit report the suite wrote")
    rp.add_argument("junit", metavar="FILE.xml")
    rp.add_argument("--checklist", default=str(PROJECT / "ROOT-ACCEPTANCE.md"),
                    help="the ROOT-ACCEPTANCE.md whose sections the matrix lists")
    rp.add_argument("--out-dir", default=".", help="where the HTML and the Statement go")
    rp.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
