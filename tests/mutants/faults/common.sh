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

ptrace_lib() { # /usr/local/lib/pty-fault/ptracelib.py: what every ptrace watcher of a fault needs
	# (libc's ptrace, its requests, the x86-64 registers, its log named by argv[1], STARTED written);
	# a watcher puts the directory on sys.path (python3 -I leaves its own out) and imports it
	mkdir -p -m 0755 /usr/local/lib/pty-fault
	cat > /usr/local/lib/pty-fault/ptracelib.py <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
SEIZE, INTERRUPT, SYSCALL, GETREGS, SETREGS, DETACH = 0x4206, 0x4207, 24, 12, 13, 17
WALL, WNOHANG = 0x40000000, 1
ENOSYS = (1 << 64) - 38  # rax at a system call's entry stop
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
        "fs_base gs_base ds es fs gs").split()]
log = open(sys.argv[1], 'a', buffering=1)
log.write(f"STARTED uid {os.getuid()}\n")
PY
}

exit_forger() { # MATCH STATUS: a watcher of byk's attaches with ptrace to every process of byk's
	# outside a session unit whose command line (its arguments joined by spaces) holds MATCH,
	# and turns its next system call into exit_group(STATUS); logs TRIED
	# when the attach is refused, FORGED when it forged (the after-suite check: WATCHER_FORGED)
	ptrace_lib
	cat > /usr/local/lib/pty-fault/exit-forger.py <<'PY'
import ctypes, os, sys, time
sys.path.insert(0, "/usr/local/lib/pty-fault")
from ptracelib import DETACH, ENOSYS, GETREGS, INTERRUPT, SEIZE, SETREGS, SYSCALL, WALL, WNOHANG, Regs, libc, log  # noqa
me, done = os.getuid(), set()
match, status = sys.argv[2].encode(), int(sys.argv[3])
def forge(pid):
    if libc.ptrace(SEIZE, pid, None, ctypes.c_void_p(1)) != 0:
        log.write(f"TRIED {pid}: seize failed errno {ctypes.get_errno()}\n"); return
    libc.ptrace(INTERRUPT, pid, None, None)
    for _ in range(1000):
        try:
            _, st = os.waitpid(pid, WALL)
        except ChildProcessError:
            return
        if not os.WIFSTOPPED(st):
            return
        if os.WSTOPSIG(st) == 0x85:  # a system call's entry: made exit_group(1)
            r = Regs(); libc.ptrace(GETREGS, pid, None, ctypes.byref(r))
            r.orig_rax, r.rdi = 231, status
            libc.ptrace(SETREGS, pid, None, ctypes.byref(r))
            log.write(f"FORGED {pid}: its next system call made exit_group({status})\n")
            libc.ptrace(DETACH, pid, None, None)
            return
        libc.ptrace(SYSCALL, pid, None, None)
while True:
    for d in os.listdir('/proc'):
        if not d.isdigit() or d in done:
            continue
        try:
            if os.stat('/proc/' + d).st_uid != me:
                continue
            cmd = open('/proc/' + d + '/cmdline', 'rb').read()
            group = open('/proc/' + d + '/cgroup', 'rb').read()
        except OSError:
            continue
        if match in cmd.replace(b'\0', b' ') and b'/opencode-pty-' not in group:
            done.add(d)
            forge(int(d))
    time.sleep(0.001)
PY
	user_watcher pty-fault-watcher /var/lib/pty-fault/watcher.log /usr/local/lib/pty-fault/exit-forger.py \
		/var/lib/pty-fault/watcher.log "$1" "$2"
}
