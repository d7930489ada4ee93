# leftovers and supervisor descriptors after the scenarios
systemctl list-units --all --no-legend 'opencode-pty-*' | cat
ls /sys/fs/cgroup/opencode.slice/opencode-pty.slice/ 2>&1 | grep opencode-pty- || echo "no session cgroups"
P=$(systemctl show -p MainPID --value opencode-pty-supervisor.service)
for c in $(cat /sys/fs/cgroup/system.slice/opencode-pty-supervisor.service/cgroup.procs); do
  echo "pid $c $(cat /proc/$c/comm) fds=$(ls /proc/$c/fd | wc -l) exe=$(readlink /proc/$c/exe)"; ls -l /proc/$c/fd | awk "{print \$9, \$10, \$11}" | tr "\n" " "; echo
done
echo MainPID=$P
systemd-analyze security --no-pager opencode-pty-supervisor.service | tail -1
