# The launcher accepts non-canonical base64 (faults/launcher-lenient.sh), and a watcher of the
# service user's (issue 37, the audit of what the suite believes): PROTO-4
# runs the installed launcher directly as the service user, an ordinary dumpable program of
# the user's. The watcher attaches to every such run (the launcher outside a session unit)
# and turns its next system call into exit_group(1), so a lenient launcher would look as if it
# refused its non-canonical arguments. The suite's runs of it are behind its gate, traced by
# root from their first instruction: the attach is refused (TRIED), or a run it changed is
# no answer. The after-suite check requires an attempt (TRIED or FORGED).
set -eu
. /opt/dev-script-0/common.sh  # user_watcher, rebuild
# the defect: faults/launcher-lenient.sh's
rebuild launcher cmd/launcher/main.go "	if base64.RawURLEncoding.EncodeToString(raw) != s[1:] {" "	if false {" "	if !argPattern.MatchString(s) {" "	s = strings.TrimRight(s, \"=\")
	if !argPattern.MatchString(s) {"
exit_forger '/usr/local/libexec/opencode-pty-launcher ' 1
echo "FAULT: byk makes the launcher's direct runs exit 1 by ptrace" >&2
