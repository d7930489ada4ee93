# The service user plants configuration bun would read (issue 29): for the whole
# run, a loop of its own drops a bunfig.toml and a .bunfig.toml whose preload
# (p.ts) ends bun with exit 0 before the harness runs, a .env, .env.local,
# package.json, tsconfig.json, bun.lock, .npmrc and a node_modules, into every
# place it can reach where a harness run might look: the PLUGIN-1 run
# directories in the scratch area (/tmp/pty-acceptance-run-*/pty-acceptance-*),
# the working directory and root of each of its own processes
# (/proc/<pid>/cwd, /proc/<pid>/root/tmp: how it learns a run's places),
# /tmp itself and its own HOME. Every plant and refusal is logged
# (/var/lib/pty-fault/planter.log). With the plugin's first run made to fail
# (fail-run:1 in the catalogue entry), a plant that took effect would turn
# that failure into exit 0: PLUGIN-1 must still see the harness's own failure.
# PTY_FAULT_PRELOAD=escape (set by the catalogue entry) makes the preload also
# start `setsid sleep 600` holding bun's output open, as issue 29 tried.
set -eu
mkdir -p -m 0755 /usr/local/lib/pty-fault
cat > /usr/local/lib/pty-fault/planter.py <<'PY'
import glob, os, sys, time

LOG = sys.argv[1]
me = os.getuid()
said = set()
PRELOAD = "/var/lib/pty-fault/p.ts"
FILES = {  # every file bun's source (src/cli/Arguments.zig, its resolver) says it looks for
    "bunfig.toml": f'preload = ["{PRELOAD}"]\n',
    ".bunfig.toml": f'preload = ["{PRELOAD}"]\n',
    ".env": "PTY_FAULT_PLANTED=1\n",
    ".env.local": "PTY_FAULT_PLANTED=1\n",
    "package.json": '{"name": "planted", "type": "module", "imports": {"#p": "/var/lib/pty-fault/p.ts"}}\n',
    "tsconfig.json": '{"compilerOptions": {"paths": {"*": ["/var/lib/pty-fault/*"]}}}\n',
    "bun.lock": "{}\n",
    ".npmrc": "registry=http://127.0.0.1:9/\n",
    "p.ts": open(PRELOAD).read(),
}


def log(line):
    if line not in said:
        said.add(line)
        with open(LOG, "a") as f:
            f.write(line + "\n")


def places():
    found = {"/tmp", os.path.expanduser("~")}
    found |= set(glob.glob("/tmp/pty-acceptance-run-*/pty-acceptance-*"))
    found |= set(glob.glob("/tmp/pty-acceptance-run-*/pty-acceptance-*/*"))
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for where in (f"/proc/{pid}/cwd", f"/proc/{pid}/root/tmp", f"/proc/{pid}/root/tmp/pty-acceptance-home",
                      f"/proc/{pid}/root/tmp/pty-acceptance-work"):
            try:
                target = os.readlink(where) if where.endswith("cwd") else where
            except OSError as e:
                log(f"REFUSED {where}: {e.strerror}")
                continue
            if where.endswith("cwd") and target in ("/", "/var/lib/pty-fault"):
                continue
            found.add(where)
    return found


log(f"STARTED uid {me}")
while True:
    for place in sorted(places()):
        try:
            os.mkdir(os.path.join(place, "node_modules"), 0o755)
            log(f"PLANTED {place}/node_modules/")
        except OSError as e:
            if not isinstance(e, FileExistsError):
                log(f"REFUSED {place}/node_modules/: {e.strerror}")
        for name, body in FILES.items():
            path = os.path.join(place, name)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                continue
            except OSError as e:
                log(f"REFUSED {path}: {e.strerror}")
                continue
            os.write(fd, body.encode())
            os.close(fd)
            log(f"PLANTED {path}")
    time.sleep(0.005)
PY
mkdir -p -m 0755 /var/lib/pty-fault
if [ "${PTY_FAULT_PRELOAD:-exit}" = escape ]; then
	printf '%s\n' 'Bun.spawn(["/usr/bin/setsid", "/bin/sleep", "600"], { stdin: "ignore", stdout: "inherit", stderr: "inherit" }).unref();' \
		'process.exit(0);' > /var/lib/pty-fault/p.ts
else
	printf 'process.exit(0);\n' > /var/lib/pty-fault/p.ts
fi
chmod 0644 /var/lib/pty-fault/p.ts
install -o byk -g byk -m 0644 /dev/null /var/lib/pty-fault/planter.log
systemd-run --unit=pty-fault-planter --uid=byk --gid=byk -p WorkingDirectory=/var/lib/pty-fault \
	-p Environment=HOME=/home/byk /usr/bin/python3 -I /usr/local/lib/pty-fault/planter.py /var/lib/pty-fault/planter.log
i=0; until grep -q '^STARTED' /var/lib/pty-fault/planter.log; do i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done
echo "FAULT: byk plants bun configuration wherever it can reach for the whole run" >&2
