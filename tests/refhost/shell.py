"""A developer's tool: boot a reference host, deploy, optionally switch on
reference-supervisor faults, run one command inside as root, tear down.

    python -m tests.refhost.shell [--fault WORD]... [--script FILE]... -- CMD [ARG]...

CMD runs with cwd /opt/pty-acceptance/src (this checkout, read-only), e.g.
    python -m tests.refhost.shell -- /opt/pty-acceptance/venv/bin/python -m pytest \\
        -p no:cacheprovider acceptance/test_peer.py --inventory inventories/reference.yml \\
        --report-dir /tmp/r --no-marker
(a narrowed run never writes a marker anyway). Exit status: CMD's.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from . import nodedist, npmdist, pinnedvenv
from .common import supervisor_switch_lines
from .machine import Machine
from .run import DEPLOY, GUEST_SRC
from .tree import ensure_tree

REPO = pathlib.Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.refhost.shell")
    ap.add_argument("--fault", action="append", default=[])
    ap.add_argument("--script", action="append", default=[], help="a host sh script run inside after deploy")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    scripts = [pathlib.Path(s).resolve() for s in a.script]
    npmdist.ensure_all()  # deploy.sh installs Node's SEA and the released opencode from these
    nodedist.ensure_sea(REPO / "tests/reference/src/candidate/server.js")
    tree = ensure_tree()
    binds = [(str(REPO), GUEST_SRC, True), *npmdist.binds(), *pinnedvenv.binds(REPO, tree)]
    binds += [(str(s.parent), f"/opt/dev-script-{i}", True) for i, s in enumerate(scripts)]
    with Machine(tree, binds=binds) as m:
        r = m.run(["/bin/sh", f"{GUEST_SRC}/{DEPLOY}"], stream=True)
        if r.returncode != 0:
            print(f"deploy failed: {r.returncode}", file=sys.stderr)
            return 3
        if a.fault:
            r = m.run(["/bin/sh", "-ec", "\n".join(supervisor_switch_lines(a.fault))], stream=True)
            if r.returncode != 0:
                return 3
        for i, s in enumerate(scripts):
            r = m.run(["/bin/sh", f"/opt/dev-script-{i}/{s.name}"], stream=True)
            if r.returncode != 0:
                return 3
        if not cmd:
            return 0
        return m.run(cmd, cwd=GUEST_SRC, stream=True).returncode


if __name__ == "__main__":
    sys.exit(main())
