"""Root-acceptance suite for the opencode-v2 pilot's PTY supervisor.

The test modules in ``acceptance/`` read like the operator's checklist
(ROOT-ACCEPTANCE.md); this package holds what they use: the requirement
catalogue, the inventory, the readers of host facts, the readiness marker and
the pytest plugin that decides whether the marker may be written.

PYTEST_DONT_REWRITE: this file alone, which holds no code. The early guard
(gate/early.py) imports it as every interpreter of the virtualenv starts,
before pytest marks the package for assertion rewriting; pytest would warn
that it cannot rewrite it. The package's modules imported later are
rewritten as before.
"""
