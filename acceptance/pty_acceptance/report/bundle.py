"""The verdict bundle, written next to the JUnit report for every run, pass
or fail: `<stem>.html` (htmlreport.py) and `<stem>.intoto.json` (intoto.py),
both rendered from the published report itself (verdict.py), plus the
terminal matrix; with --sign-key also `<stem>.intoto.dsse.json`, the
Statement's exact bytes in a DSSE envelope signed by a host tool
(signing.py). The gate writes them after the marker decision, so that the
Statement says PASSED only when the marker exists; if they cannot be
written, the gate takes the marker back (decision/end_of_run.py)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import PurePosixPath

from pty_acceptance.host import hostfs
from pty_acceptance.report import htmlreport, intoto, reports, verdict
from pty_acceptance.report.verdict import Row
from pty_acceptance.spec.checklist import Section


@dataclass
class Bundle:
    verdict: verdict.Verdict
    rows: list[Row]  # not verdict.Row: the field above shadows the module here
    html: bytes
    statement: bytes
    envelope: bytes | None = None  # the signed Statement (signing.py), when asked for


def names(junit_path: str) -> tuple[str, str, str]:
    """(HTML, Statement, signed envelope) beside the report."""
    stem = junit_path[:-4] if junit_path.endswith(".xml") else junit_path
    return stem + ".html", stem + ".intoto.json", stem + ".intoto.dsse.json"


def files(junit_path: str, b: Bundle) -> list[tuple[str, bytes]]:
    """(path, bytes) of what the bundle writes: the envelope only when signed."""
    out = list(zip(names(junit_path), (b.html, b.statement, b.envelope), strict=False))
    return [(path, data) for path, data in out if data is not None]


def build(data: bytes, junit_name: str, sections: list[Section] | tuple[Section, ...],
          ready: bool | None = None, extra_blockers: list[str] | tuple[str, ...] = (),
          suite: verdict.Suite | None = None) -> Bundle:
    """`data` is the JUnit report's bytes. The gate passes what it knows
    after the report was published: whether the marker was written, and any
    blocker that came after (both also end up in the report when it can still
    be rewritten). A re-render passes `suite`, the suite it runs from: the
    report's cases must be its node-id list, each passed (verdict.against)."""
    v = verdict.from_junit(reports.parse(data, junit_name), suite)
    v.blockers += [b for b in extra_blockers if b not in v.blockers]
    # READY only when the report itself reads READY (every place of it agrees) and the gate says so
    v.ready = v.ready and not v.blockers and ready is not False
    table = verdict.rows(v, sections)
    title = f"Root acceptance of {v.host}: {v.last_line}"
    html = htmlreport.render(v, table, title).encode("utf-8", "backslashreplace")
    st = intoto.statement(v, PurePosixPath(junit_name).name, hashlib.sha256(data).hexdigest())
    return Bundle(v, table, html, intoto.dumps(st))


def write(junit_path: str, b: Bundle) -> list[str]:
    """Create the files beside the report (O_EXCL|O_NOFOLLOW in a directory
    reached without a link). All or nothing: on failure what was created is
    removed and the error raised."""
    made: list[str] = []
    dfd = hostfs.open_dir(str(PurePosixPath(junit_path).parent))
    try:
        for path, data in files(junit_path, b):
            name = PurePosixPath(path).name
            try:
                hostfs.create_at(dfd, name, data, 0o644)
            except OSError:
                for done in made:
                    try:
                        os.unlink(PurePosixPath(done).name, dir_fd=dfd)
                    except OSError:
                        pass
                raise
            made.append(path)
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return made


def from_file(path: str, sections: list[Section], suite: verdict.Suite | None = None) -> tuple[Bundle, bytes]:
    """For `pty-acceptance report`: any JUnit report the suite wrote, its
    cases checked against `suite`'s node-id list when given."""
    with open(path, "rb") as f:
        data = f.read(reports.LIMIT + 1)
    if len(data) > reports.LIMIT:
        raise reports.ReportError(f"{path} is larger than {reports.LIMIT} bytes")
    return build(data, path, sections, suite=suite), data
