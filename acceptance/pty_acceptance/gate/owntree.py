"""The suite's own tree (SUITE-4): what root runs and reads must be root's.

The suite runs as root. If the service user could write its checkout, its
virtualenv, the interpreter, the inventory it trusts, the checklist that says
which modules must pass, or the directory its report goes to, the user would
choose what root runs and what the marker certifies. So each of them must pass
the OWN-1 chain check (hostfs: root-owned, neither group- nor other-writable,
not a link, and so every directory from "/" down to it), and every entry below
the checkout, the virtualenv and the imported package must be root-owned and
not group/other-writable too; a link inside them must itself be root's and
lead to something that passes the same check. Everything is judged with
lstat; nothing is opened. Reports are the suite's output (created O_EXCL,
never read back as input), so the report directory is checked but its
contents are not walked: the checkout's reports/ is left out of the walk,
and a report directory anywhere else in the checkout or the virtualenv is
refused at start-up (reporting.py), so no other subtree is ever left out.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field

import pytest

from pty_acceptance.gate import startup
from pty_acceptance.host import hostfs

MAX_LISTED = 20
MAX_DEPTH = 64  # directories below a walked top (the virtualenv's deepest is about 10)
AT_START = pytest.StashKey[list[str]]()  # problems found when the plugin registered


@dataclass(frozen=True)
class Own:
    what: str          # for people: "checkout", "virtualenv", ...
    path: str
    want: str          # "directory" or "regular file"
    walk: bool = False  # every entry below must be root's too


def interpreter() -> str:
    """The interpreter binary this process runs (the kernel's name for it)."""
    return os.readlink("/proc/self/exe")


def own_tree(rootdir: str, inventory_file: str, report_dir: str, package_dir: str,
             prefix: str | None = None) -> list[Own]:
    """What the run trusts, as this process sees it (`prefix`: sys.prefix)."""
    root = os.path.abspath(rootdir)
    return [
        Own("checkout", root, "directory", walk=True),
        Own("checklist", os.path.join(root, "ROOT-ACCEPTANCE.md"), "regular file"),
        Own("inventory", os.path.abspath(inventory_file), "regular file"),
        Own("report directory", os.path.abspath(report_dir), "directory"),
        Own("virtualenv (sys.prefix)", os.path.abspath(prefix or sys.prefix), "directory", walk=True),
        Own("interpreter", interpreter(), "regular file"),
        Own("imported pty_acceptance package", os.path.abspath(package_dir), "directory", walk=True),
    ]


@dataclass
class Checker:
    skip: set[str] = field(default_factory=set)   # subtrees not walked (the reports)
    problems: list[str] = field(default_factory=list)
    _chains: dict[str, list[str]] = field(default_factory=dict)
    _walked: set[str] = field(default_factory=set)

    def chain(self, path: str) -> list[str]:
        parent = os.path.dirname(path) or "/"
        if parent not in self._chains:
            self._chains[parent] = hostfs.chain_problems(path)
        return self._chains[parent]

    def check(self, own: Own) -> None:
        found = hostfs.Node.at(own.path).root_controlled_problems(own.want) + self.chain(own.path)
        self.problems += [f"{own.what}: {p}" for p in found]
        if own.walk and not found:
            self.walk(own.what, own.path)

    def walk(self, what: str, top: str) -> None:
        """Every entry below `top`, links not followed, `skip` not entered;
        iterative (a stack, never recursion), so a chain of directories
        deeper than MAX_DEPTH is one problem, never a RecursionError."""
        if top in self._walked:
            return
        self._walked.add(top)
        todo = [(top, 0)]
        while todo:
            here, depth = todo.pop()
            try:
                names = sorted(os.listdir(here))
            except OSError:
                continue  # gone, or not a directory any more (os.walk's way)
            for name in names:
                path = os.path.join(here, name)
                if path in self.skip:
                    continue
                st = self.entry(what, path)
                if st is None or not stat.S_ISDIR(st.st_mode):
                    continue
                if depth + 1 > MAX_DEPTH:
                    self.problems.append(f"{what}: {path} lies {depth + 1} directories below {top}, past "
                                         f"the walk's bound of {MAX_DEPTH}: not walked, so not judged")
                    continue
                todo.append((path, depth + 1))

    def entry(self, what: str, path: str) -> os.stat_result | None:
        """One entry judged; its lstat (None: it is gone)."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        node = hostfs.Node(path, st)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != 0:
                self.problems.append(f"{what}: {path} is a symlink owned by uid {st.st_uid}, not root")
            self.link_target(what, path)
            return st
        want = "directory" if stat.S_ISDIR(st.st_mode) else "regular file"
        self.problems += [f"{what}: {p}" for p in node.root_controlled_problems(want)]
        return st

    def link_target(self, what: str, path: str) -> None:
        target = os.path.realpath(path)
        node = hostfs.Node.at(target)
        if not node.exists:
            return  # a dangling link leads nowhere: nothing is read through it
        want = "directory" if node.kind == "directory" else "regular file"
        found = node.root_controlled_problems(want) + self.chain(target)
        self.problems += [f"{what}: {path} -> {p}" for p in found]


def of_run(config: pytest.Config, report_path: str) -> tuple[list[Own], list[str]]:
    """(what this run trusts, subtrees not walked) for a pytest session. The
    one subtree not walked is the checkout's own reports/: a report directory
    elsewhere in the checkout or in the virtualenv is refused at start-up
    (reporting.py), and is walked like the rest if it gets that far."""
    root = str(startup.project_root(config))
    if report_path:
        report_dir = os.path.dirname(report_path)
    else:
        report_dir = os.path.join(str(config.invocation_params.dir),
                                  config.getoption("--report-dir") or os.path.join(root, "reports"))
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    owns = own_tree(root, startup.inventory_file(config), report_dir, package)
    return owns, [os.path.join(root, "reports")]


def problems(owns: list[Own], skip: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Everything about the suite's own tree that is not root's alone."""
    c = Checker(skip={os.path.abspath(s) for s in skip})
    for own in owns:
        c.check(own)
    return list(dict.fromkeys(c.problems))


def summary(found: list[str]) -> str:
    shown = found[:MAX_LISTED]
    more = len(found) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
