. /opt/dev-script-0/common.sh
rebuild launcher cmd/launcher/main.go '		"PATH=" + fixedPath,' '		"PATH=/home/byk/.local/bin:" + fixedPath,'
