"""Host programs the suite runs (SUITE-4): by absolute path in a root-owned
system directory, never looked up in an inherited PATH, and, when they run as
root, with an environment built here rather than the operator's."""

from __future__ import annotations

import os
import stat

SYSTEM_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")
# The whole environment of a program the suite runs as root.
ROOT_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
# What a shell or the dynamic loader would act on before a command runs: unset
# while a library runs host programs through `/bin/sh -c` (Testinfra's `host`).
SHELL_STARTUP = ("BASH_ENV", "ENV", "CDPATH", "IFS", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")


def path(name: str) -> str:
    """The absolute path of system program `name`: the first regular file of
    that name in SYSTEM_DIRS (merged-/usr hosts have it in both). When there
    is none, the first candidate, so that running it fails as "not installed"."""
    if "/" in name:
        raise ValueError(f"{name!r}: a program name, not a path")
    for d in SYSTEM_DIRS:
        try:
            if stat.S_ISREG(os.lstat(f"{d}/{name}").st_mode):
                return f"{d}/{name}"
        except OSError:
            continue
    return f"{SYSTEM_DIRS[0]}/{name}"
