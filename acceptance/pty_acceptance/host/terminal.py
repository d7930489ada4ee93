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


def _escape_repr(obj):
    """Escape every string inside a report's longrepr, keeping its structure
    (pytest's TerminalRepr classes are dataclasses holding strings)."""
    if isinstance(obj, str):
        return escape(obj, keep_newlines=True)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_escape_repr(x) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_escape_repr(x) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            setattr(obj, f.name, _escape_repr(getattr(obj, f.name)))
        return obj
    if hasattr(obj, "toterminal"):  # a TerminalRepr that is not a dataclass
        for k, v in list(vars(obj).items()):
            setattr(obj, k, _escape_repr(v))
        return obj
    if obj is None or isinstance(obj, (int, float, bool)):
        return obj
    return escape(str(obj), keep_newlines=True)


def escape_report(report) -> None:
    if report.longrepr is not None:
        report.longrepr = _escape_repr(report.longrepr)
    report.sections = [(escape(title), escape(text, keep_newlines=True))
                       for title, text in report.sections]
