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

from pty_acceptance.decision import loaded_code
from pty_acceptance.decision.loaded_code import Rewriter


def _rewrite(source: bytes, path: str) -> types.CodeType:
    tree = ast.parse(source, filename=path)
    _rw.rewrite_asserts(tree, source, path, None)
    return compile(tree, path, "exec", dont_inherit=True)


def assertion_rewriter() -> Rewriter:
    return Rewriter(_rw.PYC_TAIL, _rewrite)


def forged_caches(root) -> list[str]:
    """Every bytecode cache of the checkout's suite (acceptance/ and the root
    conftest.py, never following a link) that would be loaded for its source
    and holds other code: pytest's assertion-rewriting cache against pytest's
    rewrite, the interpreter's own against the compile. Judged as the run starts,
    before pytest imports any of them (a blind red team's third pass: a forged
    rewrite cache that ran a patch compiled as '<string>' and removed itself left
    nothing to compare when the marker was decided)."""
    import importlib.util
    import os

    rw = assertion_rewriter()
    sources = [os.path.join(str(root), "conftest.py")]
    for top, dirs, files in os.walk(os.path.join(str(root), "acceptance")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(top, d)))
        sources += [os.path.join(top, f) for f in sorted(files) if f.endswith(".py")]
    out = []
    for src in sources:
        if os.path.islink(src) or not os.path.isfile(src):
            continue
        for bad in (loaded_code.rewritten_pyc_problem(src, rw),
                    loaded_code.pyc_problem(src, importlib.util.cache_from_source(src))):
            if bad:
                out.append(f"{src}: {bad}")
    return out
