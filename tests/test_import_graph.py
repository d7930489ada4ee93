"""The library's architecture, as its imports show it (docs/layout.md, "Layout").

acceptance/pty_acceptance/ is in folders by layer. A module imports only
from its own folder or from a folder below it in LAYERS; probes/ import
nothing of the package (they run as plain scripts on the host); only gate/
imports pytest; gate/ (the pytest adapter) and cli.py (the command line) are
two tops side by side over decision/, neither imports the other; and there is
no import circle, counting imports inside functions too (a function-level
import only hides a circle)."""

import ast
import pathlib

PACKAGE = "pty_acceptance"
LIB = pathlib.Path(__file__).resolve().parent.parent / "acceptance" / PACKAGE

# Bottom to top. The root modules count as layers of their own: errors.py is
# the floor every layer may raise from, cli.py the command line on top.
LAYERS = ("errors", "host", "spec", "provenance", "supervisor", "candidate", "report", "decision", "gate", "cli")
STANDALONE = ("probes",)
# Library modules staged beside a probe (supervisor/peer.py AGENT_FILES): they
# run in the service user's unit as plain files and import nothing of the package.
STAGED = ("supervisor.protocol",)
PYTEST_LAYERS = ("gate",)
# Tops that stand side by side: neither imports the other, whatever LAYERS' order.
APART = (("cli", "gate"),)


def module_names(lib: pathlib.Path) -> dict[str, pathlib.Path]:
    """'host.hostfs' -> its file, for every module of the package (packages' __init__ left out)."""
    out = {}
    for p in lib.rglob("*.py"):
        rel = p.relative_to(lib).with_suffix("")
        if rel.name != "__init__":
            out[".".join(rel.parts)] = p
    return out


def imports_of(source: str, modules: set[str], here: str = "") -> set[str]:
    """The package's modules that `source` (the module `here`) imports, at any depth of the tree."""
    found = set()
    package_of_here = here.rpartition(".")[0]

    def add(dotted: str, names=()):
        if dotted in modules:
            found.add(dotted)
        for n in names:
            child = f"{dotted}.{n}" if dotted else n
            if child in modules:
                found.add(child)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level:
                base = package_of_here.split(".") if package_of_here else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                dotted = ".".join(base + ([node.module] if node.module else []))
                add(dotted, names)
            elif node.module == PACKAGE:
                add("", names)
            elif (node.module or "").startswith(PACKAGE + "."):
                add(node.module.removeprefix(PACKAGE + "."), names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(PACKAGE + "."):
                    add(a.name.removeprefix(PACKAGE + "."))
    return found


def graph(lib: pathlib.Path) -> dict[str, set[str]]:
    mods = module_names(lib)
    return {m: imports_of(p.read_text(), set(mods), m) - {m} for m, p in mods.items()}


def layer(module: str) -> str:
    return module.split(".")[0]


def upward(g: dict[str, set[str]]) -> list[str]:
    """Every import of a layer above the importer's, or of a standalone probe."""
    def against_the_order(lm: str, ld: str) -> bool:
        if lm in STANDALONE or ld in STANDALONE:
            return True
        return LAYERS.index(ld) > LAYERS.index(lm)  # an unknown layer raises: test_the_graph_is_read

    def apart(lm: str, ld: str) -> bool:
        return (lm, ld) in APART or (ld, lm) in APART

    return [f"{m} -> {d}" for m, deps in sorted(g.items()) for d in sorted(deps)
            if against_the_order(layer(m), layer(d)) or apart(layer(m), layer(d))]


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected component of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def imports_pytest(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ("pytest", "_pytest") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and \
                (node.module or "").split(".")[0] in ("pytest", "_pytest"):
            return True
    return False


def test_the_graph_is_read():
    g = graph(LIB)
    assert "gate.failures" in g["gate.plugin"] and "host.hostfs" in g["spec.inventory"]
    assert set(layer(m) for m in g) <= set(LAYERS) | set(STANDALONE)


def test_every_module_lives_in_a_layer_folder():
    loose = sorted(m for m in module_names(LIB) if "." not in m and m not in LAYERS)
    assert not loose, f"modules outside the layer folders (docs/layout.md, Layout): {loose}"


def test_relative_and_absolute_imports_are_both_read():
    mods = {"host.a", "host.b", "spec.c", "gate.d"}
    assert imports_of("from . import b\n", mods, "host.a") == {"host.b"}
    assert imports_of("from ..spec import c\n", mods, "host.a") == {"spec.c"}
    assert imports_of("def f():\n    from pty_acceptance.gate.d import x\n", mods, "host.a") == {"gate.d"}
    assert imports_of("import pty_acceptance.spec.c\n", mods, "host.a") == {"spec.c"}
    assert imports_of("from pty_acceptance.spec import c\n", mods, "host.a") == {"spec.c"}


def test_an_upward_import_is_found():
    g = {"host.a": {"gate.d"}, "gate.d": {"host.a"}, "probes.p": {"host.a"}, "spec.c": {"probes.p"},
         "cli": {"gate.d", "decision.e"}, "decision.e": {"gate.d"}}
    assert upward(g) == ["cli -> gate.d", "decision.e -> gate.d", "host.a -> gate.d", "probes.p -> host.a",
                         "spec.c -> probes.p"]


def test_a_function_level_circle_is_found():
    src = {"host.a": "from . import b\n", "host.b": "def f():\n    from .a import x\n",
           "spec.c": "import pty_acceptance.spec.d\n", "spec.d": "def g():\n    from pty_acceptance.spec import c\n"}
    g = {name: imports_of(text, set(src), name) for name, text in src.items()}
    assert cycles(g) == [["host.a", "host.b"], ["spec.c", "spec.d"]]


def test_no_import_circle_in_the_library():
    found = cycles(graph(LIB))
    assert not found, f"import circles (modules that import each other, directly or not): {found}"


def test_imports_follow_the_layer_order():
    found = upward(graph(LIB))
    assert not found, ("imports against the layer order " + " < ".join(LAYERS)
                       + " (probes import nothing of the package; "
                       + ", ".join(" and ".join(p) for p in APART) + f" import nothing of each other): {found}")


def test_staged_modules_import_nothing_of_the_package():
    g = graph(LIB)
    found = {m: sorted(g[m]) for m in STAGED if g[m]}
    assert not found, f"modules staged beside a probe import the package: {found}"
    from pty_acceptance.supervisor import peer
    staged = {".".join(p.relative_to(LIB).with_suffix("").parts) for p in peer.AGENT_FILES}
    assert staged == {"probes.agent", *STAGED}


def test_only_the_gate_imports_pytest():
    found = sorted(m for m, p in module_names(LIB).items()
                   if layer(m) not in PYTEST_LAYERS and imports_pytest(p.read_text()))
    assert not found, ("library modules below gate/ raise errors (errors.py); only gate/ "
                       f"turns them into pytest failures, and these import pytest: {found}")
