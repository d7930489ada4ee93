#!/bin/sh
# Reference deployment of the opencode PTY supervisor stack.
#
# Runs as root INSIDE a freshly booted reference guest (Debian bookworm,
# systemd 252, or trixie, systemd 257: tests/refhost/tree.py RELEASES, read
# from the guest's /etc/os-release); the project is bind-mounted read-only at
# $SRC. It creates the
# service user, installs the fake pilot and code trees, builds the three Go
# binaries as the service user with the BUILD-1 command, installs them and the
# two units, starts the supervisor and checks the result against
# inventories/reference.yml (exit non-zero naming any mismatch).
#
# OPENCODE_REFERENCE_SUPERVISOR=go|python (default go) picks the supervisor
# implementation: go builds src/supervisor as it is (checked against
# inventories/reference.yml); python replaces its cmd/supervisor with
# src/supervisor-python/cmd/supervisor (the Go shim with the embedded Python
# supervisor; checked against inventories/reference-python.yml, which
# expected.py writes). The dependencies go.mod requires are vendored from the
# guest's golang-*-dev packages (vendor.py) before the build. A release other
# than bookworm packages other versions of them: src/supervisor-<release>/
# holds that release's go.mod and go.sum, laid over the tree before vendoring,
# and the inventories are inventories/reference-<release>[-python].yml.
# OPENCODE_REFERENCE_RELEASE, when set (the harness sets it), must be the
# guest's release.
set -eu

SRC=${OPENCODE_REFERENCE_SRC:-/opt/pty-acceptance/src}
REF=$SRC/tests/reference
IMPL=${OPENCODE_REFERENCE_SUPERVISOR:-go}
RELEASE=$(sed -n 's/^VERSION_CODENAME=\([a-z]*\)$/\1/p' /etc/os-release | head -n 1)
case $RELEASE in
bookworm) SUFFIX= ;;
trixie) SUFFIX=-$RELEASE ;;
*) printf 'deploy.sh: ERROR: this guest is release %s (/etc/os-release): bookworm or trixie\n' "${RELEASE:-unknown}" >&2; exit 1 ;;
esac
if [ -n "${OPENCODE_REFERENCE_RELEASE:-}" ] && [ "$OPENCODE_REFERENCE_RELEASE" != "$RELEASE" ]; then
	printf 'deploy.sh: ERROR: asked for release %s, this guest is %s\n' "$OPENCODE_REFERENCE_RELEASE" "$RELEASE" >&2
	exit 1
fi
case $IMPL in
go) INV=$SRC/inventories/reference$SUFFIX.yml ;;
python) INV=$SRC/inventories/reference$SUFFIX-python.yml ;;
*) printf 'deploy.sh: ERROR: OPENCODE_REFERENCE_SUPERVISOR=%s: go or python\n' "$IMPL" >&2; exit 1 ;;
esac
USER_NAME=byk
GROUP_NAME=byk
HOME_DIR=/home/byk
PILOT=$HOME_DIR/.local/share/opencode-v2-pilot
CODE=$HOME_DIR/Code/opencode-v2-pilot
SUPDIR=$PILOT/supervisor
LIBEXEC=/usr/local/libexec
UNITDIR=/etc/systemd/system
SOCK=/run/opencode-pty/supervisor.sock
DBG=/etc/opencode-reference
BINS="supervisor launcher client"

say() { printf 'deploy.sh: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
now_ms() { date +%s%3N; }
T0=$(now_ms)

[ "$(id -u)" = 0 ] || die "must run as root"
[ -f "$INV" ] || die "inventory $INV missing"
for tool in go git runuser sha256sum systemctl python3 script; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not installed in the guest"
done

# --- service user -----------------------------------------------------------
getent group "$GROUP_NAME" >/dev/null || groupadd "$GROUP_NAME"
if ! getent passwd "$USER_NAME" >/dev/null; then
	useradd --create-home --home-dir "$HOME_DIR" --gid "$GROUP_NAME" \
		--shell /bin/bash "$USER_NAME"
fi
install -d -o "$USER_NAME" -g "$GROUP_NAME" -m 0750 "$HOME_DIR"
install -d -o "$USER_NAME" -g "$GROUP_NAME" -m 0755 \
	"$HOME_DIR/.local" "$HOME_DIR/.local/share" "$HOME_DIR/Code"
# production opencode runs as a system user of its own, not as the service
# user: a dumpable process of the service user outside the sessions would
# hand every session the host's root through /proc/<pid>/root (UNIT-7), and
# the released opencode (a bun-compiled program that reads its own binary)
# cannot run execute-only, which would make it not dumpable
PROD_USER=opencode-production
getent passwd "$PROD_USER" >/dev/null ||
	useradd --system --user-group --home-dir /nonexistent --no-create-home \
		--shell /usr/sbin/nologin "$PROD_USER"

# --- trees ----------------------------------------------------------------
rm -rf "$PILOT" "$CODE"
copy_tree() { # SRC DEST: files 0644, dirs 0755, owned by the service user
	mkdir -p "$2"
	(cd "$1" && find . -name __pycache__ -prune -o -type d -print) | while IFS= read -r d; do
		install -d -o "$USER_NAME" -g "$GROUP_NAME" -m 0755 "$2/$d"
	done
	(cd "$1" && find . -name __pycache__ -prune -o -type f -print) | while IFS= read -r f; do
		install -o "$USER_NAME" -g "$GROUP_NAME" -m 0644 "$1/$f" "$2/$f"
	done
}
copy_tree "$REF/tree/pilot" "$PILOT"
copy_tree "$REF/src/supervisor" "$SUPDIR"
if [ "$IMPL" = python ]; then
	rm -rf "$SUPDIR/cmd/supervisor"
	copy_tree "$REF/src/supervisor-python/cmd/supervisor" "$SUPDIR/cmd/supervisor"
fi
if [ -n "$SUFFIX" ]; then # this release's go.mod and go.sum: the module versions it packages
	copy_tree "$REF/src/supervisor$SUFFIX" "$SUPDIR"
fi
# go mod vendor's tree for what the main module imports, from the guest's
# golang-*-dev packages (no network); Go builds from vendor/ by default.
python3 -I "$REF/vendor.py" "$SUPDIR" || die "vendoring the supervisor's dependencies failed"
chown -R "$USER_NAME:$GROUP_NAME" "$SUPDIR/vendor"
copy_tree "$REF/tree/code" "$CODE"
for d in cache data state; do
	install -d -o "$USER_NAME" -g "$GROUP_NAME" -m 0700 "$PILOT/$d"
done
umask_old=$(umask); umask 077
printf 'OPENCODE_PASSWORD=reference-host-not-a-secret\n' >"$PILOT/server.env"
umask "$umask_old"
chown "$USER_NAME:$GROUP_NAME" "$PILOT/server.env"
chmod 0600 "$PILOT/server.env"

as_user() { runuser -u "$USER_NAME" -- "$@"; }

# one commit, fixed identity and dates: a deterministic revision
as_user env -i PATH=/usr/bin:/bin HOME="$HOME_DIR" LANG=C.UTF-8 \
	GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
	GIT_AUTHOR_NAME="opencode reference" GIT_AUTHOR_EMAIL="reference@opencode.invalid" \
	GIT_COMMITTER_NAME="opencode reference" GIT_COMMITTER_EMAIL="reference@opencode.invalid" \
	GIT_AUTHOR_DATE="2026-09-08T08:00:00+00:00" GIT_COMMITTER_DATE="2026-09-08T08:00:00+00:00" \
	sh -c 'cd "$1" && git -c init.defaultBranch=main init -q . &&
		git add -A && git commit -q --no-gpg-sign -m "opencode-v2-pilot reference fixture"' sh "$CODE"
REVISION=$(as_user git -C "$CODE" rev-parse HEAD)

# --- build as the service user ---------------------------------------------
BUILD_TMP=$(mktemp -d /tmp/opencode-reference-build.XXXXXX)
trap 'rm -rf "$BUILD_TMP"' EXIT
chown "$USER_NAME:$GROUP_NAME" "$BUILD_TMP"
install -d -o "$USER_NAME" -g "$GROUP_NAME" -m 0755 "$SUPDIR/bin"
TB=$(now_ms)
for name in $BINS; do
	as_user env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$BUILD_TMP" \
		GOCACHE="$BUILD_TMP/cache" GOPATH="$BUILD_TMP/gopath" \
		GOPROXY=off GOTOOLCHAIN=local \
		sh -c 'cd "$1" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags=-buildid= -o "bin/opencode-pty-$2" "./cmd/$2"' \
		sh "$SUPDIR" "$name" || die "go build of ./cmd/$name failed"
done
TB=$(( $(now_ms) - TB ))

# --- install ----------------------------------------------------------------
install -d -o root -g root -m 0755 "$LIBEXEC"
for name in $BINS; do
	install -o root -g root -m 0755 "$SUPDIR/bin/opencode-pty-$name" "$LIBEXEC/opencode-pty-$name"
done
install -o root -g root -m 0644 "$SUPDIR/opencode-pty-supervisor.service" "$UNITDIR/opencode-pty-supervisor.service"
install -o root -g root -m 0644 "$SUPDIR/opencode-pty.slice" "$UNITDIR/opencode-pty.slice"
install -d -o root -g root -m 0755 /etc/opencode
install -d -o root -g root -m 0755 "$DBG"
rm -f /etc/opencode/pty-supervisor-verified
printf '%s\n' "$IMPL" >"$DBG/supervisor-impl"
chmod 0644 "$DBG/supervisor-impl"
# the smoke harness's run counter for its fail-run:N and hang-run:N switches:
# root's, socket-activated (nothing runs until a switched-on harness asks),
# counting only the suite's plugin smoke runs (src/fault-count.py says why)
COUNTER_LIB=/usr/local/lib/opencode-reference
install -d -o root -g root -m 0755 "$COUNTER_LIB"
install -o root -g root -m 0644 "$REF/src/fault-count.py" "$COUNTER_LIB/fault-count.py"
cat >"$UNITDIR/opencode-reference-fault-count.socket" <<UNIT
# The reference smoke harness's run counter (reference host only).
[Unit]
Description=run counter of the reference plugin smoke harness (reference host)

[Socket]
ListenStream=/run/opencode-reference/fault-count.sock
SocketMode=0666
DirectoryMode=0755

[Install]
WantedBy=sockets.target
UNIT
cat >"$UNITDIR/opencode-reference-fault-count.service" <<UNIT
# The reference smoke harness's run counter (reference host only).
[Unit]
Description=run counter of the reference plugin smoke harness (reference host)

[Service]
ExecStart=/usr/bin/python3 -I $COUNTER_LIB/fault-count.py
UNIT
chmod 0644 "$UNITDIR/opencode-reference-fault-count.socket" "$UNITDIR/opencode-reference-fault-count.service"

systemctl daemon-reload
systemctl enable --quiet opencode-pty-supervisor.service
systemctl enable --quiet --now opencode-reference-fault-count.socket
TS=$(now_ms)
systemctl restart opencode-pty-supervisor.service
i=0
while [ ! -S "$SOCK" ]; do
	i=$((i + 1))
	if [ $i -gt 200 ]; then
		systemctl status --no-pager opencode-pty-supervisor.service >&2 || true
		journalctl --no-pager -u opencode-pty-supervisor.service -n 30 >&2 || true
		die "supervisor socket $SOCK did not appear within 10 s"
	fi
	sleep 0.05
done
TS=$(( $(now_ms) - TS ))

# --- the candidate runtime and the two servers --------------------------------
# The candidate is a Node 26.4 single-executable application of
# src/candidate/server.js, built by the harness (tests/refhost/nodedist.py) and
# seen here read-only under $NODE_DIR. Installed root:root 0711 (unreadable to
# the service user, so its processes are not dumpable), run as byk: the preview
# on 14102 (opencode-v2-preview.service, from the pilot's candidate unit).
# Production on 4096 (opencode.service) is the released opencode server (npm
# opencode-linux-x64, pinned and checked by the harness, tests/refhost/npmdist.py,
# which names its path here), installed root:root, run as its own system user
# (above: not the service user, UNIT-7) with private state and everything that
# reaches out switched off. It has no password: the
# suite reads production's health unauthenticated, on loopback only.
NODE_DIR=/opt/pty-acceptance/node
SEA_KEY=v26.4.0-$(sha256sum <"$REF/src/candidate/server.js" | cut -c1-16)
SEA=$NODE_DIR/sea/$SEA_KEY/opencode2-node
RUNTIME=$CODE/packages/cli/dist-v2-pilot-final/cli-node-linux-x64/bin/opencode2-node
OPENCODE_SRC=$(python3 -I "$SRC/tests/refhost/npmdist.py" guest-path opencode-linux-x64) ||
	die "cannot read the opencode pin from tests/refhost/npmdist.py"
OPENCODE=/usr/local/bin/opencode
# bun (npm @oven/bun-linux-x64, pinned and checked by npmdist.py) runs the
# plugin smoke harness ($PILOT/pty-smoke/pty-plugin-smoke.ts) for PLUGIN-1.
BUN_SRC=$(python3 -I "$SRC/tests/refhost/npmdist.py" guest-path @oven/bun-linux-x64) ||
	die "cannot read the bun pin from tests/refhost/npmdist.py"
BUN=/usr/local/bin/bun
[ -f "$SEA" ] || die "candidate SEA $SEA missing (tests/refhost/nodedist.py builds it on the build host)"
[ -f "$OPENCODE_SRC" ] || die "opencode $OPENCODE_SRC missing (tests/refhost/npmdist.py fetches it on the build host)"
d=$CODE/packages
for sub in cli dist-v2-pilot-final cli-node-linux-x64 bin; do
	d=$d/$sub
	install -d -o "$USER_NAME" -g "$GROUP_NAME" -m 0755 "$d"
done
install -o root -g root -m 0711 "$SEA" "$RUNTIME"
install -o root -g root -m 0755 "$OPENCODE_SRC" "$OPENCODE"
[ -f "$BUN_SRC" ] || die "bun $BUN_SRC missing (tests/refhost/npmdist.py fetches it on the build host)"
install -o root -g root -m 0755 "$BUN_SRC" "$BUN"
cat >"$UNITDIR/opencode.service" <<UNIT
# Production opencode server: the released opencode (reference host).
[Unit]
Description=opencode production server (released opencode, reference host)
After=network.target

[Service]
Type=simple
User=$PROD_USER
Group=$PROD_USER
StateDirectory=opencode-production
StateDirectoryMode=0700
CacheDirectory=opencode-production
CacheDirectoryMode=0700
WorkingDirectory=%S/opencode-production
Environment=HOME=%S/opencode-production XDG_CONFIG_HOME=%S/opencode-production/config
Environment=XDG_DATA_HOME=%S/opencode-production/data XDG_STATE_HOME=%S/opencode-production/state
Environment=XDG_CACHE_HOME=%C/opencode-production
Environment=OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1
Environment=OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1
ExecStart=$OPENCODE serve --hostname 127.0.0.1 --port 4096
Restart=on-failure
UNIT
sed -e 's|--port 4096|--port 14102|' \
	-e 's|^Description=.*|Description=opencode v2 pilot preview on 14102 (reference stand-in)|' \
	-e '/^\[Install\]/,$d' "$PILOT/opencode-v2.service" >"$UNITDIR/opencode-v2-preview.service"
chmod 0644 "$UNITDIR/opencode.service" "$UNITDIR/opencode-v2-preview.service"
systemctl daemon-reload
TC=$(now_ms)
systemctl restart opencode.service opencode-v2-preview.service
wait_http() { # PORT PATH SECONDS: until GET PATH on 127.0.0.1:PORT answers 200 (each try bounded)
	python3 -I - "$@" <<'PY' || die "127.0.0.1:$1 did not answer GET $2 with 200 within $3 s"
import http.client, sys, time
port, path, deadline = int(sys.argv[1]), sys.argv[2], time.monotonic() + float(sys.argv[3])
while True:
    try:  # a connection accepted while the server starts may never be answered: retry
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", path)
        if c.getresponse().status == 200:
            break
        what = "not 200"
    except (OSError, http.client.HTTPException) as e:
        what = e
    if time.monotonic() > deadline:
        print(f"127.0.0.1:{port}{path}: {what}", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.05)
PY
}
wait_port() { # PORT: until something accepts on 127.0.0.1:PORT, 10 s at most
	python3 -I - "$1" <<'PY' || die "nothing listens on 127.0.0.1:$1 within 10 s"
import socket, sys, time
deadline = time.monotonic() + 10
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError as e:
        if time.monotonic() > deadline:
            print(f"127.0.0.1:{sys.argv[1]}: {e}", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.05)
PY
}
wait_port 14102
TP=$(now_ms)
wait_http 4096 /global/health 30
TC=$(( $(now_ms) - TC )); TP=$(( $(now_ms) - TP ))

# --- record and compare ------------------------------------------------------
manifest() {
	{
		find "$SUPDIR" -type f -name '*.go'
		for f in "$CODE"/packages/plugin/src/*.ts; do [ -f "$f" ] && printf '%s\n' "$f"; done
		for f in go.mod go.sum opencode-pty.slice opencode-pty-supervisor.service; do
			printf '%s\n' "$SUPDIR/$f"
		done
		printf '%s\n' "$PILOT/config/opencode/plugins/pty.ts" "$PILOT/config/opencode/plugins/pty-transport.ts" \
			"$PILOT/config/opencode/tsconfig.json" "$PILOT/config/opencode/package.json" \
			"$PILOT/config/opencode/bun.lock" "$PILOT/opencode-v2.service" \
			"$CODE/packages/plugin/package.json" "$CODE/bun.lock"
	} | LC_ALL=C sort -u | while IFS= read -r f; do sha256sum "$f"; done
}
manifest >"$DBG/source-manifest.txt"
MANIFEST=$(sha256sum <"$DBG/source-manifest.txt" | cut -d' ' -f1)

{
	printf '%s\n' "$PILOT" "$CODE" "$PILOT/server.env"
	for name in $BINS; do printf '%s\n' "$LIBEXEC/opencode-pty-$name"; done
	printf '%s\n' "$UNITDIR/opencode-pty-supervisor.service" "$UNITDIR/opencode-pty.slice" \
		/etc/opencode "$DBG/source-manifest.txt" "$DBG/installed-paths" "$DBG/deploy.env" \
		"$DBG/supervisor-impl" \
		"$RUNTIME" "$OPENCODE" "$BUN" /var/lib/opencode-production /var/cache/opencode-production \
		"$UNITDIR/opencode.service" \
		"$UNITDIR/opencode-v2-preview.service" \
		"$COUNTER_LIB" "$UNITDIR/opencode-reference-fault-count.socket" \
		"$UNITDIR/opencode-reference-fault-count.service"
} >"$DBG/installed-paths"

inv_value() { # KEY: the quoted value of KEY: "..." in the inventory
	sed -n "s/^ *$1: \"\([0-9a-f]*\)\".*/\1/p" "$INV" | head -n 1
}
inv_bin() { # NAME: sha256 of binaries.NAME
	sed -n "s/^ *$1: {path: [^,]*, sha256: \"\([0-9a-f]*\)\".*/\1/p" "$INV" | head -n 1
}
mismatch=""
check() { # WHAT WANT GOT
	if [ "$2" != "$3" ]; then
		say "MISMATCH $1: inventory $2, deployed $3"
		mismatch="$mismatch $1"
	fi
}
check revision "$(inv_value revision)" "$REVISION"
check source_manifest_sha256 "$(inv_value source_manifest_sha256)" "$MANIFEST"
{
	printf 'supervisor_impl=%s\nrelease=%s\n' "$IMPL" "$RELEASE"
	printf 'revision=%s\nsource_manifest_sha256=%s\n' "$REVISION" "$MANIFEST"
	printf 'go_version=%s\n' "$(go version)"
	for name in $BINS; do
		got=$(sha256sum "$LIBEXEC/opencode-pty-$name" | cut -d' ' -f1)
		printf '%s_sha256=%s\n' "$name" "$got"
		check "binaries.$name.sha256" "$(inv_bin "$name")" "$got"
	done
	got=$(sha256sum "$RUNTIME" | cut -d' ' -f1)
	printf 'runtime_sha256=%s\n' "$got"
	check runtime.sha256 "$(inv_value sha256)" "$got"
	got=$(sha256sum "$BUN" | cut -d' ' -f1)
	printf 'bun_sha256=%s\n' "$got"
	check plugin.bun_sha256 "$(inv_value bun_sha256)" "$got"
	got=$(sha256sum "$PILOT/pty-smoke/pty-plugin-smoke.ts" | cut -d' ' -f1)
	printf 'harness_sha256=%s\n' "$got"
	check plugin.harness_sha256 "$(inv_value harness_sha256)" "$got"
	printf 'opencode_from=%s\n' "$OPENCODE_SRC"
	printf 'build_ms=%s\nsupervisor_start_ms=%s\nservers_start_ms=%s\nproduction_wait_ms=%s\ntotal_ms=%s\n' "$TB" "$TS" "$TC" "$TP" "$(( $(now_ms) - T0 ))"
} >"$DBG/deploy.env"
cat "$DBG/deploy.env" >&2
for u in opencode-pty-supervisor.service opencode.service opencode-v2-preview.service; do
	systemctl is-active --quiet "$u" || die "$u is not active"
done
[ -z "$mismatch" ] || die "deployed host does not match $INV:$mismatch (toolchain or source drift)"
say "reference host deployed in $(( $(now_ms) - T0 )) ms"
