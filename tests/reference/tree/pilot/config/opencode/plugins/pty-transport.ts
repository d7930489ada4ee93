// Reference-host stand-in for the PTY transport (fixture only).
export const HELPER = "/usr/local/libexec/opencode-pty-client"
export const SOCKET = "/run/opencode-pty/supervisor.sock"

export function openSession(cmd: string, args: string[]): { helper: string; argv: string[] } {
  return { helper: HELPER, argv: ["--", cmd, ...args] }
}
