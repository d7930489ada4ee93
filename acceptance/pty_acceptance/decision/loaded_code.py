"""Whether only the reviewed suite's code ran in the gate's process (SUITE-3),
decided from what was loaded, not from how it was requested.

When the marker is decided, every piece of code the process holds is judged
by where it came from:

- every module in sys.modules, every plugin module pytest registered (the
  gate hands them over: a conftest's module leaves sys.modules when the next
  conftest of the same name is imported), every module object still alive
  elsewhere and every function still alive (its code's file): a plugin that
  removed itself from sys.modules, or a sitecustomize that patched pytest
  and deleted its module, still shows by the functions it left behind;
- each must come from the checkout (its root conftest.py and acceptance/;
  or the pty_acceptance package where the suite's own editable install puts
  it), from the virtualenv's site-packages, where the file must be listed
  in the RECORD of a distribution that requirements/target.txt pins, name
  and version, and hash to the recorded SHA-256 (a file no RECORD lists, a
  `.pth`'s module or a sitecustomize.py, fails; so does every file of a
  second distribution of a pinned name), or from the interpreter's standard
  library (sys.base_prefix's, lib-dynload included, never its site-packages);
  built-in and frozen modules are the interpreter's own; the main program
  may be a console script of the virtualenv (.venv/bin/pytest, the
  operator's way), judged by the RECORD that lists it like every other file
  of the virtualenv, even where the virtualenv is in the checkout;
- a module's cached bytecode is what ran: no cache prefix may be in effect
  (sys.pycache_prefix), and a `.pyc` the interpreter would load for its
  source (header matching the source) must hold the code that source
  compiles to (a forged `.pyc` with the source's mtime and size is caught).
  The bytecode pytest's assertion rewriting caches for acceptance/'s test
  modules and conftest files must sit beside its source and, when pytest
  would load it (its header holds the source's hash: pytest checks nothing
  else), hold pytest's rewrite of that source; the interpreter must check
  hash-based caches as by default (not `--check-hash-based-pycs never`);
- a function whose code is named after a frozen module (`<frozen os>`) must
  be one of the code objects that module was frozen with: a patch compiled
  in the process under such a name is named;
- the process: a virtualenv (sys.prefix is not the interpreter's own), without
  the system's site-packages, the user site off, its standard library the
  running interpreter's own installation's (pyvenv.cfg's `home` naming
  another directory is named), sitecustomize/usercustomize in sys.modules
  under their own names; every sys.path entry one of
  the places above, or the virtualenv's bin/ (a console script's directory:
  what is imported from it is judged as above); every `.pth` file in site-packages one a pinned
  distribution's RECORD lists and hashes; one distribution per name;
- the environment it was started with (launch.py) again: what was refused
  at start-up cannot have come in later.

Each problem is one sentence naming the module or file and the place it came
from; rules.py turns them into SUITE-3 blockers.

What this cannot see (a blind red team, session 32): code that runs in the
process before the suite's and leaves nothing behind it. A sitecustomize.py
or `.pth` module planted in the root-owned virtualenv that patches pytest
with functions compiled from a string (file name `<string>`, as dataclasses'
and namedtuple's own are), then deletes its files and its sys.modules entry,
is indistinguishable here from generated code; so is the suite's own editable
install re-pointed, RECORD and all, at another copy of the package. Each
needs root's write to the virtualenv or the interpreter, which OWN-1 and
SUITE-4 keep root's; the check here is the net for what an installation
leaves there by mistake, and for what loads later, not a proof against root.
"""

from __future__ import annotations

import _imp
import gc
import importlib.util
import marshal
import os
import site
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pty_acceptance.decision import launch, native_code
from pty_acceptance.host import hostfs
from pty_acceptance.provenance import distributions
from pty_acceptance.provenance.distributions import Distribution
from pty_acceptance.spec import pins

REWRITER = "AssertionRewritingHook"  # pytest's loader of the test modules and conftest files
SOURCE_LIMIT = 16 << 20


def within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


@dataclass(frozen=True)
class Places:
    """Where code may come from, every path resolved (realpath)."""
    checkout: str
    conftest: str  # the root conftest.py
    acceptance: str
    suite_dirs: tuple[str, ...]  # the pty_acceptance package(s) the suite's editable install names
    prefix: str  # sys.prefix: the virtualenv
    venv: bool  # sys.prefix is not the interpreter's own (sys.base_prefix)
    site_dirs: tuple[str, ...]  # the virtualenv's site-packages
    stdlib_dirs: tuple[str, ...]  # the interpreter's standard library (lib-dynload is below it)
    not_stdlib: tuple[str, ...]  # below the standard library but not of it (its site-packages)

    def kind(self, path: str) -> str | None:
        """"checkout", "site", "stdlib" or "checkout-other" for a resolved path, None: none of them."""
        if within(path, self.acceptance) or path == self.conftest or any(within(path, d) for d in self.suite_dirs):
            return "checkout"
        if any(within(path, d) for d in self.site_dirs):
            return "site"
        if any(within(path, d) for d in self.not_stdlib):
            return None
        if any(within(path, d) for d in self.stdlib_dirs):
            return "stdlib"
        if within(path, self.checkout):
            return "checkout-other"
        return None


def stdlib_dirs() -> tuple[list[str], list[str]]:
    """(the interpreter's standard library directories, the directories below
    them that are not the standard library: site-packages, dist-packages)."""
    base = sys.base_prefix
    paths = sysconfig.get_paths(vars={"base": base, "platbase": base, "installed_base": base,
                                      "installed_platbase": base})
    dirs = list(dict.fromkeys(os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")))
    zipped = os.path.realpath(os.path.join(base, sys.platlibdir,
                                           f"python{sys.version_info[0]}{sys.version_info[1]}.zip"))
    not_std = [os.path.join(d, n) for d in dirs for n in ("site-packages", "dist-packages")]
    return dirs + [zipped], not_std


def places(checkout: Path, dists: Iterable[Distribution], prefix: str | None = None) -> Places:
    root = os.path.realpath(checkout)
    pfx = prefix or sys.prefix
    std, not_std = stdlib_dirs()
    own = [d for d in dists if d.key == pins.DISTRIBUTION]
    suite = [os.path.join(d, "pty_acceptance") for dist in own for d in distributions.editable_dirs(dist)]
    return Places(root, os.path.join(root, "conftest.py"), os.path.join(root, "acceptance"),
                  tuple(dict.fromkeys(suite)), os.path.realpath(pfx),
                  os.path.realpath(pfx) != os.path.realpath(sys.base_prefix),
                  tuple(distributions.site_dirs(pfx)), tuple(std), tuple(not_std))


@dataclass(frozen=True)
class Code:
    """One piece of code the process holds, and where it says it came from."""
    what: str  # "module pytest", "plugin ...", "function f (module x, not in sys.modules)"
    file: str | None  # None: built into the interpreter, or made in the process (no file)
    cached: str | None = None  # the module's bytecode cache (its spec)
    rewritten: bool = False  # loaded through pytest's assertion rewriting
    locations: tuple[str, ...] = ()  # a namespace package's directories
    code: types.CodeType | None = None  # a function of a rewritten module: its code, judged against the rewrite
    current: bool = True  # (a function) its module is the one sys.modules holds under its name


def _module_code(name: str, mod: object, what: str) -> Code | None:
    spec = getattr(mod, "__spec__", None)
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin in ("built-in", "frozen"):
        return None
    loader = type(getattr(spec, "loader", None)).__name__ if spec is not None else ""
    if spec is not None and origin is None:
        locations = tuple(str(p) for p in (getattr(spec, "submodule_search_locations", None) or ()))
        if locations:
            return Code(f"{what} {name} (a namespace package)", None, locations=locations)
    path = origin if isinstance(origin, str) else getattr(mod, "__file__", None)
    if not isinstance(path, str):
        if name == "__main__":
            return Code("the main program (__main__)", "")  # python -c, or stdin
        return None  # made in the process by code judged elsewhere (an extension's submodule)
    cached = getattr(spec, "cached", None) if spec is not None else None
    return Code(f"{what} {name}", path, cached if isinstance(cached, str) else None, loader == REWRITER)


def held(plugins: Iterable[tuple[str, object]] = (), compared: Callable[[str], bool] | None = None) -> list[Code]:
    """Everything the process holds now: sys.modules, `plugins` ((name,
    module) as pytest registered them), module objects and functions alive
    anywhere (gc). Every function of a rewritten module, and every function
    whose file `compared` names (the checkout's), is listed with its code, to
    be judged against what its source makes."""
    out: list[Code] = []
    seen_modules: set[int] = set()
    for name, mod in list(sys.modules.items()):
        seen_modules.add(id(mod))
        c = _module_code(name, mod, "module")
        if c is not None:
            out.append(c)
    for plugin_name, plugin in plugins:
        if isinstance(plugin, types.ModuleType) and id(plugin) not in seen_modules:
            seen_modules.add(id(plugin))
            c = _module_code(str(plugin_name), plugin, "plugin")
            if c is not None:
                out.append(c)
    files = {c.file for c in out if c.file}
    rewritten = {c.file for c in out if c.file and c.rewritten}
    for obj in gc.get_objects():
        if isinstance(obj, types.ModuleType) and id(obj) not in seen_modules:
            seen_modules.add(id(obj))
            c = _module_code(obj.__name__, obj, "module (not in sys.modules)")
            if c is not None:
                out.append(c)
                files.add(c.file or "")
        elif isinstance(obj, types.FunctionType):
            f = obj.__code__.co_filename
            if f in rewritten:  # every function of a rewritten module: what ran, not only its cache
                module = obj.__globals__.get("__name__", "?") if isinstance(obj.__globals__, dict) else "?"
                now = getattr(sys.modules.get(str(module)), "__dict__", None) is obj.__globals__
                out.append(Code(f"function {obj.__qualname__} (module {module})", f, rewritten=True,
                                code=obj.__code__, current=now))
            elif f.startswith("<frozen ") and not frozen_code(obj):
                module = obj.__globals__.get("__name__", "?") if isinstance(obj.__globals__, dict) else "?"
                out.append(Code(f"function {obj.__qualname__} (module {module}, code named {f[:80]!r})",
                                FORGED_FROZEN))
            elif f and not f.startswith("<"):
                module = obj.__globals__.get("__name__", "?") if isinstance(obj.__globals__, dict) else "?"
                if f not in files:
                    files.add(f)
                    out.append(Code(f"function {obj.__qualname__} (module {module})", f))
                if compared is not None and compared(f):  # what ran, not only its module's file and cache
                    out.append(Code(f"function {obj.__qualname__} (module {module})", f, code=obj.__code__))
    return out


FORGED_FROZEN = "<forged frozen>"  # Code.file of a function whose code claims a frozen module's name


def _codes(co: types.CodeType, into: set[int], objs: list[types.CodeType]) -> None:
    objs.append(co)
    into.add(id(co))
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            _codes(c, into, objs)


_FROZEN: dict[str, list[types.CodeType]] = {}


def frozen_code(fn: types.FunctionType) -> bool:
    """Whether a function whose code is named `<frozen X>` is the frozen
    module's own: its globals are a frozen module's namespace and its code is
    one of the code objects that module was frozen with (a patch compiled
    under a frozen name, whatever globals it was given, is not)."""
    for key, mod in list(sys.modules.items()):
        if getattr(mod, "__dict__", None) is not fn.__globals__:
            continue
        spec = getattr(mod, "__spec__", None)
        names = (key, getattr(spec, "name", None), getattr(getattr(spec, "loader_state", None), "origname", None))
        for name in dict.fromkeys(n for n in names if isinstance(n, str)):
            if name not in _FROZEN:
                found: list[types.CodeType] = []
                try:
                    if _imp.is_frozen(name):
                        _codes(_imp.get_frozen_object(name), set(), found)
                except ImportError:
                    pass
                _FROZEN[name] = found
            if any(fn.__code__ == c for c in _FROZEN[name]):
                return True
    return False


@dataclass
class Judge:
    places: Places
    dists: list[Distribution]
    pinned: Mapping[str, str]  # normalized name -> version (pins.load)
    rewriter: Rewriter | None = None
    _owners: dict[str, list[Distribution]] = field(default_factory=dict)
    _said: dict[str, str | None] = field(default_factory=dict)  # resolved file -> its problem
    # (source, rewritten) -> its code objects (pytest's rewrite, or the compile), or why none
    _code_of: dict[tuple[str, bool], tuple[list[types.CodeType], str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._owners = distributions.owners(self.dists)
        names = distributions.by_name(self.dists)
        self._twice = {k for k, v in names.items() if len(v) > 1}

    def dist_problem(self, dist: Distribution) -> str | None:
        if dist.key in self._twice:
            return f"{dist.said()} is one of {len(distributions.by_name(self.dists)[dist.key])} distributions " \
                   f"named {dist.key} in the virtualenv"
        if dist.key == pins.DISTRIBUTION:
            return None  # the suite's own, installed from the checkout
        want = self.pinned.get(dist.key)
        if want is None:
            return f"{dist.said()} is not a distribution {pins.FILE} pins"
        if want != dist.version:
            return f"{dist.said()} is not the version {pins.FILE} pins ({want})"
        if not dist.recorded:
            return f"{dist.said()} has no RECORD: its files cannot be checked"
        return None

    def file_problem(self, path: str) -> str | None:
        """Why the file at resolved `path` is not the suite's, the virtualenv's
        pinned distributions' or the standard library's (None: it is)."""
        if path in self._said:
            return self._said[path]
        kind = self.places.kind(path)
        said: str | None
        if kind in ("checkout", "stdlib"):
            said = None
        elif kind == "site" or (path in self._owners and within(path, self.places.prefix)):
            # the virtualenv's files, its console scripts (bin/pytest: __main__)
            # included, even where the virtualenv is in the checkout (.venv)
            said = self.recorded_problem(path)
        elif kind == "checkout-other":
            said = f"{path} is in the checkout {self.places.checkout} but neither its acceptance/ nor its " \
                   "root conftest.py"
        else:
            said = f"{path} is neither the checkout's, the virtualenv's ({self.places.prefix}) nor the " \
                   "interpreter's standard library"
        self._said[path] = said
        return said

    def recorded_problem(self, path: str) -> str | None:
        owners = self._owners.get(path, [])
        if not owners:
            return f"{path} is in the virtualenv but no distribution's RECORD lists it"
        for dist in owners:
            bad = self.dist_problem(dist)
            if bad:
                return f"{path}: {bad}"
            wrong = distributions.matches(path, dist.files[path])
            if wrong:
                return f"{path} ({dist.said()}): {wrong}"
        return None

    def code_problems(self, code: Code) -> list[str]:
        if code.file == "":
            return [f"{code.what} is not a file (python -c, or a program read from stdin)"]
        if code.code is not None and code.file:
            bad = (self.rewritten_function_problem(code.file, code.code) if code.rewritten
                   else self.compiled_function_problem(code.file, code.code))
            return [f"{code.what}: {bad}"] if bad else []
        if code.file == FORGED_FROZEN:
            return [f"{code.what} is none of the code its frozen module was built with (compiled in the "
                    "process under a frozen module's name)"]
        if code.file is None:
            out = []
            for loc in code.locations:
                where = os.path.realpath(loc)
                if self.places.kind(where) not in ("checkout", "site", "stdlib"):
                    out.append(f"{code.what}: its directory {where} is none of the suite's places")
            return out
        lexical = os.path.normpath(os.path.abspath(code.file))
        if self.places.kind(lexical) == "stdlib":
            # the interpreter's own place, as it loaded it (Debian's stdlib links its
            # sitecustomize.py to /etc/python3.X/): the interpreter's, links and all; a link that
            # leads out of it leads to a configuration file of the package's, as the package
            # installed it (a blind red team's thirteenth pass appended its patch to Debian's
            # /etc/python3.11/sitecustomize.py, which `python -I` still imports)
            real = os.path.realpath(lexical)
            if self.places.kind(real) != "stdlib":
                bad = _conffile_problem(real)
                if bad:
                    return [f"{code.what}: {lexical} leads to {real}: {bad}"]
            return self.cache_problems(code, lexical, follow=True)
        path = os.path.realpath(code.file)
        bad = self.file_problem(path)
        if bad:
            return [f"{code.what}: {bad}"]
        return self.cache_problems(code, path)

    def rewritten_function_problem(self, source: str, fn_code: types.CodeType) -> str | None:
        """None when `fn_code` is one of the code objects pytest's rewrite of
        `source` makes: what ran came from that source, whatever cache it was
        loaded from (a cache that removed itself after it ran included: a
        blind red team's second pass)."""
        return self._among(source, True, fn_code, f"pytest's rewrite of its source {source}")

    def compiled_function_problem(self, source: str, fn_code: types.CodeType) -> str | None:
        """None when `fn_code` is one of the code objects `source` compiles to
        (a blind red team's third pass: a forged .pyc of a module the early guard
        imports ran a patch compiled under the module's own file name, then
        removed itself, so no cache was left to compare)."""
        return self._among(source, False, fn_code, f"what its source {source} compiles to")

    def _among(self, source: str, rewritten: bool, fn_code: types.CodeType, made: str) -> str | None:
        found, why = self._made(source, rewritten)
        if why:
            return why
        if any(fn_code == c for c in found):
            return None
        return f"its code is none of {made}: what ran is not that source"

    def _module_rewrite(self, source: str) -> types.CodeType:
        """The module's own code of pytest's rewrite of `source` (ValueError: none, and why)."""
        found, why = self._made(source, True)
        if not found:
            raise ValueError(why)
        return found[0]

    def _made(self, source: str, rewritten: bool) -> tuple[list[types.CodeType], str | None]:
        """The code objects of pytest's rewrite of `source` (`rewritten`) or of its
        compile, the module's own first (read and made once), or why there are none."""
        key = (source, rewritten)
        if key not in self._code_of:
            found: list[types.CodeType] = []
            why = None
            if rewritten and self.rewriter is None:
                why = "its module was loaded through pytest's assertion rewriting, which the judge was not given"
            else:
                try:
                    src = hostfs.read_nofollow(source, SOURCE_LIMIT)
                    made = (self.rewriter.rewrite(src, source) if rewritten and self.rewriter is not None
                            else compile(src, source, "exec", dont_inherit=True))
                    _codes(made, set(), found)
                except (OSError, ValueError, SyntaxError, TypeError) as e:
                    why = (f"its source {source} cannot be {'rewritten' if rewritten else 'compiled'} to compare: "
                           f"{type(e).__name__}: {e}")
            self._code_of[key] = (found, why)
        return self._code_of[key]

    def cache_problems(self, code: Code, source: str, follow: bool = False) -> list[str]:
        if not code.cached or not code.file or not code.file.endswith(".py"):
            return []
        cached = os.path.realpath(code.cached)
        if os.path.dirname(cached) != os.path.realpath(os.path.join(os.path.dirname(source), "__pycache__")):
            return [f"{code.what}: its bytecode cache {cached} is not beside its source {source}"]
        if code.rewritten:
            bad = rewritten_pyc_problem(source, self.rewriter, lambda: self._module_rewrite(source))
            return [f"{code.what}: {bad}"] if bad else []
        bad = pyc_problem(source, cached, follow)
        return [f"{code.what}: {bad}"] if bad else []


def _conffile_problem(path: str) -> str | None:
    """Why `path` is not a configuration file of an installed package, as it installed it
    (None: it is)."""
    want = native_code.dpkg_conffiles().get(path)
    if want is None:
        return "no installed package lists it as its configuration file (dpkg's status)"
    try:
        got = native_code.file_md5(path)
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    return None if got == want else f"it is not as its package installed it (md5 {got}, dpkg lists {want})"


def pyc_problem(source: str, cached: str, follow: bool = False) -> str | None:
    """None unless the interpreter would run `cached` for `source` (its header
    matches the source) and it holds other code than `source` compiles to.
    `follow`: the source may be a link (the standard library's own)."""
    try:
        data = hostfs.read_nofollow(cached, SOURCE_LIMIT)
    except FileNotFoundError:
        return None  # nothing cached: the source itself was compiled
    except OSError as e:
        return f"its bytecode cache {cached} cannot be read: {e.strerror or e}"
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return None  # not loadable by this interpreter: the source was compiled
    try:
        if follow:
            with open(source, "rb") as f:
                src = f.read(SOURCE_LIMIT + 1)
        else:
            src = hostfs.read_nofollow(source, SOURCE_LIMIT)
        st = os.stat(source)
    except OSError as e:
        return f"its source {source} cannot be read: {e.strerror or e}"
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0:
        mtime, size = int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")
        if mtime != int(st.st_mtime) & 0xFFFFFFFF or size != st.st_size & 0xFFFFFFFF:
            return None  # stale: the interpreter compiled the source instead
    elif flags & 0b10 and importlib.util.source_hash(src) != data[8:16]:
        return None  # a checked hash-based cache that does not match: not used
    return _compared(f"its bytecode cache {cached}", data, lambda: compile(src, source, "exec", dont_inherit=True),
                     f"(which the interpreter runs for {source}) holds other code than that source compiles to")


def _compared(what: str, data: bytes, want: Callable[[], types.CodeType], differs: str) -> str | None:
    """None when the code a cache file holds (after its 16-byte header) is the
    code `want` makes; else `what` and why not."""
    try:
        ran = marshal.loads(data[16:])
        made = want()
    except (ValueError, EOFError, TypeError, SyntaxError) as e:
        return f"{what} cannot be compared with its source: {type(e).__name__}: {e}"
    return None if ran == made else f"{what} {differs}"


@dataclass(frozen=True)
class Rewriter:
    """pytest's assertion rewriting, as the gate hands it over (gate/plugin.py:
    only gate/ imports pytest): the cache file name's tail beside a source
    and the code pytest makes of a source."""
    pyc_tail: str
    rewrite: Callable[[bytes, str], types.CodeType]


def rewritten_pyc_problem(source: str, rw: Rewriter | None,
                          rewritten: Callable[[], types.CodeType] | None = None) -> str | None:
    """None unless pytest's assertion-rewriting cache for `source` is one
    pytest would load (its header: magic, flags 3, the source's hash) and it
    holds other code than pytest's rewrite of that source (pytest checks the
    source's hash, never the code; `rewritten`: that rewrite where the caller
    has it already). Without `rw` a cache pytest would load cannot be judged:
    that is the problem."""
    if rw is None:
        return "loaded through pytest's assertion rewriting, which the judge was not given to compare its cache"
    cached = os.path.join(os.path.dirname(source), "__pycache__",
                          os.path.basename(source)[:-3] + rw.pyc_tail)
    try:
        data = hostfs.read_nofollow(cached, SOURCE_LIMIT)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"its assertion-rewriting cache {cached} cannot be read: {e.strerror or e}"
    try:
        src = hostfs.read_nofollow(source, SOURCE_LIMIT)
    except OSError as e:
        return f"its source {source} cannot be read: {e.strerror or e}"
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER or data[4:8] != b"\x03\x00\x00\x00" \
            or data[8:16] != importlib.util.source_hash(src)[:8]:
        return None  # pytest would not load it: it rewrote the source
    return _compared(f"its assertion-rewriting cache {cached}", data, rewritten or (lambda: rw.rewrite(src, source)),
                     f"(which pytest runs for {source}) holds other code than pytest's rewrite of that source")


@dataclass(frozen=True)
class Process:
    """What is judged of this process: the code it holds, its import path, the
    environments it was started with and has now (launch.environments)."""
    code: tuple[Code, ...]
    path: tuple[str, ...]
    environments: tuple[Mapping[str, str], ...]
    rewriter: Rewriter | None = None
    native: tuple[native_code.Mapping, ...] = ()  # the files it has mapped executable


def this_process(plugins: Iterable[tuple[str, object]] = (), rewriter: Rewriter | None = None,
                 checkout: Path | None = None) -> Process:
    """This process as it is now; `plugins`: what pytest registered;
    `rewriter`: pytest's assertion rewriting (the gate's); every function of a
    file of `checkout`'s suite (acceptance/, the root conftest.py) or of the
    pty_acceptance package that is running is held with its code."""
    compared = None
    if checkout is not None:
        top = os.path.realpath(checkout)
        conftest, seen = os.path.join(top, "conftest.py"), {}
        # the checkout's acceptance/, and the package this module is of (the suite's
        # editable install may name another checkout's: its code ran here too)
        dirs = (os.path.join(top, "acceptance"), os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

        def compared(f: str) -> bool:
            if f not in seen:
                real = os.path.realpath(f)
                seen[f] = f.endswith(".py") and (any(within(real, d) for d in dirs) or real == conftest)
            return seen[f]
    return Process(tuple(held(plugins, compared)), tuple(sys.path), tuple(launch.environments()), rewriter,
                   tuple(native_code.this_process()))


def process_problems(judge: Judge, path: Iterable[str]) -> list[str]:
    """What is wrong with the process itself: the virtualenv, the user site,
    a cache prefix, sys.path, the .pth files, names given twice."""
    p, dists = judge.places, judge.dists
    out = []
    if not p.venv:
        out.append(f"the interpreter runs outside a virtualenv (sys.prefix {p.prefix}): the suite's "
                   "distributions come from its own, as tools/setup-target.sh makes it")
    else:
        cfg = os.path.join(p.prefix, "pyvenv.cfg")
        try:
            text = hostfs.read_file(cfg, 1 << 16).decode("utf-8", errors="replace")
        except OSError as e:
            text = ""
            out.append(f"{cfg} cannot be read: {e.strerror or e}")
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "include-system-site-packages" and value.strip().lower() == "true":
                out.append(f"the virtualenv {p.prefix} includes the system's site-packages ({cfg})")
    if site.ENABLE_USER_SITE:
        out.append(f"the user site is on (site.ENABLE_USER_SITE): {site.getusersitepackages()} would be "
                   "imported from")
    if _imp.check_hash_based_pycs != "default":
        out.append(f"the interpreter checks hash-based bytecode caches {_imp.check_hash_based_pycs!r} "
                   "(--check-hash-based-pycs): a cache that does not match its source may be what ran")
    exe = os.path.realpath("/proc/self/exe")
    home = os.path.dirname(os.path.dirname(exe))
    if os.path.realpath(sys.base_prefix) != home or os.path.realpath(sys.base_exec_prefix) != home:
        out.append(f"the standard library is taken from {sys.base_prefix} (the virtualenv's home), not from the "
                   f"installation of the interpreter that runs ({exe}, {home})")
    for name in ("sitecustomize", "usercustomize"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__name__", None) != name:
            out.append(f"sys.modules[{name!r}] is another module ({getattr(mod, '__name__', '?')!r}): what "
                       "site ran at start-up hid itself")
    if sys.pycache_prefix is not None:
        out.append(f"a bytecode cache prefix is in effect ({sys.pycache_prefix}: PYTHONPYCACHEPREFIX or "
                   "-X pycache_prefix): the bytecode that runs is not beside the sources")
    for entry in path:
        where = os.path.realpath(entry or os.getcwd())
        if p.kind(where) in ("checkout", "site", "stdlib") or where == p.checkout \
                or any(where == os.path.dirname(d) for d in p.suite_dirs):
            continue
        if p.venv and where == os.path.join(p.prefix, "bin"):
            continue  # a console script's own directory (.venv/bin/pytest): what loads from it is judged
        out.append(f"sys.path holds {where}: neither the checkout, the virtualenv's site-packages nor the "
                   "standard library")
    for pth in distributions.pth_files(p.site_dirs):
        bad = judge.recorded_problem(pth)
        if bad:
            out.append(f"the start-up file {bad} (site runs its import lines, and puts its directories on "
                       "sys.path)")
    for name, found in distributions.by_name(dists).items():
        if len(found) > 1:
            out.append(f"{len(found)} distributions are named {name}: " + ", ".join(
                f"{d.said()} ({d.where})" for d in found))
    return out


def problems(checkout: Path, process: Process) -> list[str]:
    """Everything about `process` (this_process) that is not the reviewed
    suite's, its pinned distributions' or the interpreter's (SUITE-3)."""
    try:
        pinned = pins.load(checkout)
        pins_error = None
    except pins.PinsError as e:
        pinned, pins_error = {}, str(e)
    dists = distributions.installed(places(checkout, []).site_dirs)
    p = places(checkout, dists)
    out = [pins_error] if pins_error else []
    out += launch.process_problems()  # at the decision too: a tracer may attach after start-up
    out += launch.environment_problems(process.environments)
    judge = Judge(p, dists, pinned, process.rewriter)
    out += process_problems(judge, process.path)
    for code in process.code:
        out += [f"not the suite's code: {bad}" for bad in judge.code_problems(code)]
    out += native_code.problems(process.native, lambda f: p.kind(os.path.realpath(f)) == "site",
                                judge.recorded_problem)
    return list(dict.fromkeys(out))
