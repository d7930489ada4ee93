"""The installed package carries what its commands read from a checkout
(issue 32 item 1): ROOT-ACCEPTANCE.md (`pty-acceptance report`'s checklist)
and the inventories (the default of `preflight`, `inventory check` and
`verify-marker`), copied into pty_acceptance/shipped/ when the wheel is
built. One copy each in the checkout, none in git: an editable install reads
the checkout's own files (cli.py finds the checkout first). Everything else
is pyproject.toml's."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ["ROOT-ACCEPTANCE.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "inventories").glob("*.yml"))]


class BuildWithShipped(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the checkout is the package's home: nothing to carry
        for rel in SHIPPED:
            target = Path(self.build_lib, "pty_acceptance", "shipped", rel)
            self.mkpath(str(target.parent))
            self.copy_file(str(ROOT / rel), str(target), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        extra = [str(Path(self.build_lib, "pty_acceptance", "shipped", rel)) for rel in SHIPPED]
        return super().get_outputs(include_bytecode) + ([] if getattr(self, "editable_mode", False) else extra)


setup(cmdclass={"build_py": BuildWithShipped})
