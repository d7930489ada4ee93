// Reference-host stand-in for the pilot's local-pty plugin (fixture only).
import { openSession } from "./pty-transport"

export const LocalPtyPlugin = async () => ({
  name: "local-pty",
  tool: { pty: (cmd: string, args: string[]) => openSession(cmd, args) },
})
