. /opt/dev-script-0/common.sh
rebuild client cmd/client/main.go "oob := syscall.UnixRights(dirFD)" "oob := syscall.UnixRights(dirFD, dirFD)"
