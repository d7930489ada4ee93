. /opt/dev-script-0/common.sh
cp -p "$RUNTIME" /usr/local/bin/opencode2-node
preview_runs /usr/local/bin/opencode2-node --port 14102
