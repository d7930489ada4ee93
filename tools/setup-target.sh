#!/bin/sh
# Setup on a target host (run as root from the checkout): the suite's .venv and
# nothing else. No package of the host is installed or changed: the host
# programs the suite reads with (systemctl, strace, go, git, script, bun, ...)
# are the host's own, and `.venv/bin/pty-acceptance preflight` says which are
# missing. The Python packages are exactly requirements/target.txt (pinned by
# version and SHA-256, pip --require-hashes):
#
#   sh tools/setup-target.sh                     # from PyPI
#   sh tools/setup-target.sh --wheelhouse DIR    # offline, from a wheelhouse that
#                                                # tools/wheelhouse.sh built elsewhere
#
# Needs python3 (3.11 or newer) with its venv module (Debian/Ubuntu:
# python3-venv). Safe to run again.
set -eu
cd "$(dirname "$0")/.."
wheelhouse=""
case "${1:-}" in
    "") ;;
    --wheelhouse) [ $# -eq 2 ] || { echo "usage: $0 [--wheelhouse DIR]" >&2; exit 2; }; wheelhouse=$2 ;;
    *) echo "usage: $0 [--wheelhouse DIR]" >&2; exit 2 ;;
esac
PY=${PYTHON:-/usr/bin/python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv || {
        echo "setup-target: $PY -m venv failed: install the host's python3-venv package first" >&2
        exit 3
    }
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check --no-input -q "$@" </dev/null; }
if [ -n "$wheelhouse" ]; then
    [ -d "$wheelhouse" ] || { echo "setup-target: no wheelhouse at $wheelhouse" >&2; exit 2; }
    pip install --no-index --find-links "$wheelhouse" --only-binary=:all: --require-hashes \
        -r requirements/target.txt
else
    pip install --only-binary=:all: --require-hashes -r requirements/target.txt
fi
# the checkout itself (pty-acceptance's command line): nothing fetched, nothing else installed
pip install --no-index --no-deps --no-build-isolation -e .
echo "setup-target: .venv ready ($(.venv/bin/python --version)); next: .venv/bin/pty-acceptance preflight"
