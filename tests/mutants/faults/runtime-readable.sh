. /opt/dev-script-0/common.sh
chmod 0755 "$RUNTIME"
systemctl restart opencode-v2-preview.service
wait_port 14102
echo "FAULT: the runtime binary is readable by the service user (its process is dumpable)" >&2
