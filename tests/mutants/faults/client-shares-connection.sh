. /opt/dev-script-0/common.sh
# The client starts a child that inherits its supervisor connection (fd 3, close-on-exec
# cleared in the child) and outlives it: a second holder of the client side.
rebuild client cmd/client/main.go "	syscall.CloseOnExec(sockFD)
" "	syscall.CloseOnExec(sockFD)
	if _, err := syscall.ForkExec(\"/bin/sleep\", []string{\"sleep\", \"120\"}, &syscall.ProcAttr{
		Files: []uintptr{^uintptr(0), ^uintptr(0), ^uintptr(0), uintptr(sockFD)}}); err != nil {
		os.Exit(99)
	}
"
