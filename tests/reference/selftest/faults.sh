printf 'capacity17\nskip-pin-recheck\n' > /etc/opencode-reference/faults
systemctl restart opencode-pty-supervisor.service
journalctl --no-pager -u opencode-pty-supervisor.service | grep FAULTS | tail -1
