"""No import circle inside acceptance/pty_acceptance: the library's modules
form a directed acyclic graph, counting imports inside functions too (a
function-level import only hides a circle)."""

import ast
import pathlib

PACKAGE = "pty_acceptance"
LIB = pathlib.Path(__file__).resolve().parent.parent / "acceptance" / PACKAGE


def imports_of(source: str, modules: set[str]) -> set[str]:
    """The package's modules that `source` imports, at any depth of the tree."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 or node.module == PACKAGE or \
                    (node.level == 0 and (node.module or "").startswith(PACKAGE + ".")):
                base = (node.module or "") if node.level else node.module.removeprefix(PACKAGE)
                base = base.removeprefix(".")
                if base:
                    found.add(base.split(".")[0])
                else:  # from . import x, y / from pty_acceptance import x
                    found |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(PACKAGE + "."):
                    found.add(a.name.split(".")[1])
    return found & modules


def graph(lib: pathlib.Path) -> dict[str, set[str]]:
    modules = {p.stem for p in lib.glob("*.py")}
    return {p.stem: imports_of(p.read_text(), modules) - {p.stem} for p in lib.glob("*.py")}


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


def test_the_graph_is_read():
    g = graph(LIB)
    assert "gate" in g and "marks" in g["gate"] and "gate" in g["plugin"]


def test_a_function_level_circle_is_found():
    src = {"a": "from . import b\n", "b": "def f():\n    from .a import x\n",
           "c": "import pty_acceptance.d\n", "d": "def g():\n    from pty_acceptance import c\n"}
    g = {name: imports_of(text, set(src)) for name, text in src.items()}
    assert cycles(g) == [["a", "b"], ["c", "d"]]


def test_no_import_circle_in_the_library():
    found = cycles(graph(LIB))
    assert not found, f"import circles (modules that import each other, directly or not): {found}"
