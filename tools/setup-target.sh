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
# python3-venv); PYTHON=/path/to/python3.X names another interpreter. The
# version is checked first: an older one is refused in one line, before
# anything is made. Safe to run again: a .venv made by another interpreter
# (or one that no longer runs, or has no pip) is made anew.
set -eu
cd "$(dirname "$0")/.."
wheelhouse=""
case "${1:-}" in
    "") ;;
    --wheelhouse) [ $# -eq 2 ] || { echo "usage: $0 [--wheelhouse DIR]" >&2; exit 2; }; wheelhouse=$2 ;;
    *) echo "usage: $0 [--wheelhouse DIR]" >&2; exit 2 ;;
esac
PY=${PYTHON:-/usr/bin/python3}
if [ -n "$wheelhouse" ] && [ ! -d "$wheelhouse" ]; then
    echo "setup-target: no wheelhouse at $wheelhouse" >&2; exit 2
fi
# the interpreter: 3.11 or newer, and which one it is (its own executable, its version)
IDENT='import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)), "%d.%d.%d" % sys.version_info[:3])'
found=$("$PY" -c "$IDENT" 2>/dev/null) || {
    echo "setup-target: $PY does not run: name a Python 3.11 or newer with PYTHON=/path/to/python3" >&2; exit 3
}
version=${found##* }
major=${version%%.*}; minor=${version#*.}; minor=${minor%%.*}
if [ "$major" -lt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -lt 11 ]; }; then
    echo "setup-target: $PY is Python $version: the suite needs 3.11 or newer (install one, then PYTHON=/path/to/python3.11 sh $0)" >&2
    exit 3
fi
# a .venv of another interpreter (a first try with an older one), or one that
# does not run or has no pip (a venv module missing its ensurepip), is made anew
if [ -e .venv ] || [ -L .venv ]; then
    if ! had=$(.venv/bin/python -c "$IDENT" 2>/dev/null) || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
        echo "setup-target: .venv does not run or has no pip: making it anew"
        rm -rf .venv
    elif [ "$had" != "$found" ]; then
        echo "setup-target: .venv was made by ${had% *} (Python ${had##* }), not $PY (Python $version): making it anew"
        rm -rf .venv
    fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv && .venv/bin/python -m pip --version >/dev/null 2>&1 || {
        rm -rf .venv
        echo "setup-target: $PY -m venv failed: install the host's python3-venv package first" >&2
        exit 3
    }
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check --no-input -q "$@" </dev/null; }
if [ -n "$wheelhouse" ]; then
    pip install --no-index --find-links "$wheelhouse" --only-binary=:all: --require-hashes \
        -r requirements/target.txt
else
    pip install --only-binary=:all: --require-hashes -r requirements/target.txt
fi
# the checkout itself (pty-acceptance's command line): nothing fetched, nothing else installed
pip install --no-index --no-deps --no-build-isolation -e .
echo "setup-target: .venv ready ($(.venv/bin/python --version)); next: .venv/bin/pty-acceptance preflight"
