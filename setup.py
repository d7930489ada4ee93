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
checkout's own files (cli.py finds the checkout first). Everything else is
pyproject.toml's."""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

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


setup(cmdclass={"build_py": BuildWithShipped})
