"""Where the suite was proven (issue 31): on a reference host of each Debian
release the whole suite passed, READY with the marker, with both supervisor
implementations. docs/reference-host.md, "The releases", lists the same matrix
(tests/test_hostkind.py keeps the two equal). A host like none of them is not a
reason to fail: its checks judge it as on any host; the preflight only says
that this combination was not part of a proof.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Proof:
    os_id: str  # os-release ID
    codename: str  # os-release VERSION_CODENAME
    systemd: int  # major version
    python: str  # major.minor
    kernel: str  # the kernel it ran on (uname -r): its series (major.minor) is what counts
    date: str  # of the proof runs
    commit: str  # the project's commit that ran them

    def says(self) -> str:
        return f"{self.os_id} {self.codename}, systemd {self.systemd}, Python {self.python}"


PROOFS: tuple[Proof, ...] = (
    Proof("debian", "bookworm", 252, "3.11", "6.18.44-fc-v1252", "2026-12-06", "5def172"),
    Proof("debian", "trixie", 257, "3.13", "6.18.44-fc-v1252", "2026-12-06", "5def172"),
)


def series(kernel: str) -> str:
    return ".".join(kernel.split(".")[:2])


def verdict(os_id: str, codename: str, systemd: int | None, python: str, kernel: str) -> str:
    """Whether this combination was proven, in words."""
    same = [p for p in PROOFS if (p.os_id, p.codename, p.systemd, p.python) == (os_id, codename, systemd, python)]
    if not same:
        return ("not proven: the suite was proven on " + "; ".join(p.says() for p in PROOFS)
                + f", not on {os_id or '?'} {codename or '?'}, systemd {systemd or '?'}, Python {python}")
    p = same[-1]
    if series(kernel) != series(p.kernel):
        return (f"proven except the kernel: {p.says()} on kernel {p.kernel} ({p.date}, commit {p.commit}); "
                f"this kernel's series {series(kernel)} was not part of it")
    return f"proven: {p.says()} on kernel {p.kernel} ({p.date}, commit {p.commit})"
