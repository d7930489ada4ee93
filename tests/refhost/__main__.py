"""python -m tests.refhost [--release bookworm|trixie] [--supervisor go|python] [--before-suite S]... [--keep]
[--cleanup] [-- pytest args]"""
from __future__ import annotations

import argparse
import pathlib
import sys

from .machine import cleanup_leftovers
from .run import DEFAULT_SUPERVISOR, SUPERVISORS, run_reference
from .tree import DEFAULT_RELEASE, RELEASES

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, pytest_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(prog="python -m tests.refhost",
                                 description="Run the acceptance suite against a disposable reference host.")
    ap.add_argument("--before-suite", action="append", default=[], metavar="SCRIPT",
                    help="host shell script run inside (as root) after deployment, before the suite")
    ap.add_argument("--keep", action="store_true", help="leave the reference host running afterwards")
    ap.add_argument("--supervisor", choices=sorted(SUPERVISORS), default=DEFAULT_SUPERVISOR,
                    help="the supervisor implementation deployed (default %(default)s)")
    ap.add_argument("--release", choices=sorted(RELEASES), default=DEFAULT_RELEASE,
                    help="the Debian release the host is booted from (default %(default)s)")
    ap.add_argument("--cleanup", action="store_true",
                    help="only remove what earlier runs left (kept hosts included) and exit")
    args = ap.parse_args(argv)
    if args.cleanup:
        if not cleanup_leftovers():
            print("nothing left over", file=sys.stderr)
        return 0
    return run_reference(REPO_ROOT, before_suite=args.before_suite, keep=args.keep, pytest_args=pytest_args,
                         supervisor=args.supervisor, release=args.release)


if __name__ == "__main__":
    sys.exit(main())
