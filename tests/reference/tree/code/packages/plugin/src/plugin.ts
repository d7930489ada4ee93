// Reference-host stand-in (fixture only).
export type Plugin = (input: { directory: string }) => Promise<Record<string, unknown>>
