. /opt/dev-script-0/common.sh
rebuild launcher cmd/launcher/main.go '		"LANG=C.UTF-8",
	}' '		"LANG=C.UTF-8",
		"OPENCODE_SESSION_DEBUG=1",
	}'
