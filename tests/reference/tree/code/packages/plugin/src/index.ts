// Reference-host stand-in for the opencode plugin package (fixture only).
export type { Plugin } from "./plugin"
export const VERSION = "0.0.0-reference"
