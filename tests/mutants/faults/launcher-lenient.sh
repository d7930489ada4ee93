. /opt/dev-script-0/common.sh
rebuild launcher cmd/launcher/main.go "	if base64.RawURLEncoding.EncodeToString(raw) != s[1:] {" "	if false {" "	if !argPattern.MatchString(s) {" "	s = strings.TrimRight(s, \"=\")
	if !argPattern.MatchString(s) {"
