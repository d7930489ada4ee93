"""Which checkout of the suite a pytest session is started on, read before
pytest has parsed the suite's options (MARK-4, SUITE-3): runguard.py arms
the run guard from the first of the suite's code that runs, and at that
point pytest knows its own options but not the suite's.

A checkout is a directory holding `conftest.py` (the root conftest, the
suite's start-up) and `acceptance/node-ids.txt` (the checked-in list of its
tests): the checkout of the installed package, and any other laid out so
(the suite's own tests build such projects). A session is on a checkout when
a path it collects, links resolved, is the checkout's `acceptance/` or lies
in it, or is the checkout itself or a directory above it. The paths are
pytest's: the positional arguments (less the values of the suite's own
options, which pytest's first parse takes for paths), else `testpaths` when
pytest is started from its rootdir, else the directory it is started in;
with `--pyargs`, a module name is looked up as a path on sys.path, the
start directory and the rootdir too, nothing imported.
"""

from __future__ import annotations

import functools
import glob
import os
import shlex
import sys
from pathlib import Path

import pytest

from pty_acceptance.decision import marker_paths
from pty_acceptance.errors import Unreadable
from pty_acceptance.decision.nodeids import FILE as NODE_IDS
from pty_acceptance.host import rundir

RUN_DIR_INI = "pty_acceptance_run_dir"  # the run lock's directory (startup.pytest_addoption)

# The suite's own options that take a value (startup.pytest_addoption): pytest
# parses them only once the root conftest has loaded; its first parse reads
# their values as paths.
VALUE_OPTIONS = ("--inventory", "--marker", "--waivers", "--sign-key", "--sign-tool", "--report-dir")


def is_checkout(d: Path) -> bool:
    """`d` is laid out as a checkout of the suite (the module docstring)."""
    return (d / "conftest.py").is_file() and (d / NODE_IDS).is_file()


def package_checkout() -> Path | None:
    """The checkout this package is installed from (an editable install's)."""
    d = Path(__file__).resolve().parents[3]  # gate/ -> pty_acceptance/ -> acceptance/ -> checkout
    return d if is_checkout(d) else None


def raw_args(config: pytest.Config) -> list[str]:
    """The arguments as pytest reads them, in its order: the configuration
    file's addopts, PYTEST_ADDOPTS, the command line."""
    try:
        ini = [str(a) for a in config.getini("addopts")]
    except ValueError:
        ini = []
    try:
        env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:  # pytest refuses it as well
        env = []
    return ini + env + [str(a) for a in config.invocation_params.args]


def early_targets(config: pytest.Config) -> list[str]:
    """What pytest will collect, decided as pytest decides it (its
    Config._decide_args), from its first parse of the arguments."""
    ns = config.known_args_namespace
    files = _less_values([str(f) for f in (getattr(ns, "file_or_dir", None) or [])], raw_args(config))
    if files:
        return files
    here = Path(config.invocation_params.dir)
    if here == Path(config.rootpath):
        found: list[str] = []
        for pattern in config.getini("testpaths"):
            found += [pattern] if getattr(ns, "pyargs", False) else sorted(glob.iglob(pattern, recursive=True))
        if found:
            return found
    return [str(here)]


def _less_values(files: list[str], args: list[str]) -> list[str]:
    """`files` (pytest's first parse's paths) without the values of the
    suite's own options, which that parse takes for paths."""
    files = list(files)
    for name in VALUE_OPTIONS:
        for value in marker_paths.option_values(args, name, joined=False):
            if value in files:
                files.remove(value)
    return files


def _module_paths(name: str, bases: list[Path]) -> list[Path]:
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        return []
    out = []
    for base in bases:
        stem = base.joinpath(*parts)
        for cand in (stem.with_name(stem.name + ".py"), stem):
            if cand.exists():
                out.append(cand)
    return out


def target_paths(config: pytest.Config, targets: list[str], pyargs: bool) -> list[Path]:
    """Each target as a path, links resolved; with --pyargs each module name
    found on sys.path, the start directory or the rootdir as well."""
    return _paths(Path(config.invocation_params.dir), Path(config.rootpath), targets, pyargs)


def _paths(here: Path, rootpath: Path, targets: list[str], pyargs: bool) -> list[Path]:
    bases = [here, rootpath] + [Path(p or ".").absolute() for p in sys.path]
    out = []
    for t in targets:
        t = t.split("::", 1)[0]
        if pyargs:
            out += [Path(os.path.realpath(p)) for p in _module_paths(t, bases)]
        out.append(Path(os.path.realpath(here / t)))
    return out


def reaches(root: Path, path: Path) -> bool:
    """Collecting `path` collects tests of the checkout at `root`."""
    acceptance = root / "acceptance"
    return path == acceptance or acceptance in path.parents or path == root or path in root.parents


def checkout_reached(paths: list[Path]) -> Path | None:
    """The checkout (a directory laid out as one) that collecting `paths`
    reaches: the package's own, or one above a path."""
    own = package_checkout()
    for p in paths:
        if own is not None and reaches(own, p):
            return own
        for d in (p, *p.parents):
            if is_checkout(d) and reaches(d, p):
                return d
    return None


def own_config(root: Path) -> dict[str, object]:
    """The values of the checkout's own configuration file (pytest's choice
    among the files in the checkout's directory), read from the checkout:
    {} when it has none or it cannot be read."""
    from _pytest.config.findpaths import locate_config  # pytest's own reading of its files

    try:
        base, _, cfg, _ = locate_config(root, [root])
    except (pytest.UsageError, OSError, ValueError):
        return {}
    if base is None or Path(base) != root:
        return {}
    return {k: getattr(v, "value", v) for k, v in cfg.items()}


def run_dir_of(root: Path) -> str:
    """The run lock's directory: `pty_acceptance_run_dir` in the checkout's
    own configuration file, else rundir.DEFAULT_DIR. Read from the checkout:
    the file or the -o pytest was given does not move it."""
    value = own_config(root).get(RUN_DIR_INI)
    return value if isinstance(value, str) and value else rundir.DEFAULT_DIR


@functools.cache
def _pytest_parser():
    """pytest's own option parser, made once (a Config of its own: about 30 ms)
    for every first parse the early guard reads."""
    from _pytest.config import get_config

    return get_config()._parser


def _first_parse(line: list[str]) -> tuple[list[str], bool]:
    """What pytest's first parse of `line` takes for paths to collect (the
    plugins' options are not known yet: their separate values among them),
    and --pyargs; where that parse fails (pytest's will too), every argument
    that is no option."""
    try:
        ns = _pytest_parser().parse_known_args(line)
        return [str(f) for f in (getattr(ns, "file_or_dir", None) or [])], bool(getattr(ns, "pyargs", False))
    except (pytest.UsageError, ValueError, TypeError, SystemExit):
        return [a for a in line if not a.startswith("-")], "--pyargs" in line


def discovered(line: list[str], here: str) -> tuple[Path | None, list[str], list[str]]:
    """The configuration file pytest itself will take for `line` started in
    `here` (as pytest's determine_setup finds it from its first parse: a -c
    file, or one found beside the paths it is given or the directory it starts
    in), its addopts and its testpaths (a blind red team's sixth pass: a
    pytest.ini whose testpaths named the suite, in the directory a bare
    `python -m pytest` started in, imported its addopts' -p plugin before
    anything of the suite's)."""
    from _pytest.config.findpaths import determine_setup

    from pty_acceptance.decision import launch

    files, _ = _first_parse(line)
    inifile = launch.short_values(line, "c", "--config-file")
    rootdir = launch.short_values(line, None, "--rootdir")
    try:
        _, inipath, cfg, _ = determine_setup(
            inifile=inifile[-1] if inifile else None, override_ini=None, args=files,
            rootdir_cmd_arg=rootdir[-1] if rootdir else None, invocation_dir=Path(here))
    except Exception:  # noqa: BLE001  # pytest stops at it
        return None, [], []
    return (Path(inipath) if inipath else None), _ini_list(cfg.get("addopts")), _ini_list(cfg.get("testpaths"))


def _ini_list(value: object) -> list[str]:
    """A configuration value as the arguments it holds (a string split as a
    shell would, a list as it is; pytest 9 wraps either in a ConfigValue)."""
    value = getattr(value, "value", value)
    try:
        return shlex.split(value) if isinstance(value, str) else \
            [str(a) for a in value] if isinstance(value, list) else []
    except ValueError:  # pytest stops at it
        return []


def early_run(args: list[str], here: str) -> tuple[Path, list[str]] | None:
    """For the early guard (early.py), before pytest started: the checkout a
    pytest run with command line `args`, started in `here`, is on (None: it
    is on none), and the raw arguments as raw_args gives them (the
    checkout's addopts, PYTEST_ADDOPTS, `args`, and a -c file's addopts and
    testpaths). What it collects is read as early_targets reads it, from the
    parse of pytest's own options (_first_parse)."""
    try:
        env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:  # pytest stops at it
        env = []
    line = env + [str(a) for a in args]
    _, found_opts, testpaths = discovered(line, here)  # a -c file's, or one pytest finds itself
    line = found_opts + line
    files, pyargs = _first_parse(line)
    files = _less_values(files, line) or testpaths  # pytest collects testpaths when given no path
    start = Path(here)
    paths = _paths(start, start, files or [here], pyargs)
    root = checkout_reached(paths) or (linked_checkout(paths) if files else None)  # paths given, not the cwd
    if root is None:
        return None
    ini = _ini_list(own_config(root).get("addopts", ""))
    return root, ([] if found_opts == ini else ini) + line  # the checkout's own, once


LINKS_LOOKED_AT = 100_000  # entries of the directories a run is given, walked for a link into a checkout


class TooLarge(Unreadable):
    """A directory a run is given cannot be looked through (too many entries,
    a mount inside): the early guard refuses the run (what it cannot judge,
    it refuses)."""


def linked_checkout(paths: list[Path]) -> Path | None:
    """The checkout a link inside one of the directories `paths` leads into
    (pytest follows a link to a directory as it collects): a blind red team's
    seventh pass gave pytest a directory outside the checkout holding
    `linked -> <checkout>/acceptance` and a conftest.py that disarmed the run
    guard before the suite's own conftest loaded. The eighth pass bind-mounted
    `acceptance/` there instead, and hid the link behind 100,001 entries: a
    mount inside a directory the run is given (or a given directory that is
    itself a bind mount of part of a filesystem) may show any checkout under
    another path, so it raises TooLarge, and so does a walk past
    LINKS_LOOKED_AT entries; the package's own checkout and its acceptance/
    are known by device and inode too. Walked without following a link."""
    from pty_acceptance.host import mountinfo

    mounts = {m.mountpoint: m for m in mountinfo.read("self")}
    for top in paths:
        m = mounts.get(os.path.realpath(top))
        if top.is_dir() and m is not None and m.root != "/":
            raise TooLarge(f"{top} is a mount of {m.root} of another filesystem's tree: whether it shows a "
                           "checkout of the suite cannot be told")
    own = package_checkout()
    known: dict[tuple[int, int], Path] = {}
    for place in ((own, own / "acceptance") if own is not None else ()):
        try:
            st = os.stat(place)
        except OSError:
            continue
        known[(st.st_dev, st.st_ino)] = place.parent if place.name == "acceptance" else place
    seen = 0
    for top in paths:
        if not top.is_dir():
            continue
        for dirpath, dirs, names in os.walk(os.path.realpath(top)):  # never follows a link
            for sub in dirs:
                if os.path.join(dirpath, sub) in mounts:
                    raise TooLarge(f"{os.path.join(dirpath, sub)} inside {top} is a mount: whether it shows a "
                                   "checkout of the suite cannot be told")
            for n in dirs + names:
                seen += 1
                if seen > LINKS_LOOKED_AT:
                    raise TooLarge(f"{top} holds over {LINKS_LOOKED_AT} entries: whether a link or a mount "
                                   "in it reaches a checkout of the suite cannot be told")
                at = Path(dirpath) / n
                try:
                    st = os.lstat(at)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in known:  # the checkout itself, bound here
                    return known[(st.st_dev, st.st_ino)]
                if at.is_symlink():
                    target = Path(os.path.realpath(at))
                    found = checkout_reached([target])
                    if found is not None:
                        return found
    return None


def read_beside() -> tuple[str, ...]:
    """What pytest reads in a directory of a path it is given, before any of the
    suite's code: conftest.py (the initial conftests) and every configuration
    file name pytest looks for (its own list: pytest.toml and .pytest.toml
    came with pytest 9, a blind red team's sixth pass)."""
    from _pytest.config.findpaths import CONFIG_LOADERS_BY_NAME

    return ("conftest.py", *CONFIG_LOADERS_BY_NAME)


def outside(raw: list[str], here: str, root: Path) -> list[str]:
    """Why the paths pytest's first parse of `raw` takes (a path of its own, or
    the value of one of the suite's options given apart from it: `--inventory
    FILE`) may have pytest run code that is not the suite's, for those outside
    the checkout at `root`: for each, pytest loads a conftest.py in its
    directory or any directory above that is not above the checkout (and in a
    directory's test* subdirectories), and may take a configuration file there
    (its addopts, -p plugins) before any of the suite's code (a blind red
    team's fifth pass: a conftest.py beside an inventory in another directory
    turned a failing run READY). Such a directory must hold none of them and
    be root's alone (owned by root, writable by no one else: a /tmp would let
    any user put one there between this look and pytest's)."""
    files, _ = _first_parse(raw)
    above = set(root.parents) | {root}
    names = read_beside()
    out: list[str] = []
    for f in dict.fromkeys(files):
        p = Path(os.path.realpath(Path(here) / f.split("::", 1)[0]))
        if p == root or root in p.parents:
            continue
        dirs = [p] + [p / d for d in _test_dirs(p)] if p.is_dir() else []
        for d in (p.parent, *p.parent.parents) if not p.is_dir() else (p, *p.parents):
            if d in above:
                break
            dirs.append(d)
        for d in dict.fromkeys(dirs):
            try:
                st = os.lstat(d)
            except FileNotFoundError:
                continue
            except OSError as e:
                out.append(f"{f}: {d} cannot be read ({e.strerror})")
                continue
            if st.st_uid != 0 or st.st_mode & 0o022:
                out.append(f"{f}: {d} is {'not root' + chr(39) + 's' if st.st_uid else 'writable by others'} "
                           "(a conftest.py could be put there before pytest loads it)")
            found = [n for n in names if os.path.lexists(d / n)]
            if found:
                out.append(f"{f}: {d} holds {', '.join(found)}")
    return out


def _test_dirs(p: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(p) if n.startswith("test") and (p / n).is_dir())
    except OSError:
        return []
