"""What the suite's process may not be started with (SUITE-3): the
environment variables that change what Python or the dynamic loader loads, or
which bus the suite talks to, and the command-line options that load code the
checkout does not hold or run a host program from the operator's PATH.

Refused at start-up (startup.pytest_cmdline_main, the root conftest's own
hook: no plugin can switch it off), before any test, before anything an
earlier run left is removed, before the bus is opened: `ERROR: NOT READY:
SUITE-3: ...`, exit status 4, no marker (the marker removal itself still
happens: MARK-4). Judged again when the marker is decided (a blocker then).

The environment judged is the one the process was started with
(/proc/self/environ: what execve gave it, which a plugin that pops its own
variable from os.environ does not change) together with os.environ now.

Refused, and why:
- every `LD_*` variable (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, ...: ld.so
  loads or searches code by them), GLIBC_TUNABLES (the loader's and libc's
  tunables), GCONV_PATH (iconv modules dlopen()ed from there), OPENSSL_CONF,
  OPENSSL_MODULES, OPENSSL_ENGINES (Python's hashlib and ssl load OpenSSL,
  which loads the providers and engines these name);
- PYTHONPATH (directories imported from before the virtualenv),
  PYTHONHOME and PYTHONPLATLIBDIR (another standard library),
  PYTHONUSERBASE (another user site), PYTHONPYCACHEPREFIX (bytecode
  cached elsewhere, run instead of the sources), PYTHONSTARTUP (a file run
  by an interactive interpreter: never wanted here), PYTHONINSPECT (the
  interpreter turns interactive when pytest ends: the exit status a caller
  reads is not the gate's, and on a terminal a root prompt waits),
  PYTHONBREAKPOINT (code that breakpoint() imports and runs),
  PYTHONWARNINGS (a filter's category is imported by its module name), and
  every other PYTHON* variable but the few that change no code
  (PYTHON_ALLOWED: PYTHONNOUSERSITE and PYTHONSAFEPATH only take places
  away; PYTHONDONTWRITEBYTECODE, PYTHONUNBUFFERED, PYTHONHASHSEED,
  PYTHONIOENCODING, PYTHONUTF8, PYTHONFAULTHANDLER, ... change no code
  that runs); PYTHONOPTIMIZE is invocation.py's (checks compiled away);
- PYTEST_PLUGINS (plugins loaded by name), PYTEST_ADDOPTS (options added to
  the command line unseen: the command line the operator typed is the run's
  whole invocation), PYTEST_DEBUG (pytest's own trace of every hook,
  host text unescaped) and every other PYTEST_* variable but those pytest
  sets itself or that only move pytest's temporary directory or colours
  (PYTEST_ALLOWED);
- DBUS_SYSTEM_BUS_ADDRESS, DBUS_SESSION_BUS_ADDRESS, DBUS_STARTER_ADDRESS
  and DBUS_STARTER_BUS_TYPE: which bus answers as systemd (host/bus.py
  opens the system bus at its fixed path whatever they say; a library that
  honoured them would talk to whoever listens there).

The clean start: a run on the suite judges only in the form it starts
itself in, `python -I -u -m pytest ARGS` (the virtualenv's interpreter,
isolated, unbuffered: no PYTHON* variable read, no user site, nothing put first on
sys.path) with the suite's environment (clean_environment: the names in
KEPT as the operator had them, PATH, LANG and HOME the suite's, nothing
else). `pytest ARGS` and `python [options] -m pytest ARGS` on the suite
start again in it (the early guard's execve, gate/early.py, once its
refusals have found nothing); a run in any other form (pytest.main called by
a program, `python -m runpy pytest`, ...) is refused at start-up
(clean_form_problems). So whatever the operator's environment or the
interpreter's options hold beyond what is refused by name below never
reaches the process that judges: an allow-list, where the refusals are a
list of what was found (blind red teams' rounds four to seven, issue 38).

Options: `-p NAME` (a plugin loaded by name; `-p no:NAME` is reporting.py's),
`--pdbcls` (a debugger class imported by name), `--pdb` and `--trace` (a
debugger that stops the run and lets it be changed while it runs), and
pytester's `--lsof` (runs `lsof` from the operator's PATH, as root, around
every test; pytester is not loaded in an acceptance run at all, the option
is refused should it be).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping

from pty_acceptance.host import hostfs

LIMIT = 1 << 20  # /proc/self/environ: execve allows a few MiB at most; more is not read

REFUSED = {
    "GLIBC_TUNABLES": "glibc's tunables, read by the dynamic loader",
    "GCONV_PATH": "iconv modules glibc loads (dlopen) from there",
    "OPENSSL_CONF": "an OpenSSL configuration: it loads the providers and engines it names (Python's "
                    "hashlib and ssl use OpenSSL)",
    "OPENSSL_MODULES": "where OpenSSL loads its providers from",
    "OPENSSL_ENGINES": "where OpenSSL loads its engines from",
    "PYTHONPATH": "directories Python imports from before the virtualenv",
    "PYTHONHOME": "another standard library for the interpreter",
    "PYTHONPLATLIBDIR": "another standard library directory for the interpreter",
    "PYTHONUSERBASE": "another user site directory to import from",
    "PYTHONPYCACHEPREFIX": "a cache directory whose compiled bytecode Python runs instead of the sources",
    "PYTHONSTARTUP": "a file an interactive interpreter runs first",
    "PYTHONINSPECT": "the interpreter turns interactive when pytest ends: the exit status is no longer "
                     "the gate's, and on a terminal a root prompt waits",
    "PYTHONBREAKPOINT": "code that breakpoint() imports and runs",
    "PYTHONWARNINGS": "a warning filter's category is imported by its module name",
    "PYTEST_PLUGINS": "plugins pytest loads by name",
    "PYTEST_ADDOPTS": "options added to the command line unseen (the run's invocation is the command "
                      "line as typed)",
    "PYTEST_DEBUG": "pytest's trace of every hook call, host text unescaped (SUITE-4)",
    "DBUS_SYSTEM_BUS_ADDRESS": "which bus answers as systemd",
    "DBUS_SESSION_BUS_ADDRESS": "which bus a D-Bus library talks to",
    "DBUS_STARTER_ADDRESS": "which bus a D-Bus library talks to",
    "DBUS_STARTER_BUS_TYPE": "which bus a D-Bus library talks to",
}
PREFIXES = {
    "LD_": "the dynamic loader loads or searches code by it",
    "PYTHON": "an interpreter setting the suite does not know to change no code",
    "_PYTHON": "the interpreter's build settings (_PYTHON_SYSCONFIGDATA_NAME names a module sysconfig "
               "imports: a blind red team's sixth pass)",
    "SYSTEMD_": "systemd's tools read it (SYSTEMD_OFFLINE=1 has systemctl answer for units it never asked "
                "the manager about: a blind red team's seventh pass)",
    "SYSTEMCTL_": "systemctl reads it",
    "PYTEST_": "a pytest setting the suite does not know to change nothing it judges",
}
# systemd's variables that change nothing systemctl answers: the pid systemd sets for every
# service process (a run started from a unit has it), and how its output is paged and coloured.
SYSTEMD_ALLOWED = frozenset({
    "SYSTEMD_EXEC_PID", "SYSTEMD_PAGER", "SYSTEMD_PAGERSECURE", "SYSTEMD_LESS", "SYSTEMD_LESSCHARSET",
    "SYSTEMD_COLORS", "SYSTEMD_URLIFY",
})
# Interpreter settings that change no code that runs (or only take places away).
PYTHON_ALLOWED = frozenset({
    "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONNOUSERSITE", "PYTHONSAFEPATH",
    "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONCOERCECLOCALE", "PYTHONFAULTHANDLER",
    "PYTHONTRACEMALLOC", "PYTHONMALLOC", "PYTHONMALLOCSTATS", "PYTHONDEVMODE", "PYTHONASYNCIODEBUG",
    "PYTHONNODEBUGRANGES", "PYTHONINTMAXSTRDIGITS", "PYTHONPROFILEIMPORTTIME", "PYTHON_COLORS",
    "PYTHONOPTIMIZE",  # judged by invocation.py: checks compiled away, a blocker of its own
})
# What pytest sets itself (its version, the test running), and where its
# temporary directory goes and how its colours look.
PYTEST_ALLOWED = frozenset({"PYTEST_VERSION", "PYTEST_CURRENT_TEST", "PYTEST_DEBUG_TEMPROOT", "PYTEST_THEME",
                            "PYTEST_THEME_MODE"})
SHOWN = 200  # characters of a refused value shown

# The clean start (module docstring): the interpreter's options, and the environment.
CLEAN_START = ("-I", "-u", "-m", "pytest")  # -u: its output reaches a pipe or a file as it is written
RESTARTED = "PTY_ACCEPTANCE_RESTARTED"  # set by the early guard's start again: never twice
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLEAN_LANG = "C.UTF-8"
# Kept as the operator had them: they name the terminal and how output looks, who ran the
# run, and the unit it runs in; none names code, a file or a directory to load from.
KEPT = frozenset({"TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "PY_COLORS", "USER", "LOGNAME",
                  "SUDO_USER", "SUDO_UID", "SUDO_GID", "SUDO_COMMAND", "INVOCATION_ID", "SYSTEMD_EXEC_PID",
                  "JOURNAL_STREAM"})
_TERM = re.compile(r"[A-Za-z0-9.+_-]{1,64}")  # a terminal's name (terminfo looks it up by name)
# Set by the clean start whatever the operator had: OpenSSL (Python's hashlib and ssl) reads
# no configuration file, so none names a provider or engine module for it to load (a blind red
# team's eighth pass: /etc/ssl/openssl.cnf naming a module whose constructor patched the run).
PINNED = {"OPENSSL_CONF": "/dev/null"}
PRELOAD = "/etc/ld.so.preload"  # the dynamic loader loads what it names into every process


def why_refused(name: str) -> str | None:
    """Why variable `name` is refused (None: it is not)."""
    if name in REFUSED:
        return REFUSED[name]
    if name in PYTHON_ALLOWED or name in PYTEST_ALLOWED or name in SYSTEMD_ALLOWED:
        return None
    for prefix, why in PREFIXES.items():
        if name.startswith(prefix):
            return why
    return None


# the one name of exec_environment()'s answer when the environment cannot be read whole: no
# environment can hold it (a blind red team's thirteenth pass gave the kept variables over a
# MiB: the clean start, not finding its own carried value, started itself again and again)
UNREADABLE = "\0unreadable"


def exec_environment() -> dict[str, str]:
    """The environment this process was started with (/proc/self/environ),
    whatever os.environ says now; {UNREADABLE: why} where it cannot be read whole
    (environment_problems refuses it)."""
    try:
        data = hostfs.read_file(f"/proc/{os.getpid()}/environ", LIMIT)  # /proc/self is a link
    except OSError as e:
        return {UNREADABLE: str(e)}
    out = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            out[name.decode(errors="surrogateescape")] = value.decode(errors="surrogateescape")
    return out


def environments() -> list[Mapping[str, str]]:
    """The environments judged: the one execve gave, and os.environ now."""
    return [exec_environment(), os.environ]


def environment_problems(sources: Iterable[Mapping[str, str]]) -> list[str]:
    """One sentence per refused variable set in any of `sources` (an empty
    value changes nothing and is not refused)."""
    seen: dict[str, str] = {}
    out = []
    for env in sources:
        if UNREADABLE in env:
            out.append(f"the environment the process was started with cannot be read whole "
                       f"({env[UNREADABLE][:SHOWN]}): refused before anything ran")
            continue
        for name, value in env.items():
            if value and name not in seen and why_refused(name) and PINNED.get(name) != value:
                seen[name] = value
    for name in sorted(seen):
        value = seen[name]
        shown = value if len(value) <= SHOWN else value[:SHOWN] + "..."
        out.append(f"the environment sets {name}={shown!r}: {why_refused(name)}; refused before anything "
                   "ran (unset it)")
    return out


def _home() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_dir or "/"
    except KeyError:
        return "/"


def clean_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of the clean start, from the operator's `env`."""
    out = {k: v for k, v in env.items() if k in KEPT and (k != "TERM" or _TERM.fullmatch(v))}
    out.update(PATH=CLEAN_PATH, LANG=CLEAN_LANG, HOME=_home(), **PINNED)
    return out


def clean_form_problems(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """How this process differs from the clean start (empty: it is in it):
    `argv` is sys.orig_argv, `env` the environment it was started with."""
    argv = list(getattr(sys, "orig_argv", [])) if argv is None else argv
    env = exec_environment() if env is None else env
    out = []
    if tuple(argv[1:1 + len(CLEAN_START)]) != CLEAN_START or not sys.flags.isolated:
        shown = " ".join(argv[1:1 + len(CLEAN_START)])[:SHOWN]
        out.append(f"the interpreter was started with {shown!r}, not {' '.join(CLEAN_START)!r}")
    clean = dict(clean_environment(env), **({RESTARTED: env[RESTARTED]} if RESTARTED in env else {}))
    if env != clean:
        names = sorted(set(env) ^ set(clean) | {k for k in env if k in clean and env[k] != clean[k]})
        more = f" and {len(names) - 12} more" if len(names) > 12 else ""
        out.append(f"its environment is not the suite's (it differs in {', '.join(names[:12])}{more})")
    return out


def clean_start(args: list[str], carried: str) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the clean start of a pytest run with `args`;
    `carried`: what the markers' removal said (marker_paths.Removal.carried),
    words for the report."""
    env = dict(clean_environment(os.environ), **{RESTARTED: carried})
    return [sys.executable, *CLEAN_START, *args], env


# pytest's options that write a file where they are told (as root)
OUTPUT_OPTIONS = ("--log-file", "--junitxml", "--junit-xml", "--debug", "--basetemp", "--report-log", "--resultlog")


def _names_a_marker(value: str) -> bool:
    """`value`, as written or through its links, ends in the marker's name: a
    file written there could pass for a marker (MARK-2 verifies its content)."""
    from pty_acceptance.spec.inventory import MARKER_NAME

    name = MARKER_NAME
    try:
        real = os.path.realpath(value)
    except (OSError, ValueError):
        real = value
    return any(os.path.basename(os.path.normpath(v)) == name for v in (value, real) if v)


SHORT_WITH_VALUE = "kmrWcpo"  # pytest's short options that take a value (clustered after flags: -qpX)


def short_values(args: Iterable[str], letter: str | None, long: str = "") -> list[str]:
    """The values of the short option `letter` (None: none) and of `long`, when given, in a
    command line as typed: `-p X`, `-pX`, clustered after flags (`-qpX`,
    `-qp X`), `--long X`, `--long=X`. pytest allows no abbreviation."""
    out, items = [], list(args)
    i = 0
    while i < len(items):
        a = items[i]
        if a == "--":
            break
        if long and (a == long or a.startswith(long + "=")):
            if a == long:
                i += 1
                out.append(items[i] if i < len(items) else "")
            else:
                out.append(a[len(long) + 1:])
        elif a.startswith("-") and not a.startswith("--") and len(a) > 1:
            for j in range(1, len(a)):
                if a[j] not in SHORT_WITH_VALUE:
                    continue
                value = a[j + 1:]
                if not value:
                    i += 1
                    value = items[i] if i < len(items) else ""
                if a[j] == letter:
                    out.append(value)
                break
        i += 1
    return out


def plugin_args(args: Iterable[str]) -> list[str]:
    """The values of every `-p` in a command line as typed (`-p X`, `-pX`, `-qpX`)."""
    return short_values(args, "p")


def option_problems(args: Iterable[str], option: object) -> list[str]:
    """`args`: the command line as typed (pytest's invocation_params.args,
    which a plugin editing config.option does not change); `option`: the
    parsed options."""
    out, args = [], list(args)
    named = [p for p in plugin_args(args) if not p.startswith("no:")]
    named += [p for p in (getattr(option, "plugins", None) or []) if not p.startswith("no:") and p not in named]
    if named:
        out.append("-p " + " -p ".join(named) + ": loads plugins by name, code the checkout does not hold "
                   "(only -p no:cacheprovider may be given)")
    warned = short_values(args, "W", "--pythonwarnings")
    if warned:
        out.append("-W/--pythonwarnings " + " ".join(warned) + ": pytest imports a warning filter's "
                   "category by its module name before the suite's code loads (a module that runs code "
                   "as it is imported, e.g. tkinter.__main__ running $HOME/.Tk.py)")
    if option is None:  # the early guard's (no parse yet): what the run guard refuses from its first parse,
        # refused before pytest reads a configuration file's addopts and imports its -p plugins
        # (a blind red team's fifth pass); the run guard's is invocation.configuration_problems
        other = [f"-c {v}" for v in short_values(args, "c", "--config-file")] + [
            f"{name} {v}" for name in ("--rootdir", "--confcutdir") for v in short_values(args, None, name)]
        if other:
            out.append(", ".join(other) + ": another configuration or root than the checkout's, whose "
                       "addopts pytest applies (its -p plugins imported) before any of the suite's code")
    written = [f"{name} {v}" for name in OUTPUT_OPTIONS for v in short_values(args, None, name)
               if _names_a_marker(v)]
    if written:  # a blind red team's seventh pass: --log-file with a marker's lines as its format
        out.append(", ".join(written) + ": pytest would write a file of its own at a marker path")
    overrides = short_values(args, "o", "--override-ini") if option is None else []
    if overrides:  # the early guard's (no parse yet); the run guard's is invocation.configuration_problems
        out.append("-o/--override-ini changes the project's configuration: " + " ".join(overrides) +
                   " (and filterwarnings imports a category by its module name before the suite's code loads)")
    if getattr(option, "usepdb_cls", None):
        out.append(f"--pdbcls {':'.join(option.usepdb_cls)}: a debugger class imported by name")  # type: ignore[attr-defined]
    if getattr(option, "usepdb", False) or getattr(option, "trace", False):
        out.append("--pdb/--trace: a debugger would stop the run and let it be changed while it runs")
    if getattr(option, "lsof", False):
        out.append("--lsof: pytester runs lsof from the operator's PATH, as root, around every test")
    return out


def interpreter_problems() -> list[str]:
    """The interpreter's own options the environment did not set (its
    variables are environment_problems'): `-i` (an interactive prompt after
    pytest, exit 0), `-X pycache_prefix` (bytecode from another tree) and `-W`
    (categories imported by module name before the site module, so before any
    of the suite's code: a documented limit, as `python -S` is, docs/operator.md;
    what ran cannot be undone, but the run is refused, never judged)."""
    out = []
    try:  # the program the clean start exec's (sys.executable, which CPython takes from argv[0])
        named, running = os.stat(sys.executable), os.stat(f"/proc/{os.getpid()}/exe")
        same = (named.st_dev, named.st_ino) == (running.st_dev, running.st_ino)
    except (OSError, ValueError):
        same = False
    if not same:
        out.append(f"the interpreter's name {sys.executable!r} (argv[0]) is not the program this process runs: "
                   "the clean start would exec what that name leads to (a blind red team's fifteenth pass named "
                   "a script of its own, `exec -a`); refused (start the virtualenv's python or pytest by its path)")
    if sys.flags.inspect and not os.environ.get("PYTHONINSPECT"):  # PYTHONINSPECT: environment_problems
        out.append("the interpreter runs with -i: after pytest it enters an interactive prompt, root's, which "
                   "exits 0 at the end of its input whatever the verdict (a blind red team's fifth pass); "
                   "refused (start pytest without it)")
    if sys.pycache_prefix and not os.environ.get("PYTHONPYCACHEPREFIX"):  # the variable: environment_problems
        out.append(f"the interpreter runs with -X pycache_prefix={sys.pycache_prefix}: bytecode, pytest's "
                   "rewritten test modules and the suite's own among them, is read from another tree than "
                   "the checkout's (a blind red team's sixth pass); refused (start pytest without it)")
    if not sys.warnoptions or os.environ.get("PYTHONWARNINGS"):
        return out
    return out + [f"the interpreter runs with warning options {' '.join(sys.warnoptions)!r} (python -W): a "
            "filter's category is imported by its module name before any of the suite's code; refused "
            "(start pytest without them)"]


_first: str | None = None  # the directory Python puts first on sys.path, as read at the start


def first_path_problems(argv: list[str] | None = None) -> list[str]:
    """The directory Python puts first on sys.path for this program (`-m` and
    `-c`: the working directory; a script: its own directory), unless -P or
    PYTHONSAFEPATH: it must be root's alone, or a module put there (pdb.py,
    runpy.py, ...) is imported before the standard library's (a blind red
    team's seventh pass: a pdb.py in a directory others may write, imported by
    pytest, turned a failing run READY)."""
    global _first
    if sys.flags.safe_path:
        return []
    if _first is None or argv is not None:  # read once, at the process's start (the early guard's call):
        argv = list(getattr(sys, "orig_argv", [])) if argv is None else argv  # a later chdir moves nothing
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        _first = os.getcwd() if any(a.startswith(("-m", "-c")) for a in argv[1:]) or script is None else \
            os.path.dirname(os.path.realpath(script))
    first = _first
    try:
        st = os.lstat(first)
    except FileNotFoundError:
        return []  # no such script: Python stops at it
    except OSError as e:
        return [f"the directory Python puts first on sys.path ({first}) cannot be read ({e.strerror})"]
    if st.st_uid == 0 and not st.st_mode & 0o022:
        return []
    return [f"Python puts {first} first on sys.path (python -m or -c started there, or a script there), a "
            "directory not root's alone: a module there (pdb.py, runpy.py, ...) would be imported before the "
            "standard library's; start pytest from a directory root's alone, or with python -P"]


def preload_problems(path: str = PRELOAD) -> list[str]:
    """A dynamic loader preload file that names anything: the loader loads it
    into every process, this one too, before any of its code (a blind red
    team's eighth pass named the class beside OpenSSL's configuration)."""
    try:
        data = hostfs.read_file(path, LIMIT)
    except FileNotFoundError:
        return []
    except OSError as e:
        return [f"{path} cannot be read ({e.strerror}): what the dynamic loader loads into this process "
                "cannot be told"]
    if not data.split():
        return []
    return [f"{path} names {len(data.split())} libraries the dynamic loader loads into every process, this "
            "one too, before any of its code: code the suite does not judge; refused (empty it for the run)"]


def process_problems() -> list[str]:
    """What makes this process's own records or its own calls not its own (a blind red
    team's fourteenth pass): a /proc of another pid namespace (reads of /proc/<getpid()> then
    judge another process: the native code of a decoy), a tracer (one that changes what its
    system calls do and return: strace's inject made the marker's unlink a no-op), or more
    seccomp filters than PID 1 carries (the fifteenth pass: a filter of the starter's)."""
    pid = os.getpid()
    try:
        seen = os.readlink("/proc/self")
    except OSError as e:
        return [f"/proc/self cannot be read ({e.strerror}): this process's own records cannot be told apart "
                "from another's; refused"]
    if seen != str(pid):
        return [f"/proc calls this process {seen}, not {pid}: it is another pid namespace's /proc, whose "
                f"/proc/{pid} is another process; refused (start the run where /proc is its own namespace's)"]
    try:
        status = hostfs.read_file(f"/proc/{pid}/status", LIMIT).decode("utf-8", "replace")
    except OSError as e:
        return [f"/proc/{pid}/status cannot be read ({e.strerror}); refused"]
    tracer = next((line.split(":", 1)[1].strip() for line in status.splitlines()
                   if line.startswith("TracerPid:")), "?")
    if tracer != "0":
        return [f"this process is traced by pid {tracer}: a tracer may change what its system calls do and "
                "return (the marker's removal among them); refused"]
    try:
        init = hostfs.read_file("/proc/1/status", LIMIT).decode("utf-8", "replace")
    except OSError as e:
        return [f"/proc/1/status cannot be read ({e.strerror}): whether a filter was put on this process's "
                "system calls cannot be told; refused"]
    ours, pid1 = _field(status, "Seccomp_filters"), _field(init, "Seccomp_filters")
    if ours is None or pid1 is None or ours > pid1:
        return [f"this process carries {ours} seccomp filters, PID 1 {pid1}: a filter its starter put on it "
                "may make system calls say what they did not do (a blind red team's fifteenth pass answered "
                "the marker's lookups ENOENT); refused (start the run without one)"]
    return []


def _field(status: str, name: str) -> int | None:
    """A number field of a /proc status text (None: missing or not a number)."""
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return int(value.strip()) if value.strip().isdigit() else None
    return None


def refused(args: Iterable[str], option: object) -> list[str]:
    """Everything this process was started with that it may not be (the
    environment, the interpreter's warning options, then the options, and any
    difference from the clean start): startup.py refuses the run on any."""
    out = (process_problems() + environment_problems(environments()) + interpreter_problems()
           + first_path_problems() + preload_problems() + option_problems(args, option))
    return out + [f"{'; '.join(clean)}: a run on the suite judges only in the clean start `python -I -u -m pytest` "
                  "with the suite's environment, which `pytest` and `python -m pytest` start again in themselves "
                  "(a program calling pytest.main, `python -m runpy pytest` and the like are not)"
                  for clean in [clean_form_problems()] if clean]
