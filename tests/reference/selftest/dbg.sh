set -x
script -q -e -f -c "sleep 30" /dev/null </dev/null & p=$!; sleep 0.5; kill -TERM $p; wait $p; echo "script rc=$?"
systemd-run --unit=dbgx -p User=byk -p KillMode=control-group -- /usr/bin/script -q -e -f -c "sleep 30" /dev/null
sleep 0.5; systemctl stop dbgx; systemctl show -p ExecMainCode,ExecMainStatus,Result,ActiveState dbgx
systemd-run --unit=dbgy -p User=byk -p RuntimeMaxSec=1 -- /usr/bin/script -q -e -f -c "sleep 30" /dev/null
sleep 4; systemctl show -p ExecMainCode,ExecMainStatus,Result,ActiveState dbgy
mkdir -p /etc/opencode-reference; echo debug-props > /etc/opencode-reference/faults; systemctl restart opencode-pty-supervisor
