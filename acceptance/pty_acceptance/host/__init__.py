"""How the suite reads (and, for its own run, writes) this machine as root,
safely: files without following links, /proc by pid and start time, systemd
over D-Bus and `systemctl show --all`, cgroups, host programs by absolute
path, the run's own places under /run and /tmp, and escaping whatever the
host said before it reaches a terminal. Knows no requirement beyond the IDs
its errors carry; imports nothing above itself."""
