// followup plugin, reference deployment (fixture code; it never ships).
// When a session goes idle with queued follow-ups, the next one is sent.
type Event = { type: string; properties?: { sessionID?: string } }
type Client = { session: { prompt(a: { path: { id: string }; body: { parts: { type: "text"; text: string }[] } }): Promise<unknown> } }

export const FollowupPlugin = async ({ client }: { client: Client }) => {
  const queued = new Map<string, string[]>()
  return {
    name: "followup",
    queue(sessionID: string, text: string) {
      queued.set(sessionID, [...(queued.get(sessionID) ?? []), text])
    },
    event: async ({ event }: { event: Event }) => {
      const id = event.properties?.sessionID
      if (event.type !== "session.idle" || !id) return
      const next = queued.get(id)?.shift()
      if (next !== undefined) await client.session.prompt({ path: { id }, body: { parts: [{ type: "text", text: next }] } })
    },
  }
}

export default FollowupPlugin
