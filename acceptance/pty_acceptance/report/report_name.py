"""The name a run publishes its report and bundle under (SUITE-2, issue 38 item 6c).

The gate creates every file it publishes `O_EXCL|O_NOFOLLOW` (reports.py,
bundle.py), so a name already taken cannot be written: an older verdict
would stand under the name a run was asked to write. So, before any test:

- a name the operator asked for (`--junitxml FILE`) is the run's: what an
  earlier run left under that name and its bundle's (`<stem>.xml`, `.html`,
  `.intoto.json`, `.intoto.dsse.json`) is removed (root's regular files
  only, by name in the report directory reached without a link: a hard link
  elsewhere keeps its bytes); anything else there (a directory, a link, a
  FIFO, another's file) is named and refuses the run, nothing deleted. A
  later run that fails never leaves the READY `latest.*` of an earlier one:
  its own NOT READY files take the name, and a run killed before it
  published leaves none;
- a name the suite chooses (`acceptance-<host>-<UTC second>.xml`) is never
  one in use: a second run in the same second takes `...-2.xml`, and so on.

Runs never overlap (the run lock, SUITE-5), so a name free at the start is
free at the end unless something else wrote there; the publication then
fails, as ever, and says so.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

from pty_acceptance.host import hostfs
from pty_acceptance.report import bundle, reports

MAX_SUFFIX = 1000  # "-2" ... "-999" after one UTC second's default name


class NameRefused(reports.ReportError):
    """A name the run was asked to write holds something that is not a file an earlier run wrote."""


def bundle_names(report: str) -> list[str]:
    """The report and every file of its bundle (bundle.names), by file name."""
    return [PurePosixPath(p).name for p in (report, *bundle.names(report))]


def _taken(dfd: int, names: list[str]) -> list[tuple[str, os.stat_result]]:
    out = []
    for name in names:
        try:
            out.append((name, os.stat(name, dir_fd=dfd, follow_symlinks=False)))
        except FileNotFoundError:
            pass
    return out


def claim(report: str) -> str:
    """The name asked for made the run's: an earlier run's files under it
    removed. Returns what happened, in words for the report; NameRefused
    when something else is there."""
    directory = str(PurePosixPath(report).parent)
    dfd = hostfs.open_dir(directory)
    try:
        taken = _taken(dfd, bundle_names(report))
        other = [(n, st) for n, st in taken if not stat.S_ISREG(st.st_mode) or st.st_uid != 0]
        if other:
            name, st = other[0]
            what = hostfs.kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"file of uid {st.st_uid}"
            raise NameRefused(f"{directory}/{name} is a {what}, not a report an earlier run wrote: the run "
                              "would publish nothing under the name it was asked to write (nothing removed)")
        for name, _ in taken:
            os.unlink(name, dir_fd=dfd)
        if taken:
            os.fsync(dfd)
    finally:
        os.close(dfd)
    if not taken:
        return f"{report}: the name asked for (nothing under it or its bundle's names)"
    return (f"{report}: the name asked for; what an earlier run left under it was removed before any test: "
            + ", ".join(n for n, _ in taken))


def unique(directory: str, host: str, stamp: str) -> tuple[str, str]:
    """(the suite's own name for the report in `directory`, in words): the
    first of acceptance-<host>-<stamp>[-<n>].xml of which no bundle name is taken."""
    dfd = hostfs.open_dir(directory)
    try:
        for n in range(1, MAX_SUFFIX):
            path = os.path.join(directory, f"acceptance-{host}-{stamp}{'' if n == 1 else f'-{n}'}.xml")
            if not _taken(dfd, bundle_names(path)):
                return path, f"{path}: the suite's own name" + (f" (the {n - 1} before it were taken)" if n > 1
                                                                 else "")
    finally:
        os.close(dfd)
    raise NameRefused(f"{directory}: acceptance-{host}-{stamp}.xml and {MAX_SUFFIX - 2} more names after it "
                      "are taken")
