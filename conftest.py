"""Root conftest: loads the acceptance plugin (options, requirement markers,
JUnit evidence, the marker gate). The plugin stays inert unless the session
runs tests under acceptance/."""

import sys
from pathlib import Path

_lib = str(Path(__file__).resolve().parent / "acceptance")
if _lib not in sys.path:
    sys.path.insert(0, _lib)

pytest_plugins = ["pty_acceptance.plugin", "pytester"]
