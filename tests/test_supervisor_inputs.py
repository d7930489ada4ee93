"""OWN-2's reading of what feeds the supervisor (provenance/supervisor_inputs.py): the paths a unit
names, and what a live process holds, judged root-controlled."""

import os
import subprocess

import pytest

from pty_acceptance.provenance import supervisor_inputs


def test_named_paths_from_the_service_properties():
    named = supervisor_inputs.named_paths({
        "EnvironmentFiles": [("/etc/default/sup", False), ("/etc/sup.env", True)],
        "WorkingDirectory": "!/var/lib/sup", "RootDirectory": "", "RootImage": "/img.raw"})
    assert [(n.what, n.path, n.kind, n.optional) for n in named] == [
        ("EnvironmentFile=", "/etc/default/sup", "regular file", False),
        ("EnvironmentFile=", "/etc/sup.env", "regular file", True),
        ("WorkingDirectory=", "/var/lib/sup", "directory", True),
        ("RootImage=", "/img.raw", "regular file", False)]
    assert [n.path for n in supervisor_inputs.named_paths({"WorkingDirectory": "~"})] == ["/root"]
    assert supervisor_inputs.named_paths({"WorkingDirectory": "", "EnvironmentFiles": []}) == []


def test_an_environment_file_of_the_service_user_is_a_finding(safe_dir):
    env = safe_dir / "sup.env"
    env.write_text("X=1\n")
    assert supervisor_inputs.named_problems(
        supervisor_inputs.Named("EnvironmentFile=", str(env), "regular file", False)) == []
    os.chown(env, 1000, 1000)
    problems = supervisor_inputs.named_problems(
        supervisor_inputs.Named("EnvironmentFile=", str(env), "regular file", False))
    assert problems == [f"EnvironmentFile=: {env} is owned by uid 1000, not root"]


def test_a_missing_optional_file_is_fine_only_under_root_controlled_directories(safe_dir):
    n = supervisor_inputs.Named("EnvironmentFile=", str(safe_dir / "d/absent.env"), "regular file", True)
    (safe_dir / "d").mkdir()
    assert supervisor_inputs.named_problems(n) == []
    os.chown(safe_dir / "d", 1000, 1000)
    assert supervisor_inputs.named_problems(n) == [f"EnvironmentFile=: {safe_dir / 'd'} is owned by uid 1000, not root"]
    strict = supervisor_inputs.Named("EnvironmentFile=", n.path, "regular file", False)
    assert f"EnvironmentFile=: {n.path} does not exist" in supervisor_inputs.named_problems(strict)


def test_a_symlinked_working_directory_is_a_finding(safe_dir):
    (safe_dir / "real").mkdir()
    os.symlink(safe_dir / "real", safe_dir / "wd")
    problems = supervisor_inputs.named_problems(
        supervisor_inputs.Named("WorkingDirectory=", str(safe_dir / "wd"), "directory", False))
    assert any("is a symlink, expected a directory" in p for p in problems), problems


@pytest.fixture
def process(safe_dir):
    """A process whose cwd and one open file are under safe_dir."""
    procs = []

    def start(cwd, held):
        p = subprocess.Popen(["/bin/sh", "-c", f"exec 7<'{held}'; exec /bin/sleep 300"], cwd=cwd,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        fd7 = f"/proc/{p.pid}/fd/7"
        for _ in range(2000):  # until sh has opened fd 7 and exec'ed sleep (bounded)
            if os.path.exists(fd7) and os.readlink(f"/proc/{p.pid}/exe") == "/usr/bin/sleep":
                break
            os.sched_yield()
        else:
            pytest.fail(f"the probe process {p.pid} never held fd 7 while running sleep")
        return p.pid

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_held_files_of_a_root_controlled_process_pass(safe_dir, process):
    held = safe_dir / "conf"
    held.write_text("x\n")
    pid = process(str(safe_dir), str(held))
    found = supervisor_inputs.held_paths(pid)
    whats = {(h.what, h.path) for h in found}
    assert ("cwd", str(safe_dir)) in whats and ("fd 7", str(held)) in whats
    assert any(h.what == "map" and h.path.endswith("sleep") for h in found)
    assert [p for h in found for p in supervisor_inputs.held_problems(h)] == []


def test_held_files_of_the_service_user_are_findings(safe_dir, process):
    wd, held = safe_dir / "wd", safe_dir / "conf"
    wd.mkdir()
    held.write_text("x\n")
    os.chown(wd, 1000, 1000)
    os.chmod(held, 0o666)
    pid = process(str(wd), str(held))
    problems = [p for h in supervisor_inputs.held_paths(pid) for p in supervisor_inputs.held_problems(h)]
    assert f"pid {pid} cwd {str(wd)!r}: {wd} is owned by uid 1000, not root" in problems
    assert f"pid {pid} fd 7 {str(held)!r}: {held} is writable by group and other (mode 0666)" in problems


def test_a_held_file_whose_path_now_names_another_is_a_finding(safe_dir, process):
    held = safe_dir / "conf"
    held.write_text("x\n")
    pid = process(str(safe_dir), str(held))
    held.unlink()
    held.write_text("another\n")
    problems = [p for h in supervisor_inputs.held_paths(pid) for p in supervisor_inputs.held_problems(h)]
    assert any("is not the file held" in p for p in problems), problems
