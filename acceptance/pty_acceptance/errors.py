"""The one error vocabulary (SUITE-2, SUITE-3): every error the library raises
is an AcceptanceError that names the requirement IDs it bears on.

Library code below gate/ only raises; it never imports pytest. gate/ turns an
AcceptanceError that reaches a test or a fixture into a failure one way
(gate/failures.py): no traceback, the message beginning with its IDs, and the
JUnit case reported under those IDs too. What could not be read is as much a
failure as what was read wrong: fail closed.

Imports nothing of the package: every layer may raise from here."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NAMES_IDS = re.compile(r"^[A-Z]+-\d+\b")  # a message that begins with an ID names its own


class AcceptanceError(Exception):
    """An error that names its requirement IDs: `requirements` (class default,
    or given per instance). `str()` is the message as given; `headline()`
    begins with the IDs."""

    requirements: tuple[str, ...] = ()

    def __init__(self, message: str = "", *, requirements: Iterable[str] | None = None):
        super().__init__(message)
        if requirements is not None:
            self.requirements = tuple(requirements)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def headline(self, fallback: Iterable[str] = ()) -> str:
        """'ID ID: message': its own IDs, else `fallback` (the test's), else
        SUITE-3; a message that already begins with IDs is left as it is."""
        text = self.message or type(self).__name__
        if _NAMES_IDS.match(text):
            return text
        ids = self.requirements or tuple(fallback) or ("SUITE-3",)
        return f"{' '.join(ids)}: {text}"


class Finding(AcceptanceError):
    """The host did not do what a requirement says."""


class Unreadable(AcceptanceError):
    """A fact could not be read (a tool, a file, systemd, a session would not
    answer): the requirement it was read for fails."""


class Refused(AcceptanceError):
    """The suite refuses to act (on a unit, a path, a name) that is not its own
    to act on, or to go on with a run it cannot trust."""
