"""The native code mapped into the gate's own process (SUITE-3).

decision/loaded_code.py judges the Python code of the process; a shared
library runs below it, and can patch it through the C API. The clean start
(launch.py) keeps every variable that names one out of the process, yet a
host's own files still make libc and its libraries load code by name: a blind
red team's eighth pass named a provider module in OpenSSL's configuration
(now never read: OPENSSL_CONF=/dev/null), and its ninth an NSS module in
/etc/nsswitch.conf, found through /etc/ld.so.cache in a directory of its own,
whose constructor turned a failing run READY; glibc never unloads an NSS
module, so it is still mapped when the marker is decided.

So every file the process has mapped executable (/proc/self/maps, read when
the marker is decided) must be a file of an installed Debian package whose
bytes are the ones its md5sums list (dpkg's record of what it installed: the
interpreter, libc, its NSS modules, OpenSSL, ...), a file of the
virtualenv that a distribution's RECORD lists, as loaded_code judges those
(a C extension of a pinned distribution), or the running interpreter's own
(its executable, its libpython, its lib-dynload: as loaded_code trusts its
standard library; on a target that is the Debian package's). A mapping of a deleted file, or of
anything else, is named: `the process runs native code from <path>: ...`.

What is judged is the file the process maps, not the one at its path now:
each mapping is opened through /proc/self/map_files/<start>-<end> (the
mapped file itself) and its bytes are hashed from there (a blind red team's tenth pass:
an NSS module bind-mounted the package's real file over its own path once it
was loaded, and the path hashed as the package's). The interpreter's own
files are taken as its own only where the interpreter is no Debian
package's (a build of its own, as on a lab machine); on a target they are
judged by dpkg's md5sums like every other file. Executable memory no file
backs is not judged (documented: docs/operator.md).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import sys
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pty_acceptance.host import hostfs

MAPS_LIMIT = 4 << 20  # bytes of /proc/self/maps read
DPKG_INFO = "/var/lib/dpkg/info"
DPKG_STATUS = "/var/lib/dpkg/status"
STATUS_LIMIT = 64 << 20
MD5SUMS_LIMIT = 16 << 20  # bytes of one package's md5sums
LIBRARY_LIMIT = 512 << 20  # bytes of one mapped file hashed


@dataclass(frozen=True)
class Mapping:
    """One executable mapping of a file: its address range as map_files names
    it, the file's device (major, minor) and inode, and its path."""
    span: str
    dev: tuple[int, int]
    inode: int
    path: str


def executable_mappings(maps: str, is_elf: Callable[[str], bool] = lambda span: False) -> list[Mapping]:
    """The mappings of files (absolute paths) that `maps` (a /proc/<pid>/maps
    text) shows with execute permission, or of an ELF file whatever their
    permissions (`is_elf(span)`: a blind red team's eleventh pass had its
    module make its own code read-only once it had run), one per file
    (device and inode); a deleted one keeps its " (deleted)" tail."""
    out: dict[tuple[tuple[int, int], int, str], Mapping] = {}
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        if "x" not in parts[1] and not is_elf(parts[0]):
            continue
        try:
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            m = Mapping(parts[0], (major, minor), int(parts[4]), parts[5])
        except ValueError:
            m = Mapping(parts[0], (-1, -1), -1, parts[5])
        out.setdefault((m.dev, m.inode, m.path), m)
    return list(out.values())


def _candidates(path: str) -> list[str]:
    """`path` as dpkg may list it (without the leading /): where / and /usr are
    merged, a library under /usr/lib may be listed under /lib, and back."""
    rel = path.lstrip("/")
    alt = rel[len("usr/"):] if rel.startswith("usr/") else "usr/" + rel
    return [rel, alt]


def _installed_stanzas(status: str) -> list[str]:
    """dpkg's status entries of the packages it says are installed ("install ok installed")."""
    try:
        text = hostfs.read_file(status, STATUS_LIMIT).decode("utf-8", "surrogateescape")
    except OSError:
        return []
    return [stanza for stanza in text.split("\n\n")
            if any(line == "Status: install ok installed" for line in stanza.splitlines())]


def _fields(stanza: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[:1] != " ")


def installed_packages(status: str = DPKG_STATUS) -> set[str]:
    """The packages dpkg's status says are installed, as their md5sums files
    are named: NAME, and NAME:ARCH where dpkg adds it."""
    out: set[str] = set()
    for stanza in _installed_stanzas(status):
        fields = _fields(stanza)
        if fields.get("Package"):
            out.add(fields["Package"])
            if fields.get("Architecture"):
                out.add(f"{fields['Package']}:{fields['Architecture']}")
    return out


def dpkg_conffiles(status: str = DPKG_STATUS) -> dict[str, str]:
    """path -> md5 of every installed package's configuration files as dpkg
    installed them (its status's Conffiles; obsolete ones left out)."""
    out: dict[str, str] = {}
    for stanza in _installed_stanzas(status):
        lines = stanza.splitlines()
        for i, line in enumerate(lines):
            if line != "Conffiles:":
                continue
            for entry in lines[i + 1:]:
                if not entry.startswith(" "):
                    break
                words = entry.split()
                if len(words) >= 2 and words[0].startswith("/") and "obsolete" not in words[2:]:
                    out.setdefault(words[0], words[1])
    return out


def file_md5(path: str) -> str:
    """The md5 of the file at `path` (no link followed: hostfs.open_file)."""
    return _md5_at(path)


def dpkg_md5sums(info_dir: str = DPKG_INFO, status: str = DPKG_STATUS) -> dict[str, str]:
    """path (as listed, no leading /) -> md5 of every installed package's files:
    only the md5sums of packages dpkg's status says are installed (a blind red
    team's eleventh pass wrote one of no package's, sorting first)."""
    out: dict[str, str] = {}
    installed = installed_packages(status)
    for f in sorted(glob.glob(os.path.join(info_dir, "*.md5sums"))):
        if os.path.basename(f)[: -len(".md5sums")] not in installed:
            continue
        try:
            text = hostfs.read_file(f, MD5SUMS_LIMIT).decode("utf-8", "surrogateescape")
        except OSError:
            continue
        for line in text.splitlines():
            digest, _, rel = line.partition("  ")
            if rel:
                out.setdefault(rel, digest)
    return out


def mapped_md5(m: Mapping, pid: int | None = None) -> str:
    """The md5 of the file mapping `m` maps, read through map_files (the
    mapped file itself, whatever is at its path now: _open_mapped). Its
    device is not compared with the maps line's (on overlayfs, as on the
    reference host, maps names the lower file's device, fstat the overlay's)."""
    return _md5_fd(_open_mapped(m.span, pid), m.path)


def _md5_at(path: str) -> str:
    """The md5 of the file at `path` now (the one RECORD judged)."""
    return _md5_fd(hostfs.open_file(path), path)


def _open_mapped(span: str, pid: int | None = None) -> int:
    """A descriptor of the file mapped at `span` (a maps line's addresses):
    map_files is a magic link that opens the mapped file itself, and names a
    mapping by its addresses without the zeros maps pads them with."""
    start, _, end = span.partition("-")
    where = f"/proc/{pid or os.getpid()}/map_files/{int(start, 16):x}-{int(end, 16):x}"
    return os.open(where, os.O_RDONLY | os.O_CLOEXEC)


def _md5_fd(fd: int, where: str) -> str:
    """The md5 of what `fd` holds, bounded by LIBRARY_LIMIT; `fd` is closed."""
    try:
        hostfs.check_size(fd, LIBRARY_LIMIT, where)
        h = hashlib.md5(usedforsecurity=False)
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def _imported_extensions() -> set[str]:
    """The real paths of the extension modules Python has imported."""
    out = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and f.endswith(".so"):
            out.add(os.path.realpath(f))
    return out


def interpreters_own(path: str, imported: set[str]) -> bool:
    """`path` is the running interpreter's executable, its shared library or in
    its lib-dynload directory (its build's own configuration says where) one
    of `imported` (_imported_extensions): asked only where the interpreter is
    no Debian package's."""
    real = os.path.realpath(path)
    if real == os.path.realpath(f"/proc/{os.getpid()}/exe"):
        return True
    dynload = sysconfig.get_config_var("DESTSHARED")
    if dynload and os.path.dirname(real) == os.path.realpath(dynload) and real in imported:
        return True  # an extension module of its build that Python imported (a blind red team's twelfth
        # pass named an NSS module like one, xxlimited.cpython-311-...so, and linked libnss_evil.so.2 to it)
    libdir, library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    return bool(libdir and library) and real == os.path.realpath(os.path.join(libdir, library))


def problems(mappings: Iterable[Mapping], in_venv: Callable[[str], bool],
             venv_problem: Callable[[str], str | None], md5sums: Callable[[], dict[str, str]] = dpkg_md5sums,
             md5: Callable[[Mapping], str] = mapped_md5) -> list[str]:
    """Why each of `mappings` (executable_mappings) is not code the suite
    accepts: `in_venv(path)` says the virtualenv holds it, `venv_problem(path)`
    judges it by its RECORD (None: listed, and its bytes are the recorded
    ones)."""
    out = []
    sums = md5sums()
    # the interpreter's own files are taken by their place only for a build of its own outside
    # /usr (a lab's); a Debian interpreter, or a copy of one (a venv made with --copies), is
    # judged file by file (a blind red team's eleventh pass placed its module in lib-dynload)
    debian_python = any(c in sums for c in _candidates(os.path.realpath(f"/proc/{os.getpid()}/exe"))) \
        or os.path.realpath(sys.base_prefix) == "/usr"
    imported = _imported_extensions() if not debian_python else set()
    for m in mappings:
        path = m.path
        listed = next((sums[c] for c in _candidates(path) if c in sums), None)
        if path.endswith(" (deleted)"):
            why: str | None = "its file was deleted after it was mapped"
        elif listed is None and not debian_python and interpreters_own(path, imported):
            # the file its name resolves to, by its bytes: a blind red team's thirteenth pass mounted
            # a link of its module's name over its own directory, or named its module `lib\nevil.so`
            # beside a link `lib\012evil.so` (as maps writes the newline) to the interpreter's files
            why = _as_mapped(m, md5, functools.partial(_md5_at, os.path.realpath(path)), lambda got, want:
                             "the mapped file is not the interpreter's file its name leads to")
        elif in_venv(path):  # RECORD judges the file at its path: the mapped file must be that one
            why = venv_problem(path) or _as_mapped(m, md5, functools.partial(_md5_at, path), lambda got, want:
                                                   "the mapped file is not the one at its path (RECORD "
                                                   "judged that one)")
        elif listed is None:
            why = "no installed Debian package lists it (dpkg's md5sums)"
        else:
            why = _as_mapped(m, md5, functools.partial(str, listed), lambda got, want:
                             f"its bytes are not the package's (md5 {got}, dpkg lists {want})")
        if why:
            out.append(f"the process runs native code from {path}: {why} (a library an NSS module, a "
                       "configuration file or /etc/ld.so.cache had the process load: code the suite does not "
                       "judge)")
    return out


def _as_mapped(m: Mapping, md5: Callable[[Mapping], str], want: Callable[[], str],
               differs: Callable[[str, str], str]) -> str | None:
    """Why the mapped file's md5 is not want()'s (None: it is): differs(got,
    wanted), or that one of the two cannot be read."""
    try:
        got, wanted = md5(m), want()
    except OSError as e:
        return f"it cannot be read as mapped ({e.strerror or e})"
    return differs(got, wanted) if got != wanted else None


def _is_elf(span: str, pid: int | None = None) -> bool:
    """The file mapped at `span` begins as an ELF file does (read as mapped)."""
    try:
        fd = _open_mapped(span, pid)
    except (OSError, ValueError):
        return True  # what cannot be looked at is judged
    try:
        return os.pread(fd, 4, 0) == b"\x7fELF"
    except OSError:
        return True
    finally:
        os.close(fd)


def this_process() -> list[Mapping]:
    """The files this process has mapped executable now, and every ELF file it
    has mapped."""
    data = hostfs.read_file(f"/proc/{os.getpid()}/maps", MAPS_LIMIT)  # /proc/self is a link
    seen: dict[str, bool] = {}

    def is_elf(span: str) -> bool:
        if span not in seen:
            seen[span] = _is_elf(span)
        return seen[span]
    return executable_mappings(data.decode("utf-8", "surrogateescape"), is_elf)
