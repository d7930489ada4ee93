#!/bin/sh
# On a connected machine: the wheels requirements/target.txt pins, for a target
# host that has no access to a package registry (docs/operator.md, "Installing the suite").
#
#   sh tools/wheelhouse.sh DIR [PYTHON-VERSION]     # default 3.11 (Debian 12)
#
# pip download checks every wheel against the SHA-256 the checkout pins
# (--require-hashes); copy DIR to the target and run
# `sh tools/setup-target.sh --wheelhouse DIR` there, which checks them again.
set -eu
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 DIR [PYTHON-VERSION]" >&2; exit 2; }
dir=$1
version=${2:-3.11}
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p "$dir"
"$PY" -m pip --disable-pip-version-check --no-input -q download --dest "$dir" --require-hashes \
    --only-binary=:all: --implementation cp --python-version "$version" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
    -r requirements/target.txt </dev/null
echo "wheelhouse: $(ls "$dir" | wc -l) wheels for CPython $version (x86_64) in $dir"
