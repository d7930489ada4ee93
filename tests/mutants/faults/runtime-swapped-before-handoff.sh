. /opt/dev-script-0/common.sh
# The service user owns the runtime's directory: right after the suite read the
# runtime for the 2nd time (the gate's hash at session start, RUNTIME-1's read)
# it renames a working runtime one byte longer into its place, and puts the
# original back once RUNTIME-2 let go of it (runtime-swapper.py, run as byk).
DIR=$(dirname "$RUNTIME")
NAME=$(basename "$RUNTIME")
T=$(mktemp /tmp/runtime.XXXXXX)
cp "$RUNTIME" "$T" && printf 'x' >>"$T"
install -o root -g root -m 0711 "$T" "$DIR/.$NAME.swap" && rm -f "$T"
install -D -o root -g root -m 0755 /opt/pty-acceptance/src/tests/mutants/faults/runtime-swapper.py \
	/usr/local/lib/opencode-reference/runtime-swapper.py
STATE=/home/byk/.runtime-swapper-state
rm -f "$STATE"
systemd-run --quiet --uid=byk --gid=byk --unit=fault-runtime-swapper /usr/bin/python3 -I \
	/usr/local/lib/opencode-reference/runtime-swapper.py "$DIR" "$NAME" 2 opencode-v2.service "$STATE"
i=0; while ! grep -qx ready "$STATE" 2>/dev/null; do i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done
echo "FAULT: byk swaps the runtime binary between RUNTIME-1's read and RUNTIME-2's start" >&2
