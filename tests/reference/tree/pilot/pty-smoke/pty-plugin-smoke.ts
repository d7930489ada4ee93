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
//                (smoke-supervisor.py, on a socket in a fresh 0700 directory
//                of the cwd); without it the plugin's default socket is used
//
// It names the deployed pilot tree by absolute path (the plugin it imports,
// the plugin directory, smoke-supervisor.py), never relative to itself: the
// suite runs a root-owned copy of these bytes from a directory of its own
// (PLUGIN-1), so nothing beside the copy is there.
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
//                     (runs are counted, only while one of these two is set, in
//                     FAULT_COUNT in the service user's home: each run has a
//                     fresh working directory, so its result is always number 1)
//   start-in-plugins  the refusal is skipped and the run happens (and writes
//                     its result) inside the plugin directory
//   allow-root        the root refusal is skipped
//   leave-process     a process (setsid sleep 600) outlives the run, holding its
//                     output open (stdout inherited), whatever the run's result
import fs from "node:fs"
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
const SUPERVISOR = path.join(PILOT, "pty-smoke/smoke-supervisor.py")
const PYTHON = "/usr/bin/python3"
const FAULTS_FILE = "/etc/opencode-reference/plugin-faults"
const FAULT_COUNT = "/home/byk/.pty-smoke-fault-runs"
const STOP_BOUND_MS = 6000

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
function faultRun(): number {
  if (![...FAULTS].some((f) => /^(fail|hang)-run:/.test(f))) return number
  let n = 0
  try { n = parseInt(fs.readFileSync(FAULT_COUNT, "utf8"), 10) || 0 } catch {}
  fs.writeFileSync(FAULT_COUNT, String(n + 1))
  return n + 1
}
const run = faultRun()

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
    supervisor = Bun.spawn({ cmd: [PYTHON, "-I", SUPERVISOR, socketPath], stdio: ["pipe", "pipe", "inherit"],
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
  await Bun.sleep(300) // let the output saturate the pre-listener buffer
  assert(s.dropped > 0, "the output did not saturate the buffer")
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
