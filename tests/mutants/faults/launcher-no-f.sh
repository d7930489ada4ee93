. /opt/dev-script-0/common.sh
rebuild launcher cmd/launcher/main.go 'argv := []string{"script", "-q", "-e", "-f", "-c", innerShell, "/dev/null"}' 'argv := []string{"script", "-q", "-e", "-c", innerShell, "/dev/null"}'
