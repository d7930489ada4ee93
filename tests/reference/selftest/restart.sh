# a live session while the supervisor restarts: session ends, no unit left, supervisor back
systemd-run --quiet --no-block --unit=opencode-v2.service -p User=byk -p Group=byk \
  -p StandardOutput=file:/run/hold.out /usr/bin/python3 /opt/pty-acceptance/src/tests/reference/selftest/peer.py hold
for i in $(seq 100); do systemctl list-units --no-legend 'opencode-pty-*' | grep -q 'opencode-pty-[0-9a-f]\{32\}' && break; sleep 0.05; done
echo "before:"; systemctl list-units --no-legend 'opencode-pty-*' | cat
t0=$(date +%s%3N); systemctl restart opencode-pty-supervisor.service; t1=$(date +%s%3N)
echo "restart took $((t1 - t0)) ms"
echo "after:"; systemctl list-units --all --no-legend 'opencode-pty-*' | cat
for i in $(seq 100); do systemctl is-active -q opencode-v2.service || break; sleep 0.05; done
cat /run/hold.out
journalctl --no-pager -u opencode-pty-supervisor.service | grep -v "started opencode" | tail -8
