# rebuild BIN PATCHFILE PYTHON-REPLACEMENTS...: patch a copy of the deployed source, rebuild BIN, install it
set -eu
SUPDIR=/home/byk/.local/share/opencode-v2-pilot/supervisor
impl() { # prints go or python: the supervisor implementation deploy.sh installed
	read -r word </etc/opencode-reference/supervisor-impl || {
		echo "FAULT: /etc/opencode-reference/supervisor-impl unreadable" >&2; return 1; }
	case $word in
	go | python) printf '%s\n' "$word" ;;
	*) echo "FAULT: unknown supervisor implementation '$word'" >&2; return 1 ;;
	esac
}
rebuild() {
	bin=$1; file=$2; shift 2
	B=$(mktemp -d /tmp/fault-build.XXXXXX)
	cp -r "$SUPDIR" "$B/src"
	python3 - "$B/src/$file" "$@" <<'PY'
import sys
path, pairs = sys.argv[1], sys.argv[2:]
s = open(path).read()
for old, new in zip(pairs[::2], pairs[1::2]):
    assert s.count(old) >= 1, f"patch target not found: {old!r}"
    s = s.replace(old, new)
open(path, "w").write(s)
PY
	chown -R byk:byk "$B"
	# no GOFLAGS: go's default, the deployed tree's vendor/ (deploy.sh vendors it)
	runuser -u byk -- env -i PATH=/usr/bin:/bin HOME="$B" GOCACHE="$B/cache" GOPATH="$B/gopath" GOPROXY=off \
		sh -c 'cd "$1/src" && CGO_ENABLED=0 go build -trimpath -ldflags=-buildid= -o "$1/out" "./cmd/$2"' sh "$B" "$bin"
	install -o root -g root -m 0755 "$B/out" "/usr/local/libexec/opencode-pty-$bin"
	rm -rf "$B"
	if [ "$bin" = supervisor ]; then
		systemctl restart opencode-pty-supervisor.service
		i=0; while [ ! -S /run/opencode-pty/supervisor.sock ]; do i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done
	fi
	echo "FAULT: rebuilt $bin with patched $file" >&2
}

# --- the candidate runtime and its preview unit (deploy.sh installs them)
RUNTIME=/home/byk/Code/opencode-v2-pilot/packages/cli/dist-v2-pilot-final/cli-node-linux-x64/bin/opencode2-node
PREVIEW=/etc/systemd/system/opencode-v2-preview.service
wait_port() { # PORT: until 127.0.0.1:PORT accepts, 10 s at most
	python3 -I -c 'import socket, sys, time
d = time.monotonic() + 10
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close(); break
    except OSError as e:
        if time.monotonic() > d: sys.exit(f"127.0.0.1:{sys.argv[1]}: {e}")
        time.sleep(0.05)' "$1"
}
preview_runs() { # PROGRAM ARGS...: a drop-in makes the preview run this command line on 14102
	mkdir -p "$PREVIEW.d"
	printf '[Service]\nExecStart=\nExecStart=%s\n' "$*" >"$PREVIEW.d/fault.conf"
	systemctl daemon-reload
	systemctl restart opencode-v2-preview.service
	wait_port 14102
	echo "FAULT: the preview now runs $*" >&2
}
plain_node() { # VERSION: the runtime path holds plain node VERSION, which runs server.js
	install -o root -g root -m 0755 "/opt/pty-acceptance/node/v$1/bin/node" "$RUNTIME"
	install -d -m 0755 /usr/local/lib/opencode-reference
	install -m 0644 /opt/pty-acceptance/src/tests/reference/src/candidate/server.js \
		/usr/local/lib/opencode-reference/candidate.js
	preview_runs "$RUNTIME" /usr/local/lib/opencode-reference/candidate.js --port 14102
}

user_watcher() { # UNIT LOG SCRIPT ARGS...: python3 SCRIPT ARGS runs as byk in the unit UNIT, its log
	# LOG made byk's first; returns once the script wrote its STARTED line (10 s at most)
	unit=$1 log=$2
	shift 2
	mkdir -p -m 0755 "$(dirname "$log")"
	install -o byk -g byk -m 0644 /dev/null "$log"
	systemd-run --unit="$unit" --uid=byk --gid=byk -p WorkingDirectory=/ /usr/bin/python3 -I "$@"
	i=0; until grep -q '^STARTED' "$log"; do i=$((i+1)); [ $i -lt 200 ] || return 1; sleep 0.05; done
}
