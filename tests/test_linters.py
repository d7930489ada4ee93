"""Rules about the suite's own code, run as tests (SUITE-3).

- No `assert` statement in the library: pytest rewrites only test modules,
  conftests and plugins; an assert anywhere else is compiled away by
  `python -O`, and a check that can be compiled away is no check.
- The library, its probes included, type-checks: mypy with pyproject.toml's
  [tool.mypy] reports nothing. mypy is one of the `test` extras; a checkout
  without it fails here, it is never skipped.
- Acceptance tests fail one way (gate/failures.py's fail(), or an AcceptanceError
  the plugin turns into the same failure): no `assert` statement and no
  `pytest.fail` call in acceptance/test_*.py or acceptance/conftest.py.
- Acceptance tests check with one vocabulary (gate/checks.py: expect,
  expect_none, collect, reading): no hand-built failure list (`if problems:
  fail(...)`) in acceptance/test_*.py.
- The checked-in node-id list (acceptance/node-ids.txt, which the gate
  compares every run's collection with) matches what the checkout collects.
- ROOT-ACCEPTANCE.md's sections table and requirement bullets are the
  rendering of the requirement records (spec/requirements.yml) and that list:
  a requirement is typed once, in its record.
- No module imports a test module (`test_*.py`): what tests share is a
  fixture in a conftest or a plain function in a helper module
  (tests/gateproject.py, tests/childrun.py, ...). Importing a test module
  runs its module-level code again under another name, and a fixture
  imported by name is a second definition that shadows the conftest's.
- The library starts host programs with `subprocess` only (docs/layout.md,
  "Dependencies"), never through a shell, each call with `env=` (never the
  inherited environment) and every `subprocess.run` with a `timeout=`
  (SUITE-4); a literal argv names its program by absolute path.
"""

import ast
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
LIB = REPO / "acceptance" / "pty_acceptance"


def asserts_in(source: str) -> list[int]:
    return [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assert)]


def test_the_library_has_no_assert_statement():
    found = {str(p.relative_to(REPO)): lines for p in sorted(LIB.rglob("*.py"))
             if (lines := asserts_in(p.read_text()))}
    assert not found, f"assert statements in library code (python -O strips them; raise instead): {found}"


def test_the_assert_finder_finds_one():
    assert asserts_in("def f(x):\n    assert x, 'no'\n") == [2]


def test_the_library_type_checks():
    res = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in res.stderr, \
        f"mypy is not installed in {sys.prefix} (the `test` extras: sh tools/setup.sh): {res.stderr}"
    assert res.returncode == 0 and "Success: no issues found" in res.stdout, \
        f"mypy (pyproject.toml's [tool.mypy]) reports:\n{res.stdout}{res.stderr}"


def test_the_node_id_list_matches_the_checkout():
    res = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "node-ids"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the list matches" in res.stdout


def test_the_checklist_is_the_rendering_of_the_requirement_records():
    res = subprocess.run([sys.executable, "-m", "pty_acceptance.cli", "checklist"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "is the rendering of" in res.stdout


# -- the wire format lives in protocol.py alone (TARGET-CONTRACT section 4): the
# day the real PROTOCOL.md arrives, one module changes
STRUCT_CALLS = {"pack", "unpack", "pack_into", "unpack_from", "Struct", "calcsize", "iter_unpack"}


def wire_encodings(source: str) -> list[int]:
    """Lines that pack or unpack with a big-endian (network order) struct format."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in STRUCT_CALLS and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and node.args[0].value[:1] in (">", "!"):
            found.append(node.lineno)
    return found


def test_nothing_but_protocol_py_encodes_frames():
    found = {str(p.relative_to(REPO)): lines
             for p in sorted([*LIB.rglob("*.py"), *(REPO / "acceptance").glob("*.py")])
             if p.name != "protocol.py" and (lines := wire_encodings(p.read_text()))}
    assert not found, f"wire-format encoding outside acceptance/pty_acceptance/supervisor/protocol.py: {found}"
    assert wire_encodings((LIB / "supervisor" / "protocol.py").read_text()), "the finder finds protocol.py's own"


def pytest_fails_in(source: str) -> list[int]:
    """Lines that call pytest.fail (or import it by name)."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "fail" \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "pytest":
            found.append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and n.module == "pytest" and any(a.name == "fail" for a in n.names):
            found.append(n.lineno)
    return found


def test_acceptance_tests_fail_one_way():
    """Tests and fixtures fail through failures.fail (or a library AcceptanceError), never
    an assert (a second failure shape, its text pytest's) or a direct pytest.fail."""
    acceptance = REPO / "acceptance"
    modules = [*sorted(acceptance.glob("test_*.py")), acceptance / "conftest.py"]
    assert len(modules) > 1, "no acceptance modules found"
    found = {}
    for p in modules:
        src = p.read_text()
        if lines := {k: v for k, v in (("assert", asserts_in(src)), ("pytest.fail", pytest_fails_in(src))) if v}:
            found[str(p.relative_to(REPO))] = lines
    assert not found, f"use fail() from pty_acceptance.gate.failures instead (lines): {found}"


def hand_built_failures(source: str) -> list[int]:
    """Lines of `if <name>: fail(...)`: a failure list built by hand (gate/checks.py's
    expect_none or collect says it once)."""
    return [n.lineno for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Call)
            and isinstance(n.body[0].value.func, ast.Name) and n.body[0].value.func.id == "fail"]


def test_acceptance_tests_build_no_failure_lists_by_hand():
    found = {str(p.relative_to(REPO)): lines for p in sorted((REPO / "acceptance").glob("test_*.py"))
             if (lines := hand_built_failures(p.read_text()))}
    assert not found, f"use expect_none() or collect() from pty_acceptance.gate.checks (lines): {found}"


def test_the_hand_built_failure_finder_finds_one():
    source = ("problems = []\nif problems:\n    fail('X-1: ' + '; '.join(problems))\n"
              "if not ok:\n    fail('X-1: no')\nexpect_none(problems, 'X-1')\n")
    assert hand_built_failures(source) == [2]


def test_the_pytest_fail_finder_finds_both_forms():
    assert pytest_fails_in("import pytest\npytest.fail('x', pytrace=False)\n") == [2]
    assert pytest_fails_in("from pytest import fail\n") == [1]
    assert pytest_fails_in("from pty_acceptance.gate.failures import fail\nfail('x')\n") == []


def imports_of_test_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a test module (a name part `test_*`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if any(part.startswith("test_") for part in a.name.split("."))]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if any(part.startswith("test_") for part in module.split(".")):
                found.append((node.lineno, module))
            else:
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names if a.name.startswith("test_")]
    return found


def test_no_module_imports_a_test_module():
    files = sorted([*(REPO / "tests").rglob("*.py"), *(REPO / "acceptance").rglob("*.py"), REPO / "conftest.py"])
    found = {str(p.relative_to(REPO)): hits for p in files if (hits := imports_of_test_modules(p.read_text()))}
    assert not found, ("test modules imported (share a fixture through a conftest, a function "
                       f"through a helper module under tests/): {found}")


def test_the_test_module_import_finder_finds_each_form():
    source = ("import test_gate\nfrom test_gate import run\nfrom tests.test_verdict import junit\n"
              "from tests import test_hostfs\nimport tests.test_intoto as t\n"
              "from gateproject import run\nfrom tests.refhost import findings\nimport pytest\n")
    assert [line for line, _ in imports_of_test_modules(source)] == [1, 2, 3, 4, 5]


# -- host programs (SUITE-4): subprocess, env=, a timeout, an absolute path, no shell
SPAWNERS = {"run", "Popen", "call", "check_call", "check_output"}
NO_SHELL = {("os", "system"), ("os", "popen"), ("os", "spawnl"), ("os", "spawnlp"), ("os", "spawnv"),
            ("os", "spawnvp"), ("os", "execvp"), ("os", "execlp"), ("os", "posix_spawnp")}


def host_program_problems(source: str) -> list[str]:
    """What a call that starts a program gets wrong: 'line: problem'."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)):
            continue
        owner, name = node.func.value.id, node.func.attr
        keywords = {k.arg: k.value for k in node.keywords}
        if (owner, name) in NO_SHELL:
            out.append(f"{node.lineno}: {owner}.{name} (a shell or a PATH look-up)")
        if owner != "subprocess" or name not in SPAWNERS:
            continue
        if "env" not in keywords:
            out.append(f"{node.lineno}: subprocess.{name} without env= (the inherited environment)")
        if name != "Popen" and "timeout" not in keywords:
            out.append(f"{node.lineno}: subprocess.{name} without timeout=")
        shell = keywords.get("shell")
        if shell is not None and not (isinstance(shell, ast.Constant) and shell.value is False):
            out.append(f"{node.lineno}: subprocess.{name} with shell=")
        argv = node.args[0] if node.args else keywords.get("args")
        if isinstance(argv, ast.List) and argv.elts and isinstance(argv.elts[0], ast.Constant) \
                and not str(argv.elts[0].value).startswith("/"):
            out.append(f"{node.lineno}: subprocess.{name} of {argv.elts[0].value!r}, not an absolute path")
    return out


def test_the_library_starts_host_programs_by_the_rules():
    found = {str(p.relative_to(REPO)): problems for p in sorted(LIB.rglob("*.py"))
             if (problems := host_program_problems(p.read_text()))}
    assert not found, f"host programs started outside SUITE-4's rules: {found}"


def test_the_host_program_finder_finds_each_problem():
    source = ("import os, subprocess\n"
              "subprocess.run(['/usr/bin/true'], env=E, timeout=1)\n"
              "subprocess.run(['true'], env=E, timeout=1)\n"
              "subprocess.run(argv, timeout=1)\n"
              "subprocess.run(argv, env=E)\n"
              "subprocess.Popen(argv, env=E, shell=True)\n"
              "subprocess.Popen(argv, env=E)\n"
              "os.system('true')\n")
    assert [p.split(":")[0] for p in host_program_problems(source)] == ["3", "4", "5", "6", "8"]


def test_ruff_finds_nothing():
    """pyproject.toml's [tool.ruff] rules over the whole checkout (the
    reference deployment's pinned bytes left out). Not installed is a failure,
    never a skip: `pip install -e ".[test]"` brings it."""
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent))
    assert ruff, f"ruff is not installed beside {sys.executable}: pip install -e '.[test]'"
    done = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(REPO)],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(REPO)})
    assert done.returncode == 0, f"ruff check:\n{done.stdout}{done.stderr}"


def test_no_module_shadows_the_standard_library():
    """A script runs with its own directory first on sys.path
    (tests/refhost/benchprobe.py in the guest, the probes staged for the
    service user): a module beside it named like a standard one
    (tests/refhost/operator.py was, for an hour) is imported in its place."""
    import sys

    found = [str(p.relative_to(REPO)) for d in ("tests", "acceptance") for p in (REPO / d).rglob("*.py")
             if p.stem in sys.stdlib_module_names and "reference" not in p.relative_to(REPO).parts]
    assert not found, f"named like a module of the standard library: {found}"
