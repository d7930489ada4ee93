set -eu
C=/usr/local/libexec/opencode-pty-client
mv $C $C.real
printf '#!/bin/sh\nexec 5</etc/hostname\nexec %s.real "$@"\n' "$C" > $C
chmod 0755 $C
echo "FAULT: client is a wrapper that opens /etc/hostname as fd 5" >&2
