# orphan cleanup at supervisor start: strict name + exact BindsTo is stopped, others left
set -u
H1=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
H2=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
systemctl stop opencode-pty-supervisor.service
systemd-run --quiet --unit=opencode-pty-$H1 -p BindsTo=opencode-pty-supervisor.service -p User=byk sleep 300
systemd-run --quiet --unit=opencode-pty-$H2 -p User=byk sleep 300
systemd-run --quiet --unit=opencode-pty-notstrict -p BindsTo=opencode-pty-supervisor.service -p User=byk sleep 300
sleep 3
for u in opencode-pty-$H1 opencode-pty-$H2 opencode-pty-notstrict opencode-pty-supervisor; do
  printf '%s %s\n' "$u" "$(systemctl is-active $u.service)"
done
journalctl --no-pager -u opencode-pty-supervisor.service | grep -E "orphan|leaving" | tail -5
systemctl stop opencode-pty-$H2 opencode-pty-notstrict
systemctl is-active opencode-pty-supervisor.service || systemctl start opencode-pty-supervisor.service
