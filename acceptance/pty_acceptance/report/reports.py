"""The JUnit report on disk (SUITE-2, SUITE-4, MARK-1).

pytest's JUnit writer opens its file by path: it follows links and truncates
whatever is there. So it writes into a private directory (root's, mode 0700,
in the run's scratch area), and the gate publishes that file into the report directory
itself: the directory reached by a descriptor walk from "/" that follows no
link in any component, the file created O_CREAT|O_EXCL|O_NOFOLLOW, fsynced,
then read back and parsed. The marker is written only after that (gate/finish.py);
if writing the marker then fails, the published report is replaced by one
that says NOT READY.
"""

from __future__ import annotations

import os
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import PurePosixPath

from pty_acceptance.errors import AcceptanceError
from pty_acceptance.host import hostfs, scratch

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


def publish(written: str, final: str) -> None:
    """Copy the JUnit writer's file to `final` (a new file, never through a
    link, never over an existing file), then read it back and parse it."""
    try:
        data = hostfs.read_file(written, LIMIT)
    except OSError as e:
        raise ReportError(f"pytest's JUnit file {written} cannot be read: {e.strerror or e}") from None
    parse(data, written)
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


def replace(path: str, root: ET.Element) -> None:
    """Write `root` over the report at `path`: a new file beside it, renamed."""
    data = b'<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="utf-8")
    dfd, name = _parent(path)
    try:
        hostfs.replace_at(dfd, name, data, 0o644)
    finally:
        os.close(dfd)


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


def mark_not_ready(path: str, blockers: list[str]) -> None:
    """The published report said READY and the marker then failed: say NOT READY."""
    root = read(path)
    props = root.find("./testsuite/properties")
    if props is None:
        props = ET.SubElement(root.find("./testsuite"), "properties")  # type: ignore[arg-type]  # pytest's JUnit file has one
    seen: dict[str, int] = {}
    for p in list(props):
        if p.get("name") == "marker":
            props.remove(p)
            continue
        if p.get("name") == "gate":
            p.set("value", "NOT READY")
        property_name(base_name(p.get("name", "")), seen)
    for b in blockers:
        ET.SubElement(props, "property", name=property_name("blocker", seen), value=b)
    replace(path, root)


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
