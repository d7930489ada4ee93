. /opt/dev-script-0/common.sh
# The inner launcher no longer closes fd 3 (its own executable, opened without
# O_CLOEXEC) before it execs the command: every command inherits it.
rebuild launcher cmd/launcher/main.go '	syscall.Close(3)
	path, err := lookPath(argv[0])' '	path, err := lookPath(argv[0])'
