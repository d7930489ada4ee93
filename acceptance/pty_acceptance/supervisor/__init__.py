"""The supervisor under test, driven and watched as its peer would: the wire
format (protocol, the only module that knows it), the suite as the peer
service, PTY sessions, admission and flood attempts, a session seen from
inside and from the host, how a session ends, the fixed helper under strace
and same-UID isolation."""
