set -eu
C=/usr/local/libexec/opencode-pty-client
mv $C $C.real
printf '#!/bin/sh\n/usr/bin/python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.connect(\\"/run/opencode-pty/supervisor.sock\\")" || true\nexec %s.real "$@"\n' "$C" > $C
chmod 0755 $C; cat $C
echo "FAULT: client is a wrapper that connects to the supervisor socket itself" >&2
