"""The reference host: a disposable systemd machine (systemd-nspawn) for the acceptance suite."""
