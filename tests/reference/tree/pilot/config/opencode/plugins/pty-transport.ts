// local-pty transport, reference deployment (fixture code; it never ships).
//
// Opens PTY sessions the pilot's way (TARGET-CONTRACT sections 3-4): connect
// to the supervisor socket, HELLO -> HELLO_OK (16-byte InvocationID) on this
// process's own connection, then hand the authenticated connection (fd 3) and
// an O_DIRECTORY descriptor of the working directory (fd 4) to the fixed
// helper, which sends START and relays the session. This side never parses
// session frames: it talks to the helper through its stdin/stdout.
//
// Bounds: one write() at most WRITE_MAX bytes of UTF-8, sent in chunks of at
// most DATA_MAX bytes cut on character boundaries; output that arrives before
// a listener is attached is kept up to PRELISTEN_MAX bytes (the rest is
// counted in `dropped`); stop() is SIGTERM (the helper sends STOP), SIGKILL
// after STOP_GRACE_MS; HELLO must be answered within helloTimeoutMs.
import { dlopen, FFIType, ptr } from "bun:ffi"
import fs from "node:fs"

export const HELPER = "/usr/local/libexec/opencode-pty-client"
export const SOCKET = "/run/opencode-pty/supervisor.sock"
export const HELLO = 0x01, START = 0x02, DATA = 0x03, EOF = 0x04, RESIZE = 0x05, STOP = 0x06
export const HELLO_OK = 0x81, STARTED = 0x82, DATA_OUT = 0x83, EXIT = 0x84, ERROR = 0x85
export const DATA_MAX = 32768
export const WRITE_MAX = 65536
export const PRELISTEN_MAX = 65536
export const STOP_GRACE_MS = 3000
export const HELLO_TIMEOUT_MS = 5000
// The largest payload of each frame type (TARGET-CONTRACT section 4).
export const BOUNDS: Record<number, [number, number]> = {
  [HELLO]: [0, 0], [START]: [10, 70158], [DATA]: [0, DATA_MAX], [EOF]: [0, 0], [RESIZE]: [4, 4],
  [STOP]: [0, 0], [HELLO_OK]: [16, 16], [STARTED]: [1, 256], [DATA_OUT]: [0, DATA_MAX],
  [EXIT]: [8, 8], [ERROR]: [2, 4096],
}

export class TransportError extends Error {}

// ------------------------------------------------------------------ framing
export function encodeFrame(type: number, payload: Uint8Array = new Uint8Array(0)): Uint8Array {
  const b = BOUNDS[type]
  if (!b) throw new TransportError(`unknown frame type 0x${type.toString(16)}`)
  if (payload.length < b[0] || payload.length > b[1])
    throw new TransportError(`frame 0x${type.toString(16)}: ${payload.length} bytes outside [${b[0]}, ${b[1]}]`)
  const out = new Uint8Array(5 + payload.length)
  new DataView(out.buffer).setUint32(0, payload.length)
  out[4] = type
  out.set(payload, 5)
  return out
}

export type Frame = { type: number; payload: Uint8Array }

// Frames from a byte stream cut anywhere; an unknown type or a length over its
// type's bound is an error before any payload byte is buffered.
export class FrameDecoder {
  private buf = new Uint8Array(0)
  push(chunk: Uint8Array): Frame[] {
    const joined = new Uint8Array(this.buf.length + chunk.length)
    joined.set(this.buf)
    joined.set(chunk, this.buf.length)
    const frames: Frame[] = []
    let off = 0
    while (joined.length - off >= 5) {
      const len = new DataView(joined.buffer, joined.byteOffset + off).getUint32(0)
      const type = joined[off + 4]
      const b = BOUNDS[type]
      if (!b) throw new TransportError(`unknown frame type 0x${type.toString(16)}`)
      if (len < b[0] || len > b[1]) throw new TransportError(`frame 0x${type.toString(16)} length ${len} outside [${b[0]}, ${b[1]}]`)
      if (joined.length - off - 5 < len) break
      frames.push({ type, payload: joined.slice(off + 5, off + 5 + len) })
      off += 5 + len
    }
    this.buf = joined.slice(off)
    return frames
  }
  get pending(): number { return this.buf.length }
}

// UTF-8 of `text` in chunks of at most `max` bytes, never cutting a character.
export function utf8Chunks(text: string, max = DATA_MAX): Uint8Array[] {
  const bytes = new TextEncoder().encode(text)
  const out: Uint8Array[] = []
  let off = 0
  while (off < bytes.length) {
    let end = Math.min(off + max, bytes.length)
    while (end < bytes.length && (bytes[end] & 0xc0) === 0x80) end-- // a continuation byte: back up
    out.push(bytes.subarray(off, end))
    off = end
  }
  return out
}

// ---------------------------------------------------- the supervisor socket
const libc = dlopen("libc.so.6", {
  socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  connect: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  setsockopt: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
})
const AF_UNIX = 1, SOCK_STREAM = 1, SOCK_CLOEXEC = 0x80000, SOL_SOCKET = 1, SO_RCVTIMEO = 20, SO_SNDTIMEO = 21

export function closeFd(fd: number): void { libc.symbols.close(fd) }

function readExact(fd: number, n: number, what: string): Uint8Array {
  const out = new Uint8Array(n)
  let off = 0
  while (off < n) {
    let got: number
    try {
      got = fs.readSync(fd, out, off, n - off, null)
    } catch (e: any) {
      if (e?.code === "EAGAIN" || e?.code === "EWOULDBLOCK") throw new TransportError(`no ${what} within the HELLO timeout`)
      throw new TransportError(`${what}: ${e?.code ?? e}`)
    }
    if (got === 0) throw new TransportError(`connection closed before ${what}`)
    off += got
  }
  return out
}

export type Hello = { fd: number; invocationId: string }

// A connected, authenticated supervisor socket (close-on-exec: only the helper
// gets it, as fd 3). Throws TransportError on ERROR, timeout or anything else.
export function hello(socketPath: string, timeoutMs = HELLO_TIMEOUT_MS): Hello {
  const path = new TextEncoder().encode(socketPath)
  if (path.length > 107) throw new TransportError(`socket path longer than 107 bytes`)
  const fd = libc.symbols.socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)
  if (fd < 0) throw new TransportError("socket() failed")
  try {
    const tv = new BigInt64Array([BigInt(Math.floor(timeoutMs / 1000)), BigInt((timeoutMs % 1000) * 1000)])
    libc.symbols.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, ptr(tv), 16)
    libc.symbols.setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, ptr(tv), 16)
    const sa = new Uint8Array(110)
    new DataView(sa.buffer).setUint16(0, AF_UNIX, true)
    sa.set(path, 2)
    if (libc.symbols.connect(fd, ptr(sa), 2 + path.length + 1) !== 0)
      throw new TransportError(`cannot connect to ${socketPath}`)
    fs.writeSync(fd, encodeFrame(HELLO))
    const hdr = readExact(fd, 5, "HELLO_OK")
    const len = new DataView(hdr.buffer).getUint32(0)
    const type = hdr[4]
    if (type === ERROR && len >= 2 && len <= 4096) {
      const p = readExact(fd, len, "ERROR")
      const code = new DataView(p.buffer).getUint16(0)
      throw new TransportError(`supervisor refused HELLO: error ${code} ${new TextDecoder().decode(p.subarray(2))}`)
    }
    if (type !== HELLO_OK || len !== 16) throw new TransportError(`answered type 0x${type.toString(16)} length ${len}, not HELLO_OK`)
    const id = readExact(fd, 16, "HELLO_OK")
    return { fd, invocationId: Buffer.from(id).toString("hex") }
  } catch (e) {
    libc.symbols.close(fd)
    throw e
  }
}

// ----------------------------------------------------------------- sessions
export type SessionOptions = {
  helper?: string
  socket?: string
  cwd: string
  argv: string[]
  runtimeSeconds?: number
  helloTimeoutMs?: number
  stopGraceMs?: number
}

export type Ended = { exitCode: number | null; signal: string | null; ms: number }

export class Session {
  readonly pid: number
  readonly invocationId: string
  dropped = 0
  private early: Uint8Array[] = []
  private earlyBytes = 0
  private listener: ((b: Uint8Array) => void) | null = null
  private proc: ReturnType<typeof Bun.spawn>
  private t0 = performance.now()
  readonly exited: Promise<Ended>
  private stopGraceMs: number
  private stdinClosed = false

  constructor(opts: SessionOptions) {
    const { fd, invocationId } = hello(opts.socket ?? SOCKET, opts.helloTimeoutMs)
    let dir = -1
    try {
      dir = fs.openSync(opts.cwd, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW)
      const args = ["--runtime", String(opts.runtimeSeconds ?? 3600), "--", ...opts.argv]
      this.proc = Bun.spawn({
        cmd: [opts.helper ?? HELPER, ...args],
        stdio: ["pipe", "pipe", "pipe", fd, dir],
        env: { PATH: "/usr/bin:/bin", LANG: "C.UTF-8" },
      })
    } finally {
      libc.symbols.close(fd) // the helper owns the connection now
      if (dir >= 0) fs.closeSync(dir)
    }
    this.pid = this.proc.pid
    this.invocationId = invocationId
    this.stopGraceMs = opts.stopGraceMs ?? STOP_GRACE_MS
    this.pump(this.proc.stdout as ReadableStream<Uint8Array>)
    this.pump(this.proc.stderr as ReadableStream<Uint8Array>)
    this.exited = this.proc.exited.then(() => (this.end(), {
      exitCode: this.proc.exitCode, signal: this.proc.signalCode ?? null, ms: performance.now() - this.t0,
    }))
  }

  private async pump(s: ReadableStream<Uint8Array>) {
    for await (const chunk of s) this.deliver(chunk)
  }

  private deliver(chunk: Uint8Array) {
    if (this.listener) return this.listener(chunk)
    const room = PRELISTEN_MAX - this.earlyBytes
    if (room <= 0) { this.dropped += chunk.length; return }
    const kept = chunk.length <= room ? chunk : chunk.slice(0, room)
    this.dropped += chunk.length - kept.length
    this.early.push(kept)
    this.earlyBytes += kept.length
  }

  // Output from now on goes to `fn`; what arrived before is replayed first.
  onData(fn: (b: Uint8Array) => void) {
    for (const b of this.early) fn(b)
    this.early = []
    this.listener = fn
  }

  get buffered(): number { return this.earlyBytes }

  // At most WRITE_MAX bytes of UTF-8 per call, in chunks cut on character
  // boundaries. Returns the chunk sizes written.
  write(text: string): number[] {
    if (this.stdinClosed) throw new TransportError("write after end()")
    const chunks = utf8Chunks(text)
    const total = chunks.reduce((n, c) => n + c.length, 0)
    if (total > WRITE_MAX) throw new TransportError(`write of ${total} bytes over the ${WRITE_MAX}-byte bound`)
    const sink = this.proc.stdin as import("bun").FileSink
    for (const c of chunks) sink.write(c)
    sink.flush()
    return chunks.map((c) => c.length)
  }

  end() {
    if (this.stdinClosed) return
    this.stdinClosed = true
    ;(this.proc.stdin as import("bun").FileSink).end()
  }

  // SIGTERM (the helper sends STOP), SIGKILL after the grace: bounded.
  async stop(): Promise<Ended & { escalated: boolean }> {
    const t = performance.now()
    this.proc.kill("SIGTERM")
    let timer: ReturnType<typeof setTimeout> | undefined
    const graceOver = new Promise<"late">((r) => { timer = setTimeout(() => r("late"), this.stopGraceMs) })
    const first = await Promise.race([this.exited, graceOver])
    clearTimeout(timer)
    let escalated = false
    if (first === "late") { escalated = true; this.proc.kill("SIGKILL") }
    const e = await this.exited
    return { ...e, ms: performance.now() - t, escalated }
  }
}

export function openSession(opts: SessionOptions): Session {
  return new Session(opts)
}
