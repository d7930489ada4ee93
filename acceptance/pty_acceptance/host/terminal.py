"""What reaches the operator's terminal (SUITE-4): text that came from the host
(file names, `go build` output, unit names, error texts, whatever a session
answered) with its control characters escaped, so that an escape sequence in
a file name cannot move the cursor, clear a line or draw a fake
``READY: marker written`` line.

`escape` is the one helper. The gate's own terminal lines go through it, and
gate/report_escaping.py puts every test and collection report through it before the
terminal or the JUnit writer sees one: failure messages, tracebacks, captured
output and skip reasons, whichever module wrote them.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable

# Control, format (bidi overrides, zero-width), surrogate (undecodable bytes),
# private use, line and paragraph separators.
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def _escaped_char(ch: str) -> str:
    o = ord(ch)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def escape(text: str, keep_newlines: bool = False) -> str:
    """`text` with every control character written as \\xNN / \\uNNNN.
    With `keep_newlines`, "\\n" and "\\t" stay (a multi-line failure report);
    "\\r" never does."""
    if text.isascii() and text.isprintable():
        return text
    kept = "\n\t" if keep_newlines else ""
    return "".join(_escaped_char(ch) if ch not in kept and unicodedata.category(ch)
                   in ESCAPED_CATEGORIES else ch for ch in text)


REDACTED = "<redacted>"


def _written(secret: str) -> set[str]:
    """`secret` as the suite may write it: itself, escaped (escape(), with and
    without newlines kept), and as repr(), JSON and Python's backslash escapes
    write it (a blind red team's eighth pass: a password holding U+200B was
    shown as `\\u200b` in an escaped listing, past a redaction of the raw text)."""
    import json

    return {secret, escape(secret), escape(secret, keep_newlines=True), repr(secret)[1:-1],
            json.dumps(secret)[1:-1], secret.encode("ascii", "backslashreplace").decode("ascii"),
            secret.encode("unicode_escape").decode("ascii")}


def redactor(secrets) -> Callable[[str], str]:
    """text -> text with every one of `secrets`, in each form the suite may write
    it (_written), written as <redacted>: anywhere when it has 4 characters or
    more; a shorter one only where it stands apart from letters and digits (it
    would blank ordinary words; a blind red team's ninth pass gave the candidate
    a password of 3 characters, kept whole in the reports)."""
    import re

    forms = {w for s in secrets if s for w in _written(s)}
    kept = tuple(sorted((w for w in forms if len(w) >= 4), key=len, reverse=True))
    short = tuple(re.compile(r"(?<![0-9A-Za-z])" + re.escape(w) + r"(?![0-9A-Za-z])")
                  for w in sorted((w for w in forms if len(w) < 4), key=len, reverse=True))
    parts = _parts(kept)

    def redact(text: str) -> str:
        for s in kept:
            if s in text:
                text = text.replace(s, REDACTED)
        for part in parts:  # what a cut left of one: a bounded excerpt, a 15-byte comm
            if part in text:
                text = text.replace(part, REDACTED)
        for pattern in short:
            text = pattern.sub(REDACTED, text)
        return text
    return redact


PART_MIN = 12  # a piece of a secret this long or longer is redacted where it stands
PART_LEAST = 6  # of a secret of at most PART_MIN characters, pieces of all but one of them, at least this
PARTS_OF_MAX = 128  # pieces are made of secrets up to this long; of a longer one, its PART_MIN-long windows


def _parts(kept: tuple[str, ...]) -> tuple[str, ...]:
    """Every piece of each secret of at least PART_MIN characters, longest first (a blind red
    team's round eleven cut the password one character short: the suite's 300-character
    excerpt of ExecStart=, a stopped process's 15-byte comm). A secret longer than
    PARTS_OF_MAX gives its PART_MIN-long windows only (what is left beside a window redacted
    is shorter than PART_MIN)."""
    out: set[str] = set()
    for s in kept:
        least = max(PART_LEAST, min(PART_MIN, len(s) - 1))  # a shorter secret: all but one of it
        if len(s) <= least:
            continue
        lengths = range(least, len(s)) if len(s) <= PARTS_OF_MAX else (least,)
        for n in lengths:
            out.update(s[i:i + n] for i in range(len(s) - n + 1))
    return tuple(sorted(out, key=len, reverse=True))


def _same(text: str) -> str:
    return text


def _escape_repr(obj, redact=_same):
    """Escape every string inside a report's longrepr, keeping its structure
    (pytest's TerminalRepr classes are dataclasses holding strings)."""
    if isinstance(obj, str):
        return escape(redact(obj), keep_newlines=True)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_escape_repr(x, redact) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_escape_repr(x, redact) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            setattr(obj, f.name, _escape_repr(getattr(obj, f.name), redact))
        return obj
    if hasattr(obj, "toterminal"):  # a TerminalRepr that is not a dataclass
        for k, v in list(vars(obj).items()):
            setattr(obj, k, _escape_repr(v, redact))
        return obj
    if obj is None or isinstance(obj, (int, float, bool)):
        return obj
    return escape(redact(str(obj)), keep_newlines=True)


def escape_report(report, redact=_same) -> None:
    """The report's failure text and captured output escaped, and (`redact`)
    what must never be shown taken out of them and of its properties."""
    if report.longrepr is not None:
        report.longrepr = _escape_repr(report.longrepr, redact)
    report.sections = [(escape(redact(title)), escape(redact(text), keep_newlines=True))
                       for title, text in report.sections]
    props = getattr(report, "user_properties", None)
    if redact is not _same and props:
        report.user_properties = [(k, redact(v) if isinstance(v, str) else v) for k, v in props]
