# rebuild BIN PATCHFILE PYTHON-REPLACEMENTS...: patch a copy of the deployed source, rebuild BIN, install it
set -eu
SUPDIR=/home/byk/.local/share/opencode-v2-pilot/supervisor
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
	runuser -u byk -- env -i PATH=/usr/bin:/bin HOME="$B" GOCACHE="$B/cache" GOPATH="$B/gopath" GOFLAGS=-mod=mod GOPROXY=off \
		sh -c 'cd "$1/src" && CGO_ENABLED=0 go build -trimpath -ldflags=-buildid= -o "$1/out" "./cmd/$2"' sh "$B" "$bin"
	install -o root -g root -m 0755 "$B/out" "/usr/local/libexec/opencode-pty-$bin"
	rm -rf "$B"
	if [ "$bin" = supervisor ]; then
		systemctl restart opencode-pty-supervisor.service
		i=0; while [ ! -S /run/opencode-pty/supervisor.sock ]; do i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done
	fi
	echo "FAULT: rebuilt $bin with patched $file" >&2
}
