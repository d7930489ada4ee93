// local-pty plugin, reference deployment (fixture code; it never ships).
// PTY sessions go through the supervisor and the fixed helper
// (./pty-transport.ts), never in this process.
import { openSession, HELPER, SOCKET, type Session } from "./pty-transport"

export type LocalPtyOptions = { helper?: string; socket?: string; helloTimeoutMs?: number }

export const LocalPtyPlugin = async (_ctx: unknown = {}, options: LocalPtyOptions = {}) => {
  const live = new Set<Session>()
  return {
    name: "local-pty",
    open(cwd: string, argv: string[], runtimeSeconds = 3600): Session {
      const s = openSession({ helper: options.helper ?? HELPER, socket: options.socket ?? SOCKET,
        helloTimeoutMs: options.helloTimeoutMs, cwd, argv, runtimeSeconds })
      live.add(s)
      s.exited.then(() => live.delete(s))
      return s
    },
    get live(): number { return live.size },
    // plugin unload: every session stopped (bounded), none left behind
    async dispose(): Promise<void> {
      await Promise.all([...live].map((s) => s.stop()))
    },
  }
}

export default LocalPtyPlugin
