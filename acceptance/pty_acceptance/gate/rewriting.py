"""pytest's assertion rewriting, handed to the judge of the loaded code
(decision/loaded_code.py, SUITE-3): below gate/ nothing imports pytest.

pytest loads acceptance/'s test modules and conftest files from a cache it
checks by the source's hash only; the judge compares what such a cache holds
with the code pytest makes of the source here (the rewrite with no
configuration: the suite's own sets no assertion-pass hook)."""

from __future__ import annotations

import ast
import types

from _pytest.assertion import rewrite as _rw

from pty_acceptance.decision.loaded_code import Rewriter


def _rewrite(source: bytes, path: str) -> types.CodeType:
    tree = ast.parse(source, filename=path)
    _rw.rewrite_asserts(tree, source, path, None)
    return compile(tree, path, "exec", dont_inherit=True)


def assertion_rewriter() -> Rewriter:
    return Rewriter(_rw.PYC_TAIL, _rewrite)
