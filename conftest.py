"""Root conftest: loads the acceptance plugin (requirement markers, JUnit
evidence, the marker gate). The plugin stays inert unless the session runs
tests under acceptance/.

The start-up hooks (the suite's options, the marker's removal before anything
else, NOT READY when no gate got registered) are this conftest's own, not the
plugin's, so that `-p no:pty_acceptance.gate.plugin` cannot keep a stale marker
(pty_acceptance/gate/startup.py)."""

import sys
from pathlib import Path

_lib = str(Path(__file__).resolve().parent / "acceptance")
if _lib not in sys.path:
    sys.path.insert(0, _lib)

from pty_acceptance.gate.startup import (  # noqa: E402,F401 - this conftest's own hooks
    pytest_addoption, pytest_cmdline_main, pytest_configure, pytest_report_header, pytest_unconfigure)

# only the suite's own plugin: pytester (the suite's own tests' fixture) is
# tests/conftest.py's, never loaded in an acceptance run (its --lsof runs
# lsof from the operator's PATH as root: launch.py refuses it should it come)
pytest_plugins = ["pty_acceptance.gate.plugin"]
