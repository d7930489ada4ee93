"""`pty-acceptance fleet-summary DIR --run-id ID HOST...`: one line per host
of a fleet run (fleet/pty-acceptance.yml) from what came back to the control
node.

    <host>: READY: marker written <path>
    <host>: NOT READY: <n> blockers: <IDs>[; read back: <what of the report disagrees>][; <what disagreed>]
    <host>: UNREACHABLE/ERROR: <why>

DIR/<host>/ holds the files the playbook wrote or fetched under names it
chose itself: `<run id>.<role>` for each role of FILES; nothing else there is
read. A file of an earlier run into the same DIR (`-e fleet_out=DIR`) carries
that run's id and is never read: a host that did not answer this time did not
report, whatever it left last time. The Statement must name this host's
JUnit report of this run (`pty-acceptance-fleet-<run id>-<host>.xml`, the
name the playbook gave it on that host) with the SHA-256 of the JUnit that
came back: files another host wrote (or a run by hand elsewhere), put in
this host's directory, name another report and are not this host's
verdict. Every byte of them came
from the host, which may be hostile (SUITE-4): files are opened without
following links and up to a size, a name that is not a plain file name is
not used as one, and every printed line goes through terminal.escape.

READY needs all four to agree: exit status 0, the JUnit report's verdict
(verdict.from_junit, as `pty-acceptance report` reads it: with the suite the
summary runs from, so that its cases must be that suite's node-id list, each
passed, and a report of another suite-tree is NOT READY, saying which), the in-toto
Statement's result PASSED or WARNED (a Statement naming that report's
SHA-256) and the suite's own last line; and the marker written is the
seed's, `/etc/opencode/pty-supervisor-verified` (spec/floor.py: a marker
anywhere else is not the one the cutover's verifier reads). A host with no
exit status did not report; it counts as not ready, like every line but
READY. Exit status 0 only when every host named is READY.

A host given a public key (`--pubkey HOST=FILE`, the playbook's
`pty_acceptance_sign_pubkey`; `--sign-tool HOST=TOOL`, default openssl)
signed its Statement on the host (`--sign-key`): its DSSE envelope must have
come back, verify with that key (signing.verify: the same host tool, PAE
recomputed) and sign exactly the Statement that came back; the line then
ends `; Statement signed (<tool>, keyid <keyid>), verified`. Anything else
is said on the line, and a READY host whose envelope does not verify is not
READY.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass

from pty_acceptance.report import reports, signing, verdict
from pty_acceptance.host.terminal import escape
from pty_acceptance.spec import floor

EXIT_STATUS = "exit-status"
OUTPUT = "suite-output.txt"
ERRORS = "suite-errors.txt"
JUNIT = "junit.xml"
HTML = "verdict.html"
STATEMENT = "verdict.intoto.json"
FILES = (EXIT_STATUS, OUTPUT, ERRORS, JUNIT, HTML, STATEMENT)
ENVELOPE = "verdict.intoto.dsse.json"  # only from a host that signs (--sign-key)
SUMMARY = "summary.txt"
MAX_BYTES = 64 << 20

PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RUN_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9]{1,5}$")  # the playbook's fleet_run_id
READY_LINE = re.compile(r"^READY: marker written \S+$")
NOT_READY_LINE = re.compile(r"^NOT READY: \d+ blockers: [A-Z]+-\d+(?: [A-Z]+-\d+)*$")

READY, NOT_READY, ERROR = "READY", "NOT READY", "UNREACHABLE/ERROR"


@dataclass(frozen=True)
class Key:
    """The public key a host's envelope is verified with, and its tool."""
    pubkey: bytes
    tool: str = signing.DEFAULT_TOOL


@dataclass
class HostLine:
    host: str
    state: str  # READY, NOT READY or UNREACHABLE/ERROR
    text: str  # what follows "<state>: "

    def __str__(self) -> str:
        return escape(f"{self.host}: {self.state}: {self.text}")


def read_file(directory: int, name: str) -> bytes | None:
    """A regular file's bytes (None: absent); no link followed, no FIFO opened."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError("a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file")
        if st.st_size > MAX_BYTES:
            raise OSError(f"larger than {MAX_BYTES} bytes")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_BYTES:
                raise OSError(f"larger than {MAX_BYTES} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def last_line(output: bytes) -> str:
    """The last non-empty line, split at "\\n" only: a "\\r" in it stays, to be escaped."""
    lines = [line for line in output.decode("utf-8", errors="replace").split("\n") if line.strip()]
    return lines[-1].strip(" \t\r") if lines else ""


def file_name(run_id: str, role: str) -> str:
    """Where the playbook puts a role's file of run `run_id` in DIR/<host>/."""
    return f"{run_id}.{role}"


def report_name(run_id: str, host: str) -> str:
    """The JUnit report's name on `host` (the playbook's fleet_stem + .xml):
    the run's and the host's, so that a Statement names whose report it is."""
    return f"pty-acceptance-fleet-{run_id}-{host}.xml"


def judge(root: int, host: str, run_id: str, key: Key | None = None, *,
          suite: verdict.Suite) -> HostLine:
    """The line for one host; root is an open descriptor of DIR; `key`: its
    envelope must verify with it; `suite`: what its report's cases must be
    (verdict.against)."""
    if not PLAIN_NAME.match(host):
        return HostLine(host, ERROR, "not a plain host name: nothing read for it")
    try:
        d = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root)
    except FileNotFoundError:
        return HostLine(host, ERROR, "did not report (no result came back)")
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            return HostLine(host, ERROR, "its directory is not a directory (or a symbolic link)")
        return HostLine(host, ERROR, f"its directory: {e.strerror or e}")
    try:
        got = {}
        for name in FILES + (ENVELOPE,):
            try:
                got[name] = read_file(d, file_name(run_id, name))
            except OSError as e:
                return HostLine(host, ERROR, f"{name}: {e.strerror or e}")
    finally:
        os.close(d)
    line = _judge_files(host, got, run_id, suite)
    if key is None or line.state == ERROR and line.text.startswith("did not report"):
        return line
    signed, problem = _signed(got[ENVELOPE], got[STATEMENT], key)
    if problem is None:
        line.text += f"; {signed}"
    elif line.state == READY:
        line = HostLine(host, ERROR, f"the JUnit report says READY: {line.text} but {problem}")
    else:
        line.text += f"; {problem}"
    return line


def _signed(envelope: bytes | None, statement: bytes | None, key: Key) -> tuple[str, str | None]:
    """(what verified, None) or ("", why not): the envelope verifies with the
    key and signs exactly the Statement that came back."""
    if envelope is None:
        return "", "no signed envelope came back"
    try:
        found = signing.verify(envelope, key.pubkey, key.tool)
    except signing.SignError as e:
        return "", f"its envelope does not verify ({key.tool}): {e}"
    if statement is None or found.body != statement:
        return "", "its envelope signs another Statement than the one that came back"
    return f"Statement signed ({key.tool}, keyid {found.keyid or 'none'}), verified", None


def _judge_files(host: str, got: dict[str, bytes | None], run_id: str, suite: verdict.Suite) -> HostLine:
    if (exit_status := got[EXIT_STATUS]) is None:
        return HostLine(host, ERROR, "did not report (no exit status came back)")
    status = exit_status.decode("ascii", errors="replace").strip()
    said = last_line(got[OUTPUT] or b"")
    v, junit_problem = None, None
    if (junit := got[JUNIT]) is None:
        junit_problem = "no JUnit report came back"
    else:
        try:
            v = verdict.from_junit(reports.parse(junit, JUNIT), suite)
        except (reports.ReportError, verdict.VerdictError) as e:
            junit_problem = f"the JUnit report: {e}"
    result = _statement_result(got[STATEMENT], got[JUNIT], run_id, host)
    if v is None:
        if NOT_READY_LINE.match(said):
            return HostLine(host, NOT_READY, f"{said[len('NOT READY: '):]}; {junit_problem}")
        error = last_line(got[ERRORS] or b"")
        return HostLine(host, ERROR, f"{junit_problem}; exit status {status}; "
                                     f"the suite's last line: {said or '(none)'}"
                                     + (f"; its last error line: {error}" if error else ""))
    disagree = []
    if said != v.last_line:
        disagree.append(f"the suite's last line says {said or '(none)'}")
    if status != "0" and v.ready:
        disagree.append(f"exit status {status}")
    if status == "0" and not v.ready:
        disagree.append("exit status 0")
    if result not in (("PASSED", "WARNED") if v.ready else ("FAILED",)):  # intoto.result
        disagree.append(f"the Statement's result is {result}")
    if got[HTML] is None:
        disagree.append("no HTML report came back")
    if v.ready:
        if v.last_line != f"READY: marker written {floor.MARKER}":
            disagree.append(f"its marker is not the seed's {floor.MARKER}")
        if not disagree and READY_LINE.match(v.last_line):
            return HostLine(host, READY, v.last_line[len("READY: "):])
        return HostLine(host, ERROR, f"the JUnit report says {v.last_line} but "
                        + ", ".join(disagree or ["its marker path is not one word"]))
    text = v.last_line[len("NOT READY: "):]
    # what disagrees in a report that named no blocker (an edited one, or another suite's): said
    text += "".join(f"; read back: {b[len(verdict.DISAGREES):]}" for b in v.blockers if b.startswith(verdict.DISAGREES))
    return HostLine(host, NOT_READY, text + ("; " + ", ".join(disagree) if disagree else ""))


def _statement_result(data: bytes | None, junit: bytes | None, run_id: str, host: str) -> str:
    """PASSED or FAILED, or why neither: the Statement must name this JUnit
    report, by this host's report name of this run and with its SHA-256."""
    name = report_name(run_id, host)
    if data is None:
        return "missing (no Statement came back)"
    try:
        st = json.loads(data)
        result = st["predicate"]["result"]
        # only the sha256 descriptors: the suite's commit is named by gitCommit
        named = {c["name"]: c["digest"]["sha256"] for c in st["predicate"]["configuration"]
                 if "sha256" in c["digest"]}
    except (ValueError, TypeError, KeyError) as e:
        return f"unreadable ({type(e).__name__})"
    if name not in named:
        others = sorted(n for n in named if n.startswith(f"pty-acceptance-fleet-{run_id}-"))
        if others:
            return f"about another host's report ({others[0]}, not {name})"
        return f"about another run's report (it does not name {name})"
    if junit is not None and hashlib.sha256(junit).hexdigest() != named[name]:
        return "about another JUnit report (its SHA-256 is not this one's)"
    return result if result in ("PASSED", "WARNED", "FAILED") else "neither PASSED, WARNED nor FAILED"


def summarize(directory: str, hosts: list[str], run_id: str,
              keys: dict[str, Key] | None = None, *, suite: verdict.Suite) -> tuple[list[HostLine], int]:
    """(one line per host, exit status: 0 only when every host is READY);
    `keys`: the hosts whose envelope must verify, with the key for each;
    `suite`: the suite the summary runs from, whose node-id list each
    report's cases must be (verdict.against)."""
    if not RUN_ID.match(run_id):
        raise ValueError(f"--run-id {run_id!r}: expected the playbook's run id "
                         "(YYYYMMDDTHHMMSSZ-N)")
    keys = keys or {}
    if unknown := sorted(set(keys) - set(hosts)):
        raise ValueError(f"--pubkey for {', '.join(map(escape, unknown))}: not a host of this summary")
    root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        lines = [judge(root, h, run_id, keys.get(h), suite=suite) for h in dict.fromkeys(hosts)]
    finally:
        os.close(root)
    ok = bool(lines) and all(line.state == READY for line in lines)
    return lines, 0 if ok else 1


def write_summary(directory: str, lines: list[HostLine]) -> None:
    """DIR/summary.txt (replaced, never followed)."""
    path = os.path.join(directory, SUMMARY)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii", errors="backslashreplace") as f:
        f.write("".join(f"{line}\n" for line in lines))
    os.replace(tmp, path)
