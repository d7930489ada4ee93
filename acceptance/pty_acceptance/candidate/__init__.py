"""The opencode-v2 candidate around the supervisor: its server's HTTP API
(the only module that knows it), server.env, the runtime hand-off of
RUNTIME-2 and the review's plugin smoke harness (PLUGIN-1)."""
