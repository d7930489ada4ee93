// The plugin smoke harness, reference deployment (fixture code; it never
// ships). Run by bun as the service user from a directory outside the
// auto-discovered plugin directory:
//
//   bun pty-plugin-smoke.ts [--helper PATH] [--same-as PATH] [--isolated-supervisor]
//
// --helper       the fixed helper the local-pty plugin hands its connection to
//                (default: the transport's installed path)
// --same-as      the helper must be byte-identical to this one (a freshly
//                built helper against the installed one: source identity)
// --isolated-supervisor  start the harness's own disposable supervisor
//                (smokeSupervisor() below, run as `python3 -I -c`, on a socket
//                in a fresh 0700 directory of the cwd); without it the
//                plugin's default socket is used
//
// It names the deployed pilot tree by absolute path (the plugin it imports,
// the plugin directory), never relative to itself: the suite runs a
// root-owned copy of these bytes from a directory of its own (PLUGIN-1), so
// nothing beside the copy is there. It needs nothing else of the pilot tree
// and nothing of the service user's home: a run sees, of the user's trees,
// only the source manifest's files as the suite copied them (its disposable
// supervisor is part of these bytes, not a file of the tree).
//
// It refuses (exit 3) to run as root (real or effective uid 0) or from inside
// the plugin directory, and from a cwd that is not its own 0700 directory.
// Checks: permissions, source identity, transport framing, helper transfer,
// UTF-8 write bounds, pre-listener output bounds, saturated STOP bounds,
// timeouts (HELLO, session runtime), cleanup. One numbered result file per
// run in the cwd (smoke-result-NNN.json, O_EXCL, 0600); the last line printed
// is PASS or FAIL with the counts. Exit 0 only when every check passed.
//
// Fault switches (reference host only): words in
// /etc/opencode-reference/plugin-faults, read at start:
//   fail-run:N        check "fault" fails on the Nth run
//   hang-run:N        the Nth run never finishes
//                     (runs are counted, only while one of these two is set,
//                     by the reference host's root-run counter on COUNTER,
//                     tests/reference/src/fault-count.py: each run has a fresh
//                     working directory, so its result is always number 1,
//                     and whatever a run could write to keep a count in, the
//                     service user could write too)
//   start-in-plugins  the refusal is skipped and the run happens (and writes
//                     its result) inside the plugin directory
//   allow-root        the root refusal is skipped
//   leave-process     a process (setsid sleep 600) outlives the run, holding its
//                     output open (stdout inherited), whatever the run's result
import fs from "node:fs"
import net from "node:net"
import path from "node:path"
import crypto from "node:crypto"
import { dlopen, FFIType, ptr } from "bun:ffi"
import { LocalPtyPlugin } from "/home/byk/.local/share/opencode-v2-pilot/config/opencode/plugins/pty"
import {
  BOUNDS, DATA, DATA_MAX, EXIT, FrameDecoder, HELLO, HELLO_OK, PRELISTEN_MAX, TransportError,
  WRITE_MAX, encodeFrame, hello, closeFd, utf8Chunks, HELPER, SOCKET, type Session,
} from "/home/byk/.local/share/opencode-v2-pilot/config/opencode/plugins/pty-transport"

const PILOT = "/home/byk/.local/share/opencode-v2-pilot" // the deployed pilot tree (deploy.sh)
const PLUGIN_DIR = path.join(PILOT, "config/opencode/plugins")
const PYTHON = "/usr/bin/python3"
const FAULTS_FILE = "/etc/opencode-reference/plugin-faults"
const COUNTER = "/run/opencode-reference/fault-count.sock" // root's run counter: RUN <n> for this run's unit
const STOP_BOUND_MS = 6000
const SATURATE_MS = 10000 // the pre-listener buffer full of a `yes`'s output

function faults(): Set<string> {
  try {
    return new Set(fs.readFileSync(FAULTS_FILE, "utf8").split("\n").map((l) => l.split("#")[0].trim()).filter(Boolean))
  } catch { return new Set() }
}

function refuse(msg: string): never {
  console.log(`REFUSED: ${msg}`)
  process.exit(3)
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name)
  return i > 0 ? process.argv[i + 1] : undefined
}

const FAULTS = faults()
const inside = (d: string, root: string) => d === root || d.startsWith(root + "/")

// ------------------------------------------------------------ refusals first
if ((process.getuid!() === 0 || process.geteuid!() === 0) && !FAULTS.has("allow-root"))
  refuse("running as root; run it as the service user")
const pluginReal = fs.realpathSync(PLUGIN_DIR)
if (FAULTS.has("start-in-plugins")) process.chdir(pluginReal)
else if (inside(fs.realpathSync(process.cwd()), pluginReal))
  refuse(`the working directory is inside the plugin directory ${pluginReal}`)

const cwd = fs.realpathSync(process.cwd())
const results: { name: string; ok: boolean; detail: string; ms: number }[] = []
const number = fs.readdirSync(cwd).filter((n) => /^smoke-result-\d{3}\.json$/.test(n)).length + 1
const resultName = `smoke-result-${String(number).padStart(3, "0")}.json`
// which run of the suite's sequence this is, asked of root's counter only while a
// run-numbered switch is set; a counter that does not answer fails the run (exit 4):
// a switch that could not be applied must not read as a pass. Asking again is safe
// (the counter gives a run's unit one number however often it asks), so a
// connection that fails is tried again, three times in all.
function askCounter(): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let got = ""
    const c = net.createConnection({ path: COUNTER })
    const timer = setTimeout(() => { c.destroy(); reject(new Error("no answer within 5000 ms")) }, 5000)
    c.on("data", (b) => { got += b.toString("utf8"); if (got.includes("\n")) c.end() })
    c.on("end", () => { clearTimeout(timer); resolve(got) })
    c.on("error", (e) => { clearTimeout(timer); reject(e) })
  })
}
async function faultRun(): Promise<number> {
  if (![...FAULTS].some((f) => /^(fail|hang)-run:/.test(f))) return number
  let answer = ""
  for (let attempt = 1; attempt <= 3; attempt++) {
    try { answer = await askCounter(); break } catch (e: any) { answer = `unreachable: ${e?.message ?? e}` }
    await Bun.sleep(100)
  }
  const m = /^RUN ([0-9]+)\n$/.exec(answer)
  if (!m) {
    console.log(`FAIL the fault run counter ${COUNTER}: ${JSON.stringify(answer.slice(0, 200))}`)
    process.exit(4)
  }
  return Number(m[1])
}
const run = await faultRun()

async function check(name: string, fn: () => Promise<string> | string) {
  const t = performance.now()
  try {
    const detail = await fn()
    results.push({ name, ok: true, detail, ms: Math.round(performance.now() - t) })
  } catch (e: any) {
    results.push({ name, ok: false, detail: String(e?.message ?? e), ms: Math.round(performance.now() - t) })
  }
}

function assert(cond: unknown, msg: string): asserts cond {
  if (!cond) throw new Error(msg)
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>
  return Promise.race([p, new Promise<T>((_, rej) => { timer = setTimeout(() => rej(new Error(`${what}: not within ${ms} ms`)), ms) })])
    .finally(() => clearTimeout(timer))
}

function collect(s: Session): { bytes: () => Uint8Array } {
  const parts: Uint8Array[] = []
  s.onData((b) => parts.push(b))
  return { bytes: () => Buffer.concat(parts) }
}

const libc = dlopen("libc.so.6", {
  socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  bind: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  listen: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
})
function muteListener(p: string): number {
  const fd = libc.symbols.socket(1, 1 | 0x80000, 0)
  const sa = new Uint8Array(110)
  new DataView(sa.buffer).setUint16(0, 1, true)
  sa.set(new TextEncoder().encode(p), 2)
  if (fd < 0 || libc.symbols.bind(fd, ptr(sa), 110) !== 0 || libc.symbols.listen(fd, 1) !== 0)
    throw new Error(`cannot listen on ${p}`)
  return fd
}

const sha256 = (p: string) => crypto.createHash("sha256").update(fs.readFileSync(p)).digest("hex")
// The descriptors a session could leak: sockets (the supervisor connection)
// and anything under the cwd (session directories); bun's own come and go.
const sessionFds = () => fs.readdirSync("/proc/self/fd").flatMap((n) => {
  try {
    const t = fs.readlinkSync(`/proc/self/fd/${n}`)
    return t.startsWith("socket:") || t === cwd || t.startsWith(cwd + "/") ? [`${n} -> ${t}`] : []
  } catch { return [] }
})

// ------------------------------------------------------------------ the run
const helper = arg("--helper") ?? HELPER
const sameAs = arg("--same-as")
let socketPath = SOCKET
let supervisor: ReturnType<typeof Bun.spawn> | null = null
let supDir = ""
let supOut: ReadableStreamDefaultReader<Uint8Array> | null = null

await check("permissions", () => {
  const st = fs.statSync(cwd)
  assert(st.uid === process.getuid!(), `the working directory belongs to uid ${st.uid}, not ${process.getuid!()}`)
  assert((st.mode & 0o777) === 0o700, `the working directory is mode ${(st.mode & 0o777).toString(8)}, not 700`)
  const h = fs.statSync(helper)
  assert(h.isFile() && (h.mode & 0o022) === 0, `the helper ${helper} is not a file writable only by its owner`)
  assert(h.uid === 0, `the helper ${helper} belongs to uid ${h.uid}, not root`)
  return `cwd 0700 uid ${st.uid}; helper root-owned mode ${(h.mode & 0o777).toString(8)}`
})

if (sameAs !== undefined)
  await check("source identity", () => {
    const a = sha256(helper), b = sha256(sameAs)
    assert(a === b, `helper ${helper} sha256 ${a} differs from ${sameAs} sha256 ${b}`)
    return `${a} = ${sameAs}`
  })

const fdsBefore = sessionFds().length
if (process.argv.includes("--isolated-supervisor")) {
  supDir = fs.mkdtempSync(path.join(cwd, "supervisor-"))
  fs.chmodSync(supDir, 0o700)
  socketPath = path.join(supDir, "s.sock")
  await check("disposable supervisor", async () => {
    supervisor = Bun.spawn({ cmd: [PYTHON, "-I", "-c", smokeSupervisor(), socketPath], stdio: ["pipe", "pipe", "inherit"],
      env: { PATH: "/usr/bin:/bin", LANG: "C.UTF-8" } })
    supOut = (supervisor.stdout as ReadableStream<Uint8Array>).getReader()
    const first = await within(supOut.read(), 5000, "the disposable supervisor's READY")
    assert(new TextDecoder().decode(first.value ?? new Uint8Array()).startsWith("READY"), "the disposable supervisor did not say READY")
    return `pid ${supervisor.pid} on ${socketPath}`
  })
}

const plugin = await LocalPtyPlugin({}, { helper, socket: socketPath })
const work = fs.mkdtempSync(path.join(cwd, "work-"))

await check("transport framing", () => {
  const dec = new FrameDecoder()
  const frames = [encodeFrame(HELLO), encodeFrame(DATA, new Uint8Array(DATA_MAX).fill(7)), encodeFrame(EXIT, new Uint8Array(8))]
  const all = Buffer.concat(frames)
  const got = []
  for (let off = 0, n = 1; off < all.length; off += n, n = n * 3 % 1021) got.push(...dec.push(all.subarray(off, off + n)))
  assert(got.length === 3 && got[1].payload.length === DATA_MAX && dec.pending === 0, "frames cut at every byte did not come back whole")
  let refused = ""
  try { new FrameDecoder().push(Uint8Array.from([0, 0, 0x80, 1, DATA])) } catch (e) { refused = String(e) }
  assert(refused.includes("outside"), "an oversized DATA header was not refused before its payload")
  try { encodeFrame(DATA, new Uint8Array(DATA_MAX + 1)); throw new Error("an oversized DATA frame was encoded") } catch (e) {
    assert(e instanceof TransportError, String(e))
  }
  const h = hello(socketPath)
  closeFd(h.fd)
  assert(/^[0-9a-f]{32}$/.test(h.invocationId), `HELLO_OK carried ${h.invocationId}`)
  return `3 frames cut at uneven offsets, oversize refused both ways, HELLO_OK ${BOUNDS[HELLO_OK][0]} bytes`
})

await check("helper transfer", async () => {
  const s = plugin.open(work, ["/bin/sh", "-c", "pwd; ls /proc/self/fd | wc -l"])
  const out = collect(s)
  const e = await within(s.exited, 10000, "the session")
  const text = new TextDecoder().decode(out.bytes())
  assert(e.exitCode === 0, `helper exited ${e.exitCode}/${e.signal}: ${text.slice(-200)}`)
  assert(text.split("\n")[0] === work, `the session ran in ${JSON.stringify(text.split("\n")[0])}, not ${work}`)
  return `session cwd = ${work} by descriptor, helper pid ${s.pid}, ${Math.round(e.ms)} ms`
})

await check("UTF-8 write bounds", async () => {
  const s = plugin.open(work, ["/bin/cat"])
  const out = collect(s)
  const text = "é€😀".repeat(7281) // 65,529 bytes of 2-, 3- and 4-byte characters
  const sizes = s.write(text)
  s.end()
  assert(sizes.every((n) => n <= DATA_MAX), `a chunk of ${Math.max(...sizes)} bytes`)
  for (const c of utf8Chunks(text)) new TextDecoder("utf-8", { fatal: true }).decode(c)
  let over = ""
  try { utf8Chunks("x".repeat(WRITE_MAX + 1)).length && s.write("x".repeat(WRITE_MAX + 1)) } catch (e) { over = String(e) }
  assert(over.includes("bound") || over.includes("after end"), "a write over the bound was accepted")
  const e = await within(s.exited, 10000, "cat")
  const back = new TextDecoder("utf-8", { fatal: true }).decode(out.bytes())
  assert(e.exitCode === 0 && back === text, `echoed ${out.bytes().length} bytes (exit ${e.exitCode}), wrote ${new TextEncoder().encode(text).length}`)
  return `chunks ${sizes.join("+")} bytes, each whole UTF-8, echoed intact; ${WRITE_MAX + 1} bytes refused`
})

await check("pre-listener output bounds", async () => {
  const total = 4 * PRELISTEN_MAX
  const s = plugin.open(work, ["/usr/bin/head", "-c", String(total), "/dev/zero"])
  const e = await within(s.exited, 10000, "head")
  await Bun.sleep(0) // let the last chunks reach the buffer
  assert(e.exitCode === 0, `head exited ${e.exitCode}`)
  assert(s.buffered === PRELISTEN_MAX, `kept ${s.buffered} bytes before a listener, bound ${PRELISTEN_MAX}`)
  assert(s.buffered + s.dropped === total, `kept ${s.buffered} + dropped ${s.dropped} != ${total}`)
  const out = collect(s)
  assert(out.bytes().length === PRELISTEN_MAX, "the kept output was not replayed to the listener")
  return `${total} bytes before a listener: ${s.buffered} kept, ${s.dropped} dropped and counted`
})

await check("saturated STOP bounds", async () => {
  const s = plugin.open(work, ["/usr/bin/yes", "saturated"])
  // until the output saturates the pre-listener buffer (polled: under load, 300 ms once did not
  // see a byte dropped)
  const until = performance.now() + SATURATE_MS
  while (s.dropped === 0 && performance.now() < until) await Bun.sleep(20)
  assert(s.dropped > 0, `the output did not saturate the buffer within ${SATURATE_MS} ms (${s.buffered} bytes kept)`)
  const r = await within(s.stop(), STOP_BOUND_MS, "STOP while saturated")
  assert(r.ms < STOP_BOUND_MS, `stop took ${Math.round(r.ms)} ms`)
  assert(r.exitCode === 143 || r.escalated, `helper ended ${r.exitCode}/${r.signal}, not EXIT signal 15`)
  return `stopped in ${Math.round(r.ms)} ms (exit ${r.exitCode}${r.escalated ? ", escalated to SIGKILL" : ""}) after ${s.dropped} bytes dropped`
})

await check("timeouts", async () => {
  const s = plugin.open(work, ["/bin/sleep", "30"], 1)
  const e = await within(s.exited, 6000, "a session past its 1 s runtime")
  assert(e.exitCode === 143, `the runtime-limited session ended ${e.exitCode}/${e.signal}`)
  // a listener that never answers HELLO
  const mute = path.join(supDir || work, "mute.sock")
  const srv = muteListener(mute) // listens, never accepts: the connection waits in the backlog
  const t = performance.now()
  let err = ""
  try { closeFd(hello(mute, 1000).fd) } catch (x) { err = String(x) }
  closeFd(srv)
  fs.rmSync(mute, { force: true })
  const waited = performance.now() - t
  assert(err.includes("timeout") && waited < 3000, `HELLO to a mute listener: ${err || "answered"} after ${Math.round(waited)} ms`)
  return `runtime 1 s -> ended in ${Math.round(e.ms)} ms (143); mute HELLO refused after ${Math.round(waited)} ms`
})

if ([...FAULTS].includes(`hang-run:${run}`)) await new Promise(() => setInterval(() => {}, 1 << 30))
await check("fault", () => {
  assert(![...FAULTS].includes(`fail-run:${run}`), `fault switch fail-run:${run}`)
  return "no fault switch for this run"
})

await check("cleanup", async () => {
  await within(plugin.dispose(), STOP_BOUND_MS, "plugin unload")
  assert(plugin.live === 0, `${plugin.live} sessions left after unload`)
  if (supervisor) {
    const sup: ReturnType<typeof Bun.spawn> = supervisor
    sup.kill("SIGTERM")
    let text = ""
    for (;;) {
      const r = await within(supOut!.read(), 5000, "the disposable supervisor's end")
      if (r.done) break
      text += new TextDecoder().decode(r.value)
    }
    await within(sup.exited, 5000, "the disposable supervisor")
    ;(sup.stdin as import("bun").FileSink).end() // its stdin (a socketpair under bun) is ours to close
    assert(text.trim().endsWith("live=0"), `the disposable supervisor ended with ${JSON.stringify(text.trim().slice(-40))}`)
    fs.rmSync(supDir, { recursive: true })
  }
  fs.rmSync(work, { recursive: true })
  // bun closes a finished child's stdio asynchronously: poll, with a deadline
  let left = sessionFds()
  for (const until = performance.now() + 3000; left.length > fdsBefore && performance.now() < until; left = sessionFds())
    await Bun.sleep(50)
  const after = left.length
  assert(after <= fdsBefore, `${after} socket or working-directory descriptors open (${left.join(", ")}), ${fdsBefore} before the sessions`)
  const stray = fs.readdirSync(cwd).filter((n) => !/^smoke-result-\d{3}\.json$/.test(n) && n !== ".bun") // bun's cache when HOME is the cwd
  assert(stray.length === 0, `left in the working directory: ${stray.join(", ")}`)
  return `no session, no supervisor, ${after} socket or working-directory descriptors (${fdsBefore} before), nothing left but results`
})

const ok = results.every((r) => r.ok)
const result = {
  harness: "pty-plugin-smoke.ts (reference)", run: number, bun: Bun.version, helper,
  helper_sha256: sha256(helper), same_as: sameAs ?? null, supervisor: socketPath === SOCKET ? SOCKET : "isolated",
  ok, checks: results,
}
const fd = fs.openSync(path.join(cwd, resultName), fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600)
fs.writeSync(fd, JSON.stringify(result, null, 1) + "\n")
fs.closeSync(fd)
for (const r of results) console.log(`${r.ok ? "ok  " : "FAIL"} ${r.name} (${r.ms} ms): ${r.detail}`)
const failed = results.filter((r) => !r.ok).map((r) => r.name)
console.log(ok ? `PASS ${results.length}/${results.length} checks (${resultName})`
  : `FAIL ${failed.length}/${results.length} checks: ${failed.join(", ")} (${resultName})`)
if (FAULTS.has("leave-process"))
  Bun.spawn(["/usr/bin/setsid", "/bin/sleep", "600"], { stdin: "ignore", stdout: "inherit", stderr: "inherit" }).unref()
process.exit(ok ? 0 : 1)

// ------------------------------------------------ the disposable supervisor
// (--isolated-supervisor): run as `python3 -I -c <this program> <socket>`
// (a function declaration: hoisted, so the run above can call it)
function smokeSupervisor(): string {
  return String.raw`"""The plugin smoke harness's isolated disposable supervisor (reference
deployment, fixture code): the supervisor side of the wire format
(TARGET-CONTRACT section 4) on a socket of its own, for an unprivileged run.

    python3 -I -c <this program> SOCKET   (the harness's own bytes: it runs no file of the pilot tree)

It authenticates nobody (it serves only its own 0700 directory), takes the
working directory from START's one SCM_RIGHTS descriptor (exactly one, a
directory, no MSG_CTRUNC, else ERROR PROTOCOL), runs the command in its own
process group on pipes (no systemd, no PTY), relays DATA in frames of at most
32,768 bytes, ends a session on STOP, disconnect or its runtime (SIGTERM to
the group, SIGKILL 2 s later) and reports EXIT. Prints READY once listening;
on SIGTERM or end of stdin it stops every session and prints
"live=<sessions still running>" last.
"""
import os, signal, socket, stat, struct, subprocess, sys, threading

HELLO, START, DATA, EOF, RESIZE, STOP = 1, 2, 3, 4, 5, 6
HELLO_OK, STARTED, DATA_OUT, EXIT, ERROR = 0x81, 0x82, 0x83, 0x84, 0x85
PROTOCOL, LIMIT = 2, 3
BOUNDS = {HELLO: (0, 0), START: (10, 70158), DATA: (0, 32768), EOF: (0, 0), RESIZE: (4, 4), STOP: (0, 0)}
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "TERM": "xterm-256color", "LANG": "C.UTF-8"}
KILL_AFTER_S = 2.0
sessions, lock = set(), threading.Lock()


class Bad(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def frame(t, p=b""):
    return struct.pack(">IB", len(p), t) + p


def recv_exact(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b


def header(c, fds=None):
    if fds is None:
        h = recv_exact(c, 5)
    else:  # START: the descriptor rides on its first byte
        h, anc, flags, _ = c.recvmsg(5, socket.CMSG_SPACE(4 * 4), socket.MSG_CMSG_CLOEXEC)
        if not h:
            raise EOFError
        for lvl, typ, data in anc:
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) // 4 * 4]))
        if flags & socket.MSG_CTRUNC:
            raise Bad(PROTOCOL, "MSG_CTRUNC")
        h += recv_exact(c, 5 - len(h))
    n, t = struct.unpack(">IB", h)
    if t not in BOUNDS:
        raise Bad(PROTOCOL, f"unknown or wrong-direction type 0x{t:x}")
    lo, hi = BOUNDS[t]
    if not lo <= n <= hi:
        raise Bad(PROTOCOL, f"type 0x{t:x} length {n} outside [{lo}, {hi}]")
    return t, recv_exact(c, n) if n else b""


def parse_start(p):
    runtime, rows, cols, argc = struct.unpack(">IHHH", p[:10])
    off, argv, agg = 10, [], 0
    for _ in range(argc):
        if off + 4 > len(p):
            raise Bad(PROTOCOL, "argc disagrees with the payload")
        (n,) = struct.unpack(">I", p[off:off + 4])
        s = p[off + 4:off + 4 + n]
        if len(s) != n:
            raise Bad(PROTOCOL, "length disagrees with the payload")
        if b"\0" in s:
            raise Bad(PROTOCOL, "NUL")
        try:
            argv.append(s.decode("utf-8"))
        except UnicodeDecodeError:
            raise Bad(PROTOCOL, "invalid UTF-8") from None
        agg += n if argv[1:] else 0
        off += 4 + n
    if off != len(p):
        raise Bad(PROTOCOL, "trailing bytes")
    if not argv or len(argv[0].encode()) > 4096 or len(argv) > 129 or agg > 65536 \
            or any(len(a.encode()) > 16384 for a in argv[1:]) or not 0 < runtime <= 3600:
        raise Bad(LIMIT, "over a limit")
    return runtime, argv


class Session:
    def __init__(self, conn, argv, dirfd, runtime):
        self.conn, self.wlock, self.stopped = conn, threading.Lock(), threading.Event()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, cwd=f"/proc/self/fd/{dirfd}",
                                     env=ENV, start_new_session=True, close_fds=True)
        self.timer = threading.Timer(runtime, self.stop)
        self.timer.daemon = True
        self.timer.start()

    def send(self, t, p=b""):
        with self.wlock:
            self.conn.sendall(frame(t, p))

    def stop(self):
        if self.stopped.is_set():
            return
        self.stopped.set()
        for sig, wait in ((signal.SIGTERM, KILL_AFTER_S), (signal.SIGKILL, None)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                pass

    def pump_out(self):
        try:
            while chunk := self.proc.stdout.read1(32768):
                self.send(DATA_OUT, chunk)
        except OSError:
            pass
        rc = self.proc.wait()
        self.timer.cancel()
        try:
            self.send(EXIT, struct.pack(">ii", rc if rc >= 0 else 0, -rc if rc < 0 else 0))
        except OSError:
            pass


def serve(c):
    s = None
    try:
        t, _ = header(c)
        if t != HELLO:
            raise Bad(PROTOCOL, "expected HELLO")
        c.sendall(frame(HELLO_OK, os.urandom(16)))
        fds = []
        try:
            t, p = header(c, fds)
            if t != START:
                raise Bad(PROTOCOL, "expected START")
            if len(fds) != 1 or not stat.S_ISDIR(os.fstat(fds[0]).st_mode):
                raise Bad(PROTOCOL, f"START must carry exactly one directory, carried {len(fds)} descriptors")
            runtime, argv = parse_start(p)
            try:
                s = Session(c, argv, fds[0], runtime)
            except OSError as e:
                c.sendall(frame(ERROR, struct.pack(">H", 5) + str(e).encode()[:200]))
                return
        finally:
            for fd in fds:
                os.close(fd)
        with lock:
            sessions.add(s)
        s.send(STARTED, b"opencode-pty-" + os.urandom(16).hex().encode() + b".service")
        out = threading.Thread(target=s.pump_out, daemon=True)
        out.start()
        while True:
            t, p = header(c)
            if t == DATA:
                if s.proc.stdin.closed:
                    raise Bad(PROTOCOL, "DATA after EOF")
                try:
                    s.proc.stdin.write(p)
                    s.proc.stdin.flush()
                except BrokenPipeError:
                    pass
            elif t == EOF:
                s.proc.stdin.close()
            elif t == STOP:
                s.stop()
            elif t != RESIZE:
                raise Bad(PROTOCOL, f"unexpected type 0x{t:x}")
    except Bad as e:
        try:
            c.sendall(frame(ERROR, struct.pack(">H", e.code) + str(e).encode()))
        except OSError:
            pass
    except (EOFError, OSError):
        pass
    finally:
        if s:
            s.stop()  # disconnect, protocol error: the session ends
            s.proc.wait()
            with lock:
                sessions.discard(s)
        c.close()


def shutdown(*_):
    with lock:
        live = list(sessions)
    for s in live:
        s.stop()
    alive = sum(1 for s in live if s.proc.poll() is None)
    print(f"live={alive}", flush=True)
    os._exit(0)


def main():
    path = sys.argv[1]
    os.umask(0o077)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    signal.signal(signal.SIGTERM, shutdown)
    threading.Thread(target=lambda: (sys.stdin.read(), shutdown()), daemon=True).start()
    print("READY", flush=True)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
`
}
