"""The JUnit report on disk (SUITE-2, SUITE-4, MARK-1).

pytest's JUnit writer opens its file by path: it follows links and truncates
whatever is there. So it writes into a private directory (root's, mode 0700,
in the run's scratch area), and the gate publishes that file into the report directory
itself: the directory reached by a descriptor walk from "/" that follows no
link in any component, the file created O_CREAT|O_EXCL|O_NOFOLLOW, fsynced,
then read back and parsed.

The gate sets the report's verdict itself (`settle`), in three places a
reader finds it: the suite-level properties `blocker` (one per blocker),
`gate` (READY or NOT READY) and, READY only, `marker`; and a test case of its
own, `pty-acceptance` / `verdict`, that fails with the blockers and passes
only for READY, so that a CI system that counts failures sees a NOT READY
report as failed. The suite is named after the host, so that the reports of
a fleet are told apart. The report is published NOT READY (with no blocker:
PENDING, the marker not written yet) and replaced by its READY form only
after the marker was written and read back (decision/end_of_run.py).
"""

from __future__ import annotations

import os
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import PurePosixPath

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs, scratch
from pty_acceptance.spec.requirements import sort_key

LIMIT = 256 << 20


class ReportError(AcceptanceError):
    pass


def check_dir(path: str) -> None:
    """The report directory exists (made root:root 0755 where missing) and no
    component of its path is a link."""
    os.close(hostfs.open_dir(path, create=True))


def private_dir() -> str:
    """Where pytest's JUnit writer writes first."""
    d = scratch.make("pty-acceptance-junit-")  # made new (mkdirat), mode 0700
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o700:
        discard(d)
        raise ReportError(f"{d} is not a private directory")
    return d


def discard(directory: str | None) -> None:
    scratch.remove(directory)


def parse(data: bytes, where: str) -> ET.Element:
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise ReportError(f"{where} does not parse as XML: {e}") from None
    if root.tag != "testsuites" or root.find("./testsuite") is None:
        raise ReportError(f"{where} is not a JUnit report (no testsuites/testsuite)")
    return root


def _parent(path: str) -> tuple[int, str]:
    p = PurePosixPath(path)
    return hostfs.open_dir(str(p.parent)), p.name


def read(path: str) -> ET.Element:
    """The report as it is on disk, reached without a link; it must parse."""
    try:
        return parse(hostfs.read_file(path, LIMIT), path)
    except OSError as e:
        raise ReportError(f"{path} cannot be read back: {e.strerror or e}") from None


def load(written: str) -> ET.Element:
    """pytest's JUnit file, read and parsed (before it is settled and published)."""
    try:
        data = hostfs.read_file(written, LIMIT)
    except OSError as e:
        raise ReportError(f"pytest's JUnit file {written} cannot be read: {e.strerror or e}") from None
    return parse(data, written)


def render(root: ET.Element) -> bytes:
    return b'<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="utf-8")


def publish(data: bytes, final: str) -> None:
    """`data` as the new file `final` (never through a link, never over an
    existing file), then read back and parsed."""
    try:
        dfd, name = _parent(final)
        try:
            hostfs.create_at(dfd, name, data, 0o644)
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        raise ReportError(f"{final} cannot be created (O_EXCL|O_NOFOLLOW, no link in its "
                          f"directory's path): {e.strerror or e}") from None
    read(final)


def replace(path: str, data: bytes) -> None:
    """`data` over the report at `path` (a new file beside it, renamed), read back: the same bytes."""
    dfd, name = _parent(path)
    try:
        hostfs.replace_at(dfd, name, data, 0o644)
    finally:
        os.close(dfd)
    try:
        back = hostfs.read_file(path, LIMIT)
    except OSError as e:
        raise ReportError(f"{path} cannot be read back: {e.strerror or e}") from None
    if back != data:
        raise ReportError(f"{path} read back is not what was written")


_REPEAT = re.compile(r"^(?P<base>.+)\.(?P<n>[2-9]|[1-9][0-9]+)$")


def property_name(name: str, seen: dict[str, int]) -> str:
    """The name the report gives the next property called `name`: suite-level
    property names are unique (strict JUnit readers, xunitparser among them,
    keep one value per name), so a repeat is `name.2`, `name.3`, ..."""
    n = seen[name] = seen.get(name, 0) + 1
    return name if n == 1 else f"{name}.{n}"


def base_name(name: str) -> str:
    """A suite-level property's name without its repeat number (property_name)."""
    m = _REPEAT.match(name)
    return m.group("base") if m else name


VERDICT_CASE = ("pty-acceptance", "verdict")  # (classname, name): the gate's own test case
VERDICT_IDS = ("MARK-1", "SUITE-2")  # what it stands for: the marker, and the report's verdict
VERDICT_PROPERTIES = ("blocker", "gate", "marker")  # what settle sets among the suite's properties
PENDING = ("MARK-1: pending: the marker is not written yet; this report says READY only once the "
           "marker is written and read back, and stays NOT READY if the run ends before that")


def is_verdict_case(case: ET.Element) -> bool:
    return (case.get("classname"), case.get("name")) == VERDICT_CASE


def _count(suite: ET.Element, attr: str, delta: int) -> None:
    suite.set(attr, str(int(suite.get(attr) or 0) + delta))


def _verdict_case(suite: ET.Element, blockers: list[str], ready_line: str) -> None:
    """The verdict test case, last in the suite, and the suite's totals to match."""
    for old in [c for c in suite.findall("./testcase") if is_verdict_case(c)]:
        suite.remove(old)
        _count(suite, "tests", -1)
        _count(suite, "failures", -len(old.findall("failure")))
    case = ET.SubElement(suite, "testcase", classname=VERDICT_CASE[0], name=VERDICT_CASE[1], time="0.000")
    props = ET.SubElement(case, "properties")
    for i in VERDICT_IDS:
        ET.SubElement(props, "property", name="requirement", value=i)
    _count(suite, "tests", 1)
    if blockers:
        failure = ET.SubElement(case, "failure", message=ready_line)
        failure.text = "\n".join(blockers)
        _count(suite, "failures", 1)
    else:
        ET.SubElement(case, "system-out").text = ready_line


def is_ready(blockers: list[str], marker: str | None) -> bool:
    """The one rule that makes the gate's judgement its word: READY when the
    judgement (decision/rules.decide's blockers, and those of the end's steps,
    decision/end_of_run.py) holds no blocker and the marker was written and
    read back (`marker`: its path; else None). `settle` writes the word by it,
    verdict.from_junit reads the recorded judgement back by it; neither judges
    the run again."""
    return not blockers and marker is not None


def settle(root: ET.Element, blockers: list[str], marker: str | None, host: str | None = None) -> ET.Element:
    """The report's verdict set, in place: READY when there is no blocker and
    `marker` (the marker's path, written and read back) is given, else NOT
    READY with `blockers` ("<IDs>: reason" each; none: PENDING). The suite is
    named `host` when given. Returns `root`."""
    suite = root.find("./testsuite")
    if suite is None:
        raise ReportError("not a JUnit report (no testsuite)")
    if host:
        suite.set("name", host)
    props = suite.find("./properties")
    if props is None:
        props = ET.Element("properties")
        suite.insert(0, props)
    ready = is_ready(blockers, marker)
    said = [] if ready else (blockers or [PENDING])
    seen: dict[str, int] = {}
    for p in list(props):
        base = base_name(p.get("name", ""))
        if base in VERDICT_PROPERTIES:
            props.remove(p)
        else:
            property_name(base, seen)
    for b in said:
        ET.SubElement(props, "property", name=property_name("blocker", seen), value=b)
    ET.SubElement(props, "property", name="gate", value="READY" if ready else "NOT READY")
    if ready:
        ET.SubElement(props, "property", name="marker",
                      value=f"{marker} (written and read back before this report said READY)")
    _verdict_case(suite, said, f"READY: marker written {marker}" if ready else not_ready_line(said))
    return root


LEADING_IDS = re.compile(r"^((?:[A-Z]+-\d+ ?)+):")
ID = re.compile(r"\b[A-Z]+-\d+\b")


def blocker_ids(blockers: list[str]) -> set[str]:
    """The requirement IDs "<IDs>: reason" blockers name (SUITE-3 for one that names none)."""
    out: set[str] = set()
    for b in blockers:
        m = LEADING_IDS.match(b)
        out.update(ID.findall(m.group(1)) if m else ["SUITE-3"])
    return out


def not_ready_line(blockers: list[str]) -> str:
    """The last line a NOT READY run ends with, for these blockers."""
    ids = sorted(blocker_ids(blockers) or {"SUITE-3"}, key=sort_key)
    return f"NOT READY: {max(len(blockers), 1)} blockers: {' '.join(ids)}"


def mark_not_ready(path: str, blockers: list[str]) -> None:
    """The published report replaced by its NOT READY form with `blockers`."""
    replace(path, render(settle(read(path), blockers, None)))


def strict(data: bytes) -> bytes:
    """The report in the strict JUnit form (Jenkins' xUnit plugin validates
    against junit-10.xsd, which allows a testcase neither `file`/`line`
    attributes nor `properties`): each case's properties (its requirement IDs,
    evidence, concerns) become `name: value` lines of its `system-out`. The
    suite's own report stays the one with properties (SUITE-2: the IDs as
    properties are what the gate and the bundle read); this is a copy for
    strict readers (`pty-acceptance report --strict-junit`)."""
    root = ET.fromstring(data)
    for case in root.iter("testcase"):
        for attr in ("file", "line"):
            case.attrib.pop(attr, None)
        props = case.find("properties")
        if props is None:
            continue
        lines = [f"{p.get('name', '')}: {p.get('value', '')}" for p in props.findall("property")]
        case.remove(props)
        out = case.find("system-out")
        if out is None:
            out = ET.SubElement(case, "system-out")
        out.text = "\n".join(lines) + ("\n" + out.text if out.text else "")
    return b'<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="utf-8")
