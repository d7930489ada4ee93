module opencode-pty

go 1.19

require (
	github.com/coreos/go-systemd/v22 v22.5.0
	github.com/godbus/dbus/v5 v5.1.0
	golang.org/x/sys v0.22.0
)
