# A drop-in of the candidate's unit with an ExecReload= that is no executable (the defect:
# systemd-analyze verify fails on it, CUT-4), and a watcher of the service user's (a blind red
# team's round eight, issue 37) that attaches with ptrace to every `systemd-analyze verify` the
# suite runs as that user and makes it exit 0 with no output: it once ended READY with the
# marker. The suite's systemd-analyze runs are behind its gate, traced by root from their first
# instruction: the attach is refused (TRIED), or a run it changed is no answer.
set -eu
. /opt/dev-script-0/common.sh  # exit_forger
mkdir -p /etc/systemd/system/opencode-v2.service.d
printf '[Service]\nExecReload=/usr/local/bin/opencode-reload-missing\n' > /etc/systemd/system/opencode-v2.service.d/reload.conf
systemctl daemon-reload
exit_forger 'systemd-analyze verify ' 0
echo "FAULT: a broken ExecReload= drop-in, and byk makes systemd-analyze verify exit 0 by ptrace" >&2
