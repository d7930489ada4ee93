"""Programs staged for and run by the service user on the host (the peer
agent, the isolation probe). Standalone: each runs as a plain script beside
at most the files staged with it and imports nothing of this package."""
