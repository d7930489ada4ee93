#!/bin/sh
# Setup for a fresh Debian/Ubuntu machine (run as root): the packages the
# reference host harness needs (and strace, which tests/test_runwatch.py traces a
# stopped process with; chromium, which the HTML report's browser test uses; openssl, openssh-client and gnupg, the tools that sign the in-toto
# Statement with --sign-key, whose round trips the suite's tests check; ansible
# and ansible-lint, the fleet playbook's run and lint; bookworm's Go 1.19 with
# gcc and libc6-dev and the three golang-*-dev packages tests/reference/vendor.py
# vendors from, for tests/reference/expected.py and `go test -race` of the
# reference Go supervisor in tests/test_go_supervisor.py: the race detector
# needs cgo), and .venv/ with the project installed into it
# (.venv/bin/pty-acceptance, .venv/bin/pytest), then exactly the pins of
# requirements/target.txt over it. Safe to run again.
set -eu
cd "$(dirname "$0")/.."
need=""
for pkg in debootstrap systemd-container strace chromium openssl openssh-client gnupg ansible ansible-lint \
        golang-go gcc libc6-dev golang-dbus-dev golang-github-coreos-go-systemd-dev golang-golang-x-sys-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need="$need $pkg"
done
if [ -n "$need" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $need >/dev/null
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]" </dev/null
# then exactly the distributions a target host gets (requirements/target.txt, as
# tools/setup-target.sh installs them): the gate refuses a loaded module of any
# other version (SUITE-3), and the suite's own tests run the gate from this venv
.venv/bin/python -m pip install -q --disable-pip-version-check --only-binary=:all: --require-hashes \
    -r requirements/target.txt </dev/null
echo "setup: .venv ready ($(.venv/bin/python --version)); pty-acceptance at .venv/bin/pty-acceptance"
