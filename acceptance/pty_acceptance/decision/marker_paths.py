"""Every marker path a run could name, and their removal at its start (MARK-4).

A run removes an earlier marker at each of them before anything else,
however pytest was started and however it ends, so that no marker from
before stands unless this run wrote it:

- each `--marker` given;
- the `marker:` of every inventory the run could use: each `--inventory`
  given and the checkout's default `inventories/target.yml`, read whether or
  not the file validates (YAML; a file YAML cannot read, or one not shaped
  as an inventory, scanned line by line for `marker:`), through
  inventory.read_text (walked from /, no link followed, bounded), or, where
  that refuses a link on its path, read through the links (a regular file
  only, bounded): the run refuses such an inventory, and its marker goes;
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


def _read_followed(path: str) -> str:
    """The file at `path` reached through whatever links its path holds (a red
    team's pass: an inventory given through a linked directory, which the run
    refuses to read, still named a marker it left): a regular file only (never
    a FIFO: opened non-blocking and judged by fstat before any read), bounded.
    Only for the paths to remove; the run judges nothing read so."""
    limit = inventory.INVENTORY_LIMIT.value
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise OSError(f"{path}: not a regular file of at most {limit} bytes")
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


def inventory_markers(path: str) -> list[str]:
    """The marker paths the inventory file at `path` names (every host's),
    as far as they can be read: [] when the file cannot be read. Where the
    safe read refuses it (a link on its path), it is read once more through
    the links, for its marker paths only."""
    try:
        text = inventory.read_text(path)
    except inventory.InventoryError:
        try:
            text = _read_followed(path)
        except OSError:
            return []
    try:
        hosts = inventory.parse(text, path)["all"]["hosts"].values()
        return [str(v["marker"]) for v in hosts if v.get("marker") is not None]
    except Exception:  # whatever YAML or the shape raise (a blind red team's third pass: an
        pass           # integer of 5000 digits, nesting 3000 deep): the lines are scanned instead
    return [m for line in text.splitlines() if (found := MARKER_LINE.match(line))
            and (m := _unquoted(found.group(1)))]


def named(args: list[str], start_dir: str, default_inventory: str) -> list[str]:
    """Every marker path the run could name (the module docstring), each once."""
    inventories = [os.path.join(start_dir, f) for f in option_values(args, "--inventory")]
    paths = option_values(args, "--marker")
    for f in dict.fromkeys(inventories + [default_inventory]):
        paths += inventory_markers(f)
    return list(dict.fromkeys(paths + [readiness_marker.DEFAULT_PATH]))


@dataclass
class Removal:
    """What the start of a run did at each marker path."""
    looked_at: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # one sentence per path, for the report
    kept: list[str] = field(default_factory=list)  # MARK-4: what stands and why (the run is refused)

    def add(self, paths: list[str]) -> None:
        """Remove the markers at `paths` not looked at yet."""
        for p in paths:
            if p in self.looked_at:
                continue
            self.looked_at.append(p)
            try:
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
        return "; ".join(said) if said else ("no marker path looked at" if kept else "no other marker path")
