"""The acceptance tests' one checking vocabulary (SUITE-2, SUITE-3): a test
says what it read, what it wants and which requirement IDs a mismatch fails.

Every check raises errors.Finding naming those IDs; the plugin's hooks turn
it into the one failure (failures.failure): no traceback, the message
'IDS: text', the case reported under the IDs. Pass only IDs the test names
(its markers): its failure is then reported under its markers' IDs and no
other. Nothing here records evidence; a test records what it read itself.

    expect(ok, ids, text)                 ok, else 'IDS: text'
    expect_none(found, ids, subject)      no problems, else 'IDS: subject: p1; p2' (sep=)
    with collect(ids, subject) as p:      p.add(text), p.when(cond, text): at the
                                          block's end, expect_none(p, ...)
    with reading(ids, what, *errors):     one of `errors` raised inside fails
                                          'IDS: what: error' ('IDS: error' for what "")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from pty_acceptance.errors import Finding

Ids = str | Iterable[str]  # "UNIT-2", or ("ISO-1", "ISO-2")


def _ids(ids: Ids) -> tuple[str, ...]:
    return (ids,) if isinstance(ids, str) else tuple(ids)


def finding(ids: Ids, text: str) -> Finding:
    """The Finding a check raises: `text` (without IDs), reported under `ids`."""
    return Finding(text, requirements=_ids(ids))


def expect(ok: object, ids: Ids, text: str) -> None:
    """Fail `ids` with `text` unless `ok` is true."""
    if not ok:
        raise finding(ids, text)


def expect_none(found: Iterable[str], ids: Ids, subject: str = "",
                escape: Callable[[str], str] | None = None, sep: str = "; ") -> None:
    """Fail `ids` if any problem was found: '{subject}: p1; p2' (the problems
    joined by `sep`, through `escape` when the host wrote them)."""
    found = list(found)
    if found:
        text = sep.join(found) if escape is None else escape(sep.join(found))
        raise finding(ids, f"{subject}: {text}" if subject else text)


class Problems(list):
    """What a test found wrong, in the order it looked (collect)."""

    def add(self, text: str) -> None:
        self.append(text)

    def when(self, wrong: object, text: str) -> None:
        """Note `text` if `wrong` is true."""
        if wrong:
            self.append(text)


@contextmanager
def collect(ids: Ids, subject: str = "", escape: Callable[[str], str] | None = None,
            sep: str = "; ") -> Iterator[Problems]:
    """Note every problem in the block, then fail `ids` with all of them
    (expect_none). A failure raised inside the block is left as it is."""
    found = Problems()
    yield found
    expect_none(found, ids, subject, escape, sep)


@contextmanager
def reading(ids: Ids, what: str, *errors: type[BaseException],
            escape: Callable[[str], str] | None = None) -> Iterator[None]:
    """A fact read in the block that cannot be read (one of `errors`) fails
    `ids`: '{what}: {error}' ('{error}' when `what` is empty). For errors outside the vocabulary (OSError,
    ValueError, ...) and library errors whose own IDs (none, or others) are
    not the ones the test reports them under."""
    try:
        yield
    except errors as e:
        text = str(e) if escape is None else escape(str(e))
        raise finding(ids, f"{what}: {text}" if what else text) from None
