. /opt/dev-script-0/common.sh
T=$(mktemp /tmp/runtime.XXXXXX)
cp "$RUNTIME" "$T" && printf 'x' >>"$T"
install -o root -g root -m 0711 "$T" "$RUNTIME" && rm -f "$T"
systemctl restart opencode-v2-preview.service
wait_port 14102
echo "FAULT: the runtime binary gained a byte after the review" >&2
