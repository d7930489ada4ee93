"""Every marker path a run could name, and their removal at its start (MARK-4).

A run removes an earlier marker at each of them before anything else,
however pytest was started and however it ends, so that no marker from
before stands unless this run wrote it:

- each `--marker` given;
- the `marker:` of every inventory the run could use: each `--inventory`
  given and the checkout's default `inventories/target.yml`, read whether or
  not the file validates (YAML; a file YAML cannot build, or one not shaped
  as an inventory, scanned: YAML's tokens up to the first error and every
  line's `marker:`), through inventory.read_text (walked from /, no link
  followed, bounded), or, where that refuses it (a link on its path, over
  the run's bound, a pipe the operator gave), read once more for its marker
  paths only: the run refuses such an inventory, and its marker goes;
- the default path (readiness_marker.DEFAULT_PATH).

The options are read from the raw arguments (the configuration file's
addopts, PYTEST_ADDOPTS, the command line: gate/checkout.py's raw_args),
since the run may stop at a usage error before pytest parses them. Each
path is handed to readiness_marker.remove, which deletes only a root-owned
file that parses as a marker at a marker path; what it will not delete is
kept and named (the run is refused at start-up).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

import yaml

from pty_acceptance.decision import readiness_marker
from pty_acceptance.spec import inventory

MARKER_LINE = re.compile(r"^\s*marker\s*:\s*(.*?)\s*$")


def option_values(args: list[str], name: str, joined: bool = True) -> list[str]:
    """The values `name` (an option that takes one) is given in `args`, in
    order: `name VALUE` and, with `joined`, `name=VALUE`. pytest allows no
    abbreviation of an option's name."""
    out = []
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            out.append(args[i + 1])
        elif joined and arg.startswith(name + "="):
            out.append(arg[len(name) + 1:])
    return out


def _unquoted(value: str) -> str:
    value = re.sub(r"\s+#.*$", "", value)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


SCAN_LIMIT = 64 << 20  # read for its marker paths only: far past what the run itself reads (INVENTORY_LIMIT)


def _read_followed(path: str) -> str:
    """The file at `path` reached through whatever links its path holds (a red
    team's pass: an inventory given through a linked directory, which the run
    refuses to read, still named a marker it left): a regular file (bounded by
    SCAN_LIMIT, past the run's own bound: a fourth pass's inventory over that
    bound named a marker it left), or a pipe the operator gave (`--inventory
    <(cat FILE)`: what it holds now, read without waiting), never a FIFO of the
    file system or a device (opened non-blocking, judged by fstat before any
    read). Only for the paths to remove; the run judges nothing read so."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISFIFO(st.st_mode) and not _anonymous_pipe(path):
            raise OSError(f"{path}: a FIFO of the file system is never read")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise OSError(f"{path}: not a regular file")
        chunks, n = [], 0
        while n < SCAN_LIMIT:
            try:
                chunk = os.read(fd, min(1 << 20, SCAN_LIMIT - n))
            except BlockingIOError:
                break  # a pipe holds no more now
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _anonymous_pipe(path: str) -> bool:
    """`path` is one of this process's descriptors (/dev/fd/N, /proc/self/fd/N)
    that is a pipe, not a FIFO with a name in the file system."""
    try:
        return os.readlink(os.path.realpath(os.path.dirname(path)) + "/" + os.path.basename(path)) \
            .startswith("pipe:")
    except OSError:
        return False


def scanned(text: str) -> list[str]:
    """The marker paths `text` names when YAML cannot build it (a red team's
    third and fourth passes: an integer of 5000 digits, nesting 3000 deep, an
    unclosed bracket with the value on the next line or escaped): YAML's own
    tokens up to the first error (a `marker` key's scalar, quoted, escaped, on
    the next line or an alias of an anchored one), and every line's
    `marker: VALUE`; of these, the marker paths (inventory.MARKER_PATH)."""
    out: list[str] = []
    anchors: dict[str, str] = {}
    key = wanted = False
    anchor = None
    try:
        for tok in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(tok, yaml.KeyToken):
                key, wanted, anchor = True, False, None
            elif isinstance(tok, yaml.ValueToken):
                key = False
            elif isinstance(tok, yaml.AnchorToken):
                anchor = tok.value
            elif isinstance(tok, yaml.AliasToken):
                if wanted and tok.value in anchors:
                    out.append(anchors[tok.value])
                wanted = False
            elif isinstance(tok, yaml.ScalarToken):
                if anchor is not None:
                    anchors[anchor] = tok.value
                    anchor = None
                if key:
                    wanted, key = tok.value == "marker", False
                elif wanted:
                    out.append(tok.value)
                    wanted = False
            elif not isinstance(tok, yaml.TagToken):  # a collection starts, or ends: not a path
                anchor, wanted = None, False
    except Exception:  # noqa: BLE001  # the first error ends the tokens; the lines still count
        pass
    out += [m for line in text.splitlines() if (found := MARKER_LINE.match(line))
            and (m := _unquoted(found.group(1)))]
    return list(dict.fromkeys(m for m in out if inventory.MARKER_PATH.match(m)))  # a marker stands nowhere else


def inventory_markers(path: str) -> list[str]:
    """The marker paths the inventory file at `path` names (every host's),
    as far as they can be read: [] when the file cannot be read. Where the
    safe read refuses it (a link on its path, over the run's bound), it is read
    once more, for its marker paths only (_read_followed)."""
    if "\0" in path:
        return []  # no file has such a name (pytest stops at it)
    try:
        text = inventory.read_text(path)
    except inventory.InventoryError:
        try:
            text = _read_followed(path)
        except (OSError, ValueError):
            return []
    try:
        hosts = inventory.parse(text, path)["all"]["hosts"].values()
        return [str(v["marker"]) for v in hosts if v.get("marker") is not None]
    except Exception:  # whatever YAML or the shape raise: the text is scanned instead
        return scanned(text)


def named(args: list[str], start_dir: str, default_inventory: str) -> list[str]:
    """Every marker path the run could name (the module docstring), each once."""
    inventories = [os.path.join(start_dir, f) for f in option_values(args, "--inventory")]
    paths = option_values(args, "--marker")
    for f in dict.fromkeys(inventories + [default_inventory]):
        paths += inventory_markers(f)
    return list(dict.fromkeys(paths + [readiness_marker.DEFAULT_PATH]))


CARRIED_PATHS, CARRIED_SAID = 32, 600  # what one start carries to the clean start: sentences, characters


@dataclass
class Removal:
    """What the start of a run did at each marker path."""
    looked_at: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # one sentence per path, for the report
    kept: list[str] = field(default_factory=list)  # MARK-4: what stands and why (the run is refused)
    # what the start before the clean start (launch.py) did, as it said it: words for the
    # report only; every path is looked at again here
    earlier: list[str] = field(default_factory=list)

    def add(self, paths: list[str]) -> None:
        """Remove the markers at `paths` not looked at yet."""
        for p in paths:
            if p in self.looked_at:
                continue
            self.looked_at.append(p)
            try:
                if "\0" in p:
                    raise readiness_marker.NotRemoved(f"{p!r} is not a marker path (it holds a NUL byte)")
                self.said.append(readiness_marker.remove(p))
            except readiness_marker.NotRemoved as e:
                self.said.append(str(e))
                self.kept.append(str(e))
            except OSError as e:
                why = f"could not remove the marker at {p}: {e.strerror or e}"
                self.said.append(why)
                self.kept.append(why)

    def text(self, kept: bool = True) -> str:
        """What happened at each path; without `kept`, what stands is left to
        the refusal that names it."""
        said = [s for s in self.said if kept or s not in self.kept]
        if self.earlier:
            said = [f"{s} (before the clean start)" for s in self.earlier] + said
        return "; ".join(said) if said else ("no marker path looked at" if kept else "no other marker path")

    def carried(self) -> str:
        """What this start said, for the clean start's environment (launch.RESTARTED)."""
        import json

        return json.dumps([s[:CARRIED_SAID] for s in self.said[:CARRIED_PATHS]])

    @classmethod
    def after(cls, carried: str | None) -> Removal:
        """A removal that starts with what the start before the clean start said
        (`carried`: its carried(); anything else is no words)."""
        import json

        r = cls()
        try:
            said = json.loads(carried) if carried else []
        except ValueError:
            said = []
        if isinstance(said, list):
            r.earlier = [s[:CARRIED_SAID] for s in said[:CARRIED_PATHS] if isinstance(s, str)]
        return r
