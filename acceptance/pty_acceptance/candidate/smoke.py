"""PLUGIN-1: running the review's plugin smoke harness under the host's bun.

bun and the harness are the reviewed ones (inventory ``plugin.*``): each is
pinned by SHA-256 (``plugin.bun_sha256``, ``plugin.harness_sha256``, from the
review, never from the host). bun must be root-controlled (OWN-1's chain
check: a root-owned regular file no group or other may write, every directory
from / down to it likewise) and not elevated (no set-ID bit, no file
capabilities); preflight refuses a root service user before anything runs.

What runs is a cell of the suite's own (stage): a fresh root-owned 0755
directory holding a root-owned copy of the pinned bun bytes, mode 0711
(execute-only for the user: the kernel marks such a process non-dumpable, so
no other process of the user reaches its /proc/<pid>/cwd, fd, environ or
memory), a root-owned 0444 copy of the pinned harness bytes, and an empty
bunfig.toml. Both copies are hashed while they are written and again before
every run (check).

Each run (run) is a transient unit of its own (userunit.py: as the service
user, no supplementary groups, no new privileges, its cgroup killed and gone
before the run is judged, its output read from a pipe only the suite holds),
with a /tmp of its own (PrivateTmp=) into which the cell is bound read-only
and two fresh directories of the user, made for this run only, are bound
read-write: the working directory and HOME. On the host those two lie in a
root-owned 0700 directory of the run's scratch area, which no other process
of the user can enter; inside, every directory above them is the unit's own
private /tmp or root's. bun is started with ``--config=<the empty
bunfig.toml>`` (no bunfig.toml of the working directory), ``--no-env-file``
(no .env) and ``--no-install`` (no package fetched at run time); its global
configuration ($HOME/.bunfig.toml) is looked for in the fresh, empty HOME.
Environment fixed (PATH, HOME, LANG, TERM), stdin /dev/null, umask 077, a
deadline from the inventory.

What a run sees of the service user's own (view, View): nothing of its home
or trees. ProtectHome=tmpfs lays an empty read-only tmpfs over /home, /root
and /run/user (TemporaryFileSystem= over the user's home too where it lies
elsewhere), and at pilot_root and code_root the run sees, read-only, SCOPE-1's
root-owned copies of the source manifest's files (provenance/source_copy.py:
each read once by descriptor and copied as it was hashed) and nothing else.
So bun imports the reviewed plugin bytes: no file beside the manifest's (a
pty.tsx next to pty.ts) can be resolved, nothing the user changes after the
hashing is what runs, and no state the user keeps in its home steers a run.
Before any run the copies must be the reviewed source (their manifest is
source_manifest_sha256), and before each run they are hashed again.

A run's output is hostile: only its size and its last line (escaped by the
caller) are kept. What it left in its working directory and HOME is listed
and read by descriptor once the unit is gone (regular files with one link
only, size-bounded), then removed.

Each run is traced from its first instruction (host/userunit.py's gate: the
unit starts an execute-only copy of the host's Python, GATE_NAME in the
cell, which exec's bun only once root's strace follows it): the service
user's other processes can signal the run's (they are the user's), and a
watcher that kills what the harness left running before the suite looks
made a run that left a process behind read as clean (issue 37, red team
round seven). The trace says what happened (host/killtrace.py): a signal or
a SIGKILL from outside the run, a process whose end came after bun's, a
trace that cannot say, each fails the run.

A run passes only on evidence (judge): exit 0, nothing left running and
nothing outside the unit holding its output, its trace clean, the harness's own success report
in the form the inventory states (``plugin.success``: its last line, and the
result files one run writes), and no file bun would read as configuration in
its working directory or HOME afterwards.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import stat
from dataclasses import dataclass, field

from pty_acceptance import errors
from pty_acceptance.host import hostfs, scratch, userunit
from pty_acceptance.provenance.source_copy import SourceCopy
from pty_acceptance.spec.inventory import Plugin, PluginSuccess

OUTPUT_KEPT = 64 * 1024
RESULT_LIMIT = 256 * 1024
RESULT_FILES = 64
NAMES_LISTED = 10_000  # names read from a directory the user can fill (its workspace, the plugin directory)
TERM = "dumb"
PATH = "/usr/bin:/bin"
PLACEHOLDER = re.compile(r"\{(helper|workdir)\}")
# bounds of the reads below: the inventory's limits.artifact_bytes (bun, ~100 MB)
# and limits.file_bytes (the harness); these where no inventory is at hand
BUN_LIMIT = hostfs.Limit(256 << 20, "limits.artifact_bytes")
HARNESS_LIMIT = hostfs.Limit(32 << 20, "limits.file_bytes")
COPY_MODE, COPY_DIR_MODE = 0o444, 0o755
BUN_MODE = 0o711  # execute-only for the user: bun runs non-dumpable
BUN_NAME, CONFIG_NAME = "bun", "bunfig.toml"
GATE_NAME = userunit.GATE_NAME  # the cell's execute-only copy of the host's Python (userunit.copy_interpreter)
# where the run sees its cell, working directory, HOME and a staged helper:
# inside its own /tmp (PrivateTmp=), every directory above them the unit's or root's
CELL_INSIDE = "/tmp/pty-acceptance-cell"
WORK_INSIDE = "/tmp/pty-acceptance-work"
HOME_INSIDE = "/tmp/pty-acceptance-home"
# bun's own options that keep the user's files out of what runs (read from its
# source, src/cli/Arguments.zig): no bunfig.toml of the working directory, no .env, no
# package fetched at run time
BUN_OPTIONS = (f"--config={CELL_INSIDE}/{CONFIG_NAME}", "--no-env-file", "--no-install")
# what bun would read as configuration or code if it found it there: never in a
# run's working directory or HOME after the run (a plant names itself here)
BUN_READS = re.compile(r"^(bunfig\.toml|\.bunfig\.toml|\.env(\..*)?|node_modules|package\.json|"
                       r"tsconfig\.json|jsconfig\.json|bun\.lockb?|\.npmrc)$")


class HarnessRefused(errors.Refused):
    """PLUGIN-1 cannot run the harness safely on this host; the message says why."""


@dataclass
class Run:
    """One harness run: how its unit ended, and what it left in its working
    directory and HOME (name -> bytes, or why not read)."""
    label: str
    ended: userunit.Ended
    files: dict[str, bytes | str] = field(default_factory=dict)
    home: dict[str, bytes | str] = field(default_factory=dict)

    @property
    def argv(self) -> tuple[str, ...]:
        return self.ended.argv

    @property
    def last_line(self) -> str:
        """The output's last non-blank line (its last 400 bytes), decoded with
        replacement: host text, escaped where it is shown."""
        lines = [ln for ln in self.ended.output.splitlines() if ln.strip()]
        return (lines[-1][-400:] if lines else b"").decode("utf-8", "replace")


def _privilege_problem(path: str, what: str) -> str | None:
    """Why running `path` as the user could run with other privileges (or None)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{what} {path} does not exist"
    except OSError as e:
        return f"{what} {path} cannot be read: {e.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{what} {path} is a {hostfs.kind_of(st.st_mode)}, not a regular file"
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        bit = "set-user-ID" if st.st_mode & stat.S_ISUID else "set-group-ID"
        return (f"{what} {path} is {bit} (owner uid {st.st_uid}, group {st.st_gid}, mode "
                f"{stat.S_IMODE(st.st_mode):04o}): the harness would not run as the service user")
    try:
        os.getxattr(path, "security.capability", follow_symlinks=False)
        return f"{what} {path} carries file capabilities: the harness would run with them"
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Checked:
    """What preflight proved: the account, and the pinned harness's bytes."""
    account: pwd.struct_passwd
    bun: str      # evidence: "<sha256>  <path> (...)"
    harness: str  # evidence: the original's hash, owner and mode
    harness_bytes: bytes = field(repr=False)


def preflight(inv) -> Checked:
    """HarnessRefused (never a run) when the harness cannot run safely or is not the
    reviewed one: no bun, no harness, a root service user, an elevated bun, a
    bun that is not root-controlled, or either one not hashing to its pin."""
    p = inv.plugin
    try:
        acct = pwd.getpwnam(inv.service_user)
    except KeyError:
        raise HarnessRefused(f"the service user {inv.service_user!r} does not exist") from None
    if acct.pw_uid == 0 or acct.pw_gid == 0:
        raise HarnessRefused(f"the service user {inv.service_user!r} is uid {acct.pw_uid} gid "
                      f"{acct.pw_gid}: the harness is never run as root")
    bun_limit, harness_limit = limits(inv)
    bun = check_bun(p.bun, p.bun_sha256, bun_limit)
    data, harness = read_harness(p.harness, p.harness_sha256, harness_limit)
    return Checked(acct, bun, harness, data)


def limits(inv) -> tuple[hostfs.Limit, hostfs.Limit]:
    """(bun's bound, the harness's bound), from the inventory's limits."""
    return inv.limit("artifact_bytes"), inv.limit("file_bytes")


def _not_pinned(what: str, path: str, digest: str, key: str, pin: str) -> HarnessRefused:
    return HarnessRefused(f"{what} {path} hashes to {digest}, the inventory pins {pin} (plugin.{key}): "
                   f"not the reviewed {what}")


def _open(path: str, what: str, user_writable: bool = False) -> int:
    """`path` opened by the no-follow walk from /: a link anywhere, a FIFO or
    a device is refused, never opened (in the user's tree a hard link too)."""
    try:
        return hostfs.open_file(path, user_writable)
    except FileNotFoundError:
        raise HarnessRefused(f"{what} {path} does not exist") from None
    except hostfs.PathRefused as e:
        raise HarnessRefused(f"{what}: {e} (not followed)") from None
    except OSError as e:
        raise HarnessRefused(f"{what} {path} cannot be read: {e.strerror or e}") from None


def _pinned(path: str, what: str, key: str, pin: str, limit: hostfs.Limit, judge) -> os.stat_result:
    """`path` opened by the walk, its fstat judged (`judge` raises HarnessRefused), hashed
    by that descriptor (bounded) and compared with `pin` (plugin.<key>)."""
    fd = _open(path, what)
    try:
        st = os.fstat(fd)
        judge(st)
        digest = hostfs.sha256_fd_bounded(fd, limit, path)
    except hostfs.PathRefused as e:
        raise HarnessRefused(f"{what}: {e}") from None
    finally:
        os.close(fd)
    if digest != pin:
        raise _not_pinned(what, path, digest, key, pin)
    return st


def check_bun(path: str, pin: str, limit: hostfs.Limit = BUN_LIMIT) -> str:
    """bun root-controlled, not elevated, and hashing (by descriptor, bounded) to
    `pin`; evidence, or HarnessRefused. Run before every run: bun is run by path, so
    only a file no one but root can change stays what was hashed."""
    node = hostfs.Node.at(path)
    if node.st is None:
        raise HarnessRefused(f"bun {path} does not exist")
    problems = node.root_controlled_problems("regular file") + hostfs.chain_problems(path)
    if problems:
        raise HarnessRefused(f"bun {path} is not root-controlled (OWN-1's chain check: it is run by path "
                      f"after it is hashed): " + "; ".join(problems))
    problem = _privilege_problem(path, "bun")
    if problem:
        raise HarnessRefused(problem)

    pinned = (node.st.st_dev, node.st.st_ino)

    def same(st: os.stat_result) -> None:
        if (st.st_dev, st.st_ino) != pinned:
            raise HarnessRefused(f"bun {path} changed while it was checked")

    st = _pinned(path, "bun", "bun_sha256", pin, limit, same)
    return f"{pin}  {path} (root-owned, mode {stat.S_IMODE(st.st_mode):04o}, every directory root's; the pin)"


def read_harness(path: str, pin: str, limit: hostfs.Limit = HARNESS_LIMIT) -> tuple[bytes, str]:
    """The harness's bytes, read once by descriptor (bounded), hashing to `pin`;
    (bytes, evidence), or HarnessRefused. Its owner is evidence only: what runs is a
    root-owned copy of these bytes (stage_harness)."""
    fd = _open(path, "the harness", user_writable=True)  # the service user's file
    try:
        st = os.fstat(fd)
        data = hostfs.read_fd(fd, limit, path)  # closes fd
    except hostfs.PathRefused as e:
        raise HarnessRefused(f"the harness: {e}") from None
    except OSError as e:
        raise HarnessRefused(f"the harness {path} cannot be read: {e.strerror or e}") from None
    owner = f"uid {st.st_uid} gid {st.st_gid} mode {stat.S_IMODE(st.st_mode):04o}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != pin:
        raise _not_pinned("harness", f"{path} ({owner})", digest, "harness_sha256", pin)
    return data, f"{digest}  {path} ({owner}, read once by descriptor; the pin)"


@dataclass(frozen=True)
class Cell:
    """The suite's root-owned directory a run sees read-only at CELL_INSIDE:
    bun (0711) and the harness (0444), copies of the pinned bytes, an empty
    bunfig.toml (0444) and the gate (GATE_NAME, 0711)."""
    path: str
    harness_name: str
    bun_pin: str
    harness_pin: str

    def inside(self, name: str) -> str:
        return f"{CELL_INSIDE}/{name}"

    def argv(self, args: list[str]) -> tuple[str, ...]:
        return (self.inside(BUN_NAME), *BUN_OPTIONS, self.inside(self.harness_name), *args)

    def check(self, bounds: tuple[hostfs.Limit, hostfs.Limit] = (BUN_LIMIT, HARNESS_LIMIT)) -> str:
        """Before each run: both copies still root's, in their modes, and the pinned bytes."""
        bun = _check_copy(os.path.join(self.path, BUN_NAME), "bun", "bun_sha256", self.bun_pin, BUN_MODE,
                          bounds[0])
        harness = _check_copy(os.path.join(self.path, self.harness_name), "harness", "harness_sha256",
                              self.harness_pin, COPY_MODE, bounds[1])
        return f"bun copy {bun}; harness copy {harness}"


def _check_copy(path: str, what: str, key: str, pin: str, mode: int, limit: hostfs.Limit) -> str:
    def roots(st: os.stat_result) -> None:
        if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != mode or st.st_nlink != 1:
            raise HarnessRefused(f"the {what} copy {path} is uid {st.st_uid} mode {stat.S_IMODE(st.st_mode):04o} "
                          f"with {st.st_nlink} links, not root's {mode:04o} with one")

    _pinned(path, what, key, pin, limit, roots)
    return f"{pin}  {path}"


def _copy_pinned(src: str, dfd: int, name: str, mode: int, pin: str, key: str, limit: hostfs.Limit) -> None:
    """`src` (opened by the no-follow walk) copied into a new root-owned file
    `name` of `dfd`, hashed as it is written: not the pinned bytes, HarnessRefused."""
    fd = _open(src, "bun")
    out = os.open(name, hostfs.CREATE_FLAGS, 0o600, dir_fd=dfd)
    try:
        os.fchown(out, 0, 0)
        hostfs.check_size(fd, limit, src)
        h, done = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            done += len(chunk)
            if done > limit.value:
                raise HarnessRefused(f"bun {src} grew past {limit} while it was copied")
            h.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
        if h.hexdigest() != pin:
            raise _not_pinned("bun", src, h.hexdigest(), key, pin)
        os.fchmod(out, mode)
        os.fsync(out)
    except hostfs.PathRefused as e:
        raise HarnessRefused(f"bun: {e}") from None
    finally:
        os.close(out)
        os.close(fd)


def stage(checked: Checked, p: Plugin, bun_limit: hostfs.Limit = BUN_LIMIT) -> Cell:
    """The cell, in a fresh root-owned 0755 directory of the run's scratch area
    (not the user's: nothing in it or above it is the user's to swap);
    unstage removes it. bun is copied from its pinned original by descriptor
    (preflight proved it root-controlled), hashed as it is written."""
    name = os.path.basename(p.harness)
    d = scratch.make("pty-acceptance-cell-", mode=COPY_DIR_MODE)
    try:
        dfd = hostfs.open_dir(d)
        try:
            _copy_pinned(p.bun, dfd, BUN_NAME, BUN_MODE, p.bun_sha256, "bun_sha256", bun_limit)
            hostfs.create_at(dfd, name, checked.harness_bytes, COPY_MODE, owner=(0, 0))
            hostfs.create_at(dfd, CONFIG_NAME, b"", COPY_MODE, owner=(0, 0))
            userunit.copy_interpreter(dfd, GATE_NAME)
        finally:
            os.close(dfd)
    except BaseException:
        scratch.remove(d)
        raise
    return Cell(d, name, p.bun_sha256, p.harness_sha256)


def unstage(cell: Cell) -> None:
    scratch.remove(cell.path)


# what ProtectHome=tmpfs covers with an empty read-only tmpfs (systemd.exec(5))
HOMES = ("/home", "/root", "/run/user")


@dataclass(frozen=True)
class View:
    """What a run sees of the service user's own: the source manifest's files
    as SCOPE-1 copied and hashed them (SourceCopy), read-only where the trees
    are; an empty read-only tmpfs over /home, /root and /run/user and over
    each of `hide` (the user's home where it lies elsewhere). Nothing else of
    the user's home or trees is there to be resolved or planted."""
    source: SourceCopy
    hide: tuple[str, ...]
    plugin_dir: str
    plugin_files: tuple[tuple[str, str], ...]  # (name, SHA-256 as copied): all the run's plugin directory holds

    def describe(self) -> str:
        files = ", ".join(f"{n} {h}" for n, h in self.plugin_files)
        seen = ", ".join(f"{inside} (the copy {host})" for host, inside in self.source.binds())
        return (f"the plugin directory {self.plugin_dir} holds only the manifest's {files}; read-only: {seen}; "
                f"empty read-only tmpfs over {', '.join(HOMES + self.hide)}")

    def check(self) -> str:
        """Before each run: the copies are still exactly what SCOPE-1 hashed."""
        problems = self.source.check()
        if problems:
            raise HarnessRefused("the source manifest's copies are not what was hashed: " + "; ".join(problems))
        return f"{len(self.source.files)} copies as hashed (manifest {self.source.digest})"


def _hidden(path: str, hidden: tuple[str, ...]) -> bool:
    return any(inside(path, h) for h in hidden)


def view(source: SourceCopy, source_pin: str, p: Plugin, acct: pwd.struct_passwd) -> View:
    """The View of a run (HarnessRefused, never a run, when it cannot be made
    safe): the copies must be the reviewed bytes (their manifest is
    `source_pin`, the inventory's source_manifest_sha256), the plugin
    directory must lie in one of the trees the copies replace and hold one of
    the manifest's files, and every directory above the trees that is not
    under an empty tmpfs must be root-controlled (bun looks for tsconfig.json
    and package.json upwards from the files it imports)."""
    plugin_files = tuple(source.within(p.plugin_dir))
    if source.digest != source_pin:
        listed = ", ".join(f"{h}  {n}" for n, h in plugin_files) or "none"
        raise HarnessRefused(f"the source manifest's files as copied (once, hashed as copied) come to "
                             f"{source.digest}, not source_manifest_sha256 {source_pin}: bun would not import "
                             f"the reviewed plugin bytes (the plugin directory's, as copied: {listed})")
    if not source.seen(p.plugin_dir):
        raise HarnessRefused(f"plugin.plugin_dir {p.plugin_dir} lies outside the trees the manifest's copies "
                             f"replace ({', '.join(source.roots)}): a run would see it as the user left it")
    if not plugin_files:
        raise HarnessRefused(f"the source manifest lists no file of plugin.plugin_dir {p.plugin_dir}: "
                             "nothing reviewed to import")
    home = os.path.normpath(acct.pw_dir or "/")
    if home == "/":
        raise HarnessRefused(f"the service user's home is {acct.pw_dir!r}: a run could not be kept from it")
    hide: tuple[str, ...] = ()
    if not _hidden(home, HOMES) and not source.seen(home) and os.path.lexists(home):
        hide = (home,)
    problems = []
    for r in source.roots:
        for a in hostfs.ancestors(r):
            if not _hidden(a, HOMES + hide):
                problems += hostfs.Node.at(a).root_controlled_problems("directory")
    if problems:
        raise HarnessRefused("bun looks for tsconfig.json and package.json upwards from the plugin's files, and "
                             "a directory above the trees a run sees is not root-controlled: " + "; ".join(problems))
    return View(source, hide, os.path.normpath(p.plugin_dir), plugin_files)


def fill(args: list[str], helper: str, workdir: str) -> list[str]:
    return [PLACEHOLDER.sub(lambda m: {"helper": helper, "workdir": workdir}[m.group(1)], a)
            for a in args]


def _user_dir(parent: int, name: str, where: str, acct: pwd.struct_passwd) -> None:
    os.mkdir(name, 0o700, dir_fd=parent)
    fd = hostfs.open_dir_at(parent, name, os.path.join(where, name))
    try:
        os.fchown(fd, acct.pw_uid, acct.pw_gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def run(cell: Cell, seen: View, label: str, args: list[str], acct: pwd.struct_passwd, deadline_s: float,
        read_only: tuple[tuple[str, str], ...] = ()) -> Run:
    """One harness run in a unit of its own (module docstring), bounded by
    `deadline_s`, seeing of the user's own only `seen`; `read_only`: more
    (host path, path inside) binds, e.g. a freshly built helper. Its working
    directory and HOME are made for it and removed after it."""
    if acct.pw_uid == 0:  # preflight refuses first; this never runs as root either way
        raise HarnessRefused("the harness is never run as root")
    d = scratch.make("pty-acceptance-plugin-run-", mode=0o700)  # root's: the user cannot enter it
    try:
        dfd = hostfs.open_dir(d)
        try:
            _user_dir(dfd, "work", d, acct)
            _user_dir(dfd, "home", d, acct)
        finally:
            os.close(dfd)
        job = userunit.Job(
            purpose=f"PLUGIN-1 smoke run {label}", argv=cell.argv(args), account=acct, cwd=WORK_INSIDE,
            env={"PATH": PATH, "HOME": HOME_INSIDE, "LANG": "C.UTF-8", "TERM": TERM}, umask=0o077,
            private_tmp=True, binds=((os.path.join(d, "work"), WORK_INSIDE), (os.path.join(d, "home"), HOME_INSIDE)),
            read_only=((cell.path, CELL_INSIDE), *seen.source.binds(), *read_only), protect_home=True,
            hide=seen.hide, output_kept=OUTPUT_KEPT, gate=cell.inside(GATE_NAME))
        ended = userunit.run(job, deadline_s, "plugin-smoke")
        return Run(label, ended, read_results(os.path.join(d, "work")), read_results(os.path.join(d, "home")))
    finally:
        scratch.remove(d)


def judge(r: Run, success: PluginSuccess) -> list[str]:
    """Why run `r` did not pass (empty: it passed), each a phrase naming what
    was missing or wrong; host text escaped by the caller."""
    e = r.ended
    why = []
    if e.timed_out:
        why.append(f"did not finish within its {e.deadline_s:g} s deadline; still running then: "
                   f"{', '.join(e.still_running) or 'nothing listed'}")
    elif e.exit_status != 0:
        why.append(f"ended with {e.ending()} after {e.duration_s:.1f} s; its last line "
                   f"{r.last_line!r}")
    if e.left_behind:
        why.append(f"left processes running after it exited (killed with its cgroup): {', '.join(e.left_behind)}")
    if e.held_open:
        why.append("its output was still held open by a process outside its unit once the unit was gone")
    if e.not_gone:
        why.append(f"its unit could not be seen gone: {e.not_gone}")
    if e.traced is None:
        why.append("it was not traced")
    else:
        why += e.traced.problems()
    if e.exit_status == 0:
        why += _report_problems(r, success)
    planted = sorted(f"{where}/{n}" for where, names in (("working directory", r.files), ("HOME", r.home))
                     for n in names if BUN_READS.match(n))
    if planted:
        why.append(f"files bun would read as configuration were there after the run: {', '.join(planted)}")
    return why


def _report_problems(r: Run, success: PluginSuccess) -> list[str]:
    """The harness's own success report, as the inventory states it (plugin.success)."""
    why = []
    try:
        line_ok = re.search(success.last_line, r.last_line) is not None
        results = [n for n in r.files if re.search(success.result_file, n)]
    except re.error as err:
        return [f"plugin.success is not a usable pattern: {err}"]
    if not line_ok:
        why.append(f"its last line {r.last_line!r} is not the harness's success "
                   f"report (plugin.success.last_line {success.last_line!r}; {r.ended.output_bytes} bytes of "
                   f"output in {r.ended.duration_s:.2f} s)")
    if len(results) != success.results_per_run:
        why.append(f"it left {len(results)} result files matching plugin.success.result_file "
                   f"{success.result_file!r}, not {success.results_per_run}"
                   + (f" ({', '.join(sorted(results))})" if results else ""))
    unread = [f"{n}: {v}" for n, v in r.files.items() if n in results and isinstance(v, str)]
    if unread:
        why.append(f"its result files could not be read: {', '.join(unread)}")
    return why


def read_results(workdir: str) -> dict[str, bytes | str]:
    """The files a run left in `workdir`: regular files with one link only, by
    descriptor, each at most RESULT_LIMIT bytes, at most RESULT_FILES names;
    anything else is named with why it was not read."""
    out: dict[str, bytes | str] = {}
    dfd = hostfs.open_dir(workdir)
    try:
        for name in sorted(hostfs.list_at(dfd, NAMES_LISTED))[:RESULT_FILES]:
            where = os.path.join(workdir, name)
            try:
                out[name] = hostfs.read_fd(hostfs.open_file_at(dfd, name, where, user_writable=True), RESULT_LIMIT,
                                           where)
            except hostfs.PathRefused as e:
                out[name] = f"not read: {e}"
            except OSError as e:
                out[name] = f"not read: {e.strerror or e}"
    finally:
        os.close(dfd)
    return out


def listing(directory: str) -> set[str] | str:
    """The names in `directory` (opened without following a link), or why not."""
    try:
        dfd = hostfs.open_dir(directory)
    except (hostfs.PathRefused, OSError) as e:
        return f"cannot list {directory}: {e}"
    try:
        names = hostfs.list_at(dfd, NAMES_LISTED + 1)
    finally:
        os.close(dfd)
    if len(names) > NAMES_LISTED:
        return f"{directory} holds more than {NAMES_LISTED} names: not compared"
    return set(names)


def inside(path: str, directory: str) -> bool:
    a, b = os.path.normpath(path), os.path.normpath(directory)
    return a == b or a.startswith(b.rstrip("/") + "/")
