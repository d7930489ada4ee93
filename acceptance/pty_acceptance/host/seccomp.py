"""Which system call names this host's libseccomp knows (UNIT-5).

systemd resolves each name of a SystemCallFilter= group with
seccomp_syscall_resolve_name(3) and drops the names its libseccomp does not
know (a group may list calls newer than the library), so the allow list a
unit shows is its groups' names less those. The library is the one systemd
itself links (libseccomp.so.2), loaded by its soname from the system's
library path."""

from __future__ import annotations

import ctypes

SONAME = "libseccomp.so.2"
NR_SCMP_ERROR = -1  # seccomp_syscall_resolve_name: a name this libseccomp does not know


def unknown(names: set[str]) -> set[str]:
    """The names of `names` this host's libseccomp cannot resolve (OSError when
    the library cannot be loaded)."""
    lib = ctypes.CDLL(SONAME)
    resolve = lib.seccomp_syscall_resolve_name
    resolve.argtypes, resolve.restype = [ctypes.c_char_p], ctypes.c_int
    return {n for n in names if resolve(n.encode()) == NR_SCMP_ERROR}
