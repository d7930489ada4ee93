"""MARK-4: the marker an inventory names goes at the start of a run however
that inventory, or the arguments naming it, must be read (issue 38, a blind
red team's fourth pass: each of these left an earlier READY run's marker
standing after a run that did not pass). The early guard reads @FILE
arguments as argparse does (nested, whole), and an inventory the run itself
refuses (over its bound, through a pipe, YAML it cannot build) for its marker
paths only: YAML's own tokens up to the first error, and every line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gateproject import PYTEST, earlier_marker, env_without_pytest_vars, for_separate_processes, said, start, \
    suite_args


def _gone_and_failed(done, marker) -> None:
    assert not os.path.lexists(marker), f"the earlier READY run's marker still stands\n{said(done)}"
    assert done.returncode != 0, f"exit 0 for a run that judged nothing\n{said(done)}"


def test_an_inventory_in_args_files_nested_twelve_deep(project, target):
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    for i in range(12):
        nxt = f"@a{i + 1}.txt\n" if i < 11 else f"--inventory\n{target.inventory}\n--inventroy\nx.yml\n"
        (project.path / f"a{i}.txt").write_text(nxt)
    _gone_and_failed(start(project, [PYTEST, "-p", "no:cacheprovider", "acceptance/", "@a0.txt"]), marker)


def test_an_inventory_past_the_first_mib_of_an_args_file(project, target):
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    (project.path / "args.txt").write_text("acceptance/\n--junit-prefix=" + "A" * (1 << 20) + "\n"
                                           + f"--inventory\n{target.inventory}\n--inventroy\nx.yml\n")
    _gone_and_failed(start(project, [PYTEST, "-p", "no:cacheprovider", "@args.txt"]), marker)


def test_args_files_nested_past_the_bound_are_refused(project, target):
    for_separate_processes(project)
    (project.path / "loop.txt").write_text("@loop.txt\n")
    done = start(project, [PYTEST, "-p", "no:cacheprovider", "acceptance/", "@loop.txt"])
    assert done.returncode != 0 and "nested over 64 deep" in done.stderr, said(done)


def test_an_inventory_read_from_a_pipe(project, target):
    """`--inventory <(cat FILE)`: the run refuses the link, and the pipe's
    content names the marker that goes."""
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    r, w = os.pipe()
    os.write(w, Path(target.inventory).read_bytes())  # fits the pipe's buffer
    os.close(w)
    try:
        done = subprocess.run([PYTEST, *suite_args(target)[:-1], f"/dev/fd/{r}"], cwd=project.path,
                              env=env_without_pytest_vars(), capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, pass_fds=(r,))
    finally:
        os.close(r)
    _gone_and_failed(done, marker)


def test_a_named_fifo_is_never_read(project, target, tmp_path):
    for_separate_processes(project)
    fifo = tmp_path / "inv.yml"
    os.mkfifo(fifo)
    done = start(project, [PYTEST, *suite_args(target)[:-1], str(fifo)])
    assert done.returncode != 0, said(done)


def test_an_inventory_over_the_runs_bound(project, target):
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    with open(target.inventory, "a", encoding="utf-8") as f:
        f.write("#" + "x" * (1 << 20) + "\n")
    _gone_and_failed(start(project, [PYTEST, *suite_args(target)]), marker)


def _broken(target, value) -> None:
    text = Path(target.inventory).read_text()
    line = next(l for l in text.splitlines() if l.lstrip().startswith("marker:"))
    indent = line[:len(line) - len(line.lstrip())]
    Path(target.inventory).write_text(text.replace(line, value(indent, line.split(":", 1)[1].strip().strip("'\"")))
                                      + "zz: [\n")


def test_a_broken_inventory_with_its_marker_on_the_next_line(project, target):
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    _broken(target, lambda indent, v: f"{indent}marker:\n{indent}  {v}")
    _gone_and_failed(start(project, [PYTEST, *suite_args(target)]), marker)


def test_a_broken_inventory_with_its_marker_escaped(project, target):
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    _broken(target, lambda indent, v: f'{indent}marker: "{v[:-1]}\\x{ord(v[-1]):02x}"')
    _gone_and_failed(start(project, [PYTEST, *suite_args(target)]), marker)


def test_a_broken_inventory_with_its_marker_an_alias(project, target):
    for_separate_processes(project)
    marker = earlier_marker(target.marker)
    _broken(target, lambda indent, v: f"{indent}other: &m {v}\n{indent}marker: *m")
    _gone_and_failed(start(project, [PYTEST, *suite_args(target)]), marker)
