"""The installed package carries what its commands read from a checkout
(issue 32 item 1): ROOT-ACCEPTANCE.md (`pty-acceptance report`'s checklist)
and the inventories (the default of `preflight`, `inventory check` and
`verify-marker`), copied into pty_acceptance/shipped/ when the wheel is
built; and what a re-render checks a report's cases against (SUITE-2,
report/verdict.py `against`): acceptance/node-ids.txt and suite-tree.txt, the
`suite-tree` value of the checkout it is built from (suite_identity.tree_of:
a run of that checkout records the same), so that `report` and
`fleet-summary` off a checkout know which suite's reports they can check.
One copy each in the checkout, none in git: an editable install reads the
checkout's own files (cli.py finds the checkout first).

And the early guard's start-up file (gate/early.py, MARK-4): EARLY_PTH,
installed at the top of site-packages, where Python's site module runs its
one import line as every interpreter of the virtualenv starts. It is the
distribution's one data file, placed by InstallEarlyGuard in install_lib (the
top of the purelib): that is the wheel's root in `pip install -e .` (setuptools'
editable wheel) and in a built wheel alike, so pip lists it in the
distribution's RECORD with its hash either way. Its name sorts after
`__editable__.*.pth`, which puts the checkout's acceptance/ on sys.path
first. Everything else is pyproject.toml's."""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
SHIPPED = ["ROOT-ACCEPTANCE.md", "acceptance/node-ids.txt",
           *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "inventories").glob("*.yml"))]
TREE = "suite-tree.txt"  # cli.SHIPPED_TREE


def suite_tree() -> str:
    """The checkout's `suite-tree` value, by the suite's own code."""
    sys.path.insert(0, str(ROOT / "acceptance"))
    try:
        from pty_acceptance.provenance import suite_identity
    finally:
        sys.path.remove(str(ROOT / "acceptance"))
    return suite_identity.tree_of(ROOT)


EARLY_PTH = "pty_acceptance_early.pth"  # gate/early.py's PTH
# one line: site runs a line that starts with `import`; a failed import says nothing
# (a virtualenv whose checkout moved still runs pip)
EARLY_LINE = "import sys; exec('try:\\n import pty_acceptance.gate.early\\nexcept Exception:\\n pass')\n"



class BuildWithShipped(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the checkout is the package's home: nothing to carry
        for rel in SHIPPED:
            target = Path(self.build_lib, "pty_acceptance", "shipped", rel)
            self.mkpath(str(target.parent))
            self.copy_file(str(ROOT / rel), str(target), preserve_mode=False)
        Path(self.build_lib, "pty_acceptance", "shipped", TREE).write_text(suite_tree() + "\n", encoding="utf-8")

    def get_outputs(self, include_bytecode=True):
        extra = [str(Path(self.build_lib, "pty_acceptance", "shipped", rel)) for rel in [*SHIPPED, TREE]]
        return super().get_outputs(include_bytecode) + ([] if getattr(self, "editable_mode", False) else extra)


class InstallEarlyGuard(Distribution().get_command_class("install_data")):  # distutils' own
    """EARLY_PTH at the top of the purelib (the module docstring); the
    distribution has no other data file."""

    def run(self):
        lib = self.get_finalized_command("install").install_lib
        self.mkpath(lib)
        target = Path(lib, EARLY_PTH)
        if not self.dry_run:
            target.write_text(EARLY_LINE)
        self.outfiles.append(str(target))


class WithEarlyGuard(Distribution):
    """A distribution with data files (data_files: the start-up file's one
    entry, InstallEarlyGuard's), in setuptools' editable wheel too: that asks
    the distribution for has_data, the install command for has_data_files."""

    def has_data(self):
        return self.has_data_files()


setup(cmdclass={"build_py": BuildWithShipped, "install_data": InstallEarlyGuard},
      data_files=[("", [])], distclass=WithEarlyGuard)
