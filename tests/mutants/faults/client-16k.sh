. /opt/dev-script-0/common.sh
rebuild client cmd/client/main.go "	maxData       = 32768" "	maxData       = 16384"
