# The candidate runtime is a build that catches SIGUSR1 (no --disable-sigusr1):
# Node opens its inspector when any process of the service user sends it
# SIGUSR1, and whoever connects runs code inside the candidate (a blind red
# team's round six patched the live candidate's answers this way, leaving its
# environ, pid, start time and unit as they were). The harness builds that
# variant beside the reference SEA (tests/refhost/nodedist.py); installed as
# the reference's is, root:root 0711. Its hash is not the pin: RUNTIME-1 fails
# too; ISO-1 must say what the process does with SIGUSR1.
set -eu
. /opt/dev-script-0/common.sh  # RUNTIME, wait_port
KEY=v26.4.0-$(sha256sum </opt/pty-acceptance/src/tests/reference/src/candidate/server.js | cut -c1-16)-sigusr1
install -o root -g root -m 0711 "/opt/pty-acceptance/node/sea/$KEY/opencode2-node" "$RUNTIME"
systemctl restart opencode-v2-preview.service
wait_port 14102
pid=$(systemctl show -P MainPID opencode-v2-preview.service)
mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status")
python3 -I -c 'import sys; sys.exit(0 if int(sys.argv[1], 16) >> 9 & 1 else 1)' "$mask" ||
	{ echo "FAULT: the candidate ($pid) does not catch SIGUSR1 (SigCgt $mask)" >&2; exit 1; }
echo "FAULT: the candidate ($pid) runs a build that catches SIGUSR1 (SigCgt $mask)" >&2
