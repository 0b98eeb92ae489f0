"""The shape docs/architecture.md states, enforced: its layer list is the order imports may follow.

Every import of a suite module counts: at the top of a file, inside a function, under TYPE_CHECKING.  The
checks: every module of suite/ has a layer; no module imports one of a higher layer; the import graph has no
cycle; nothing under suite/ or scripts/ imports the tests.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suite"


def layers() -> list[tuple[str, list[str]]]:
    """(layer, [pattern, ...]) in the order of the ```layers block of docs/architecture.md, lowest first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    out = []
    for line in block.group(1).splitlines():
        if line.strip():
            name, _, patterns = line.partition(":")
            out.append((name.strip(), patterns.split()))
    return out


def modules() -> dict[str, Path]:
    out = {}
    for path in SUITE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The suite modules `name` imports, anywhere in the file (a `from pkg import mod` names the module)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def layer_of(name: str, table: list[tuple[str, list[str]]]) -> int | None:
    """The layer index of the most specific pattern matching `name` (`pkg.*`: the package and what is in it)."""
    best, best_len = None, -1
    for index, (_, patterns) in enumerate(table):
        for p in patterns:
            hit = (name == p[:-2] or name.startswith(p[:-1])) if p.endswith(".*") else name == p
            if hit and len(p) > best_len:
                best, best_len = index, len(p)
    return best


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_module_has_a_layer(graph):
    table = layers()
    assert [m for m in sorted(graph) if layer_of(m, table) is None] == []


def test_no_import_goes_up_a_layer(graph):
    table = layers()
    up = [f"{a} ({table[layer_of(a, table)][0]}) imports {b} ({table[layer_of(b, table)][0]})"
          for a, targets in sorted(graph.items()) for b in sorted(targets) if layer_of(b, table) > layer_of(a, table)]
    assert up == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_import_graph_has_no_cycle(graph):
    assert cycles(graph) == []


def test_the_checks_can_fail():
    a_cycle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(a_cycle) == [["a", "b", "c"]]
    table = [("low", ["suite.x.*"]), ("high", ["suite.y.*", "suite.x.top"])]
    assert layer_of("suite.x.inner", table) == 0 and layer_of("suite.x.top", table) == 1
    assert layer_of("suite.x", table) == 0 and layer_of("suite.z", table) is None


def imports_tests(text: str) -> bool:
    """Whether a file's code (not its comments) imports the tests or loads a file of theirs: an import of
    `tests`, or a string naming a tests/ Python file (spec_from_file_location, runpy, a subprocess)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a shell script: its non-comment lines
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        return bool(re.search(r"tests/\S*\.py|\btests\.\w", code))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tests" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "tests":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(
                r"(^|/)tests/\S*\.py\b|^tests(\.\w+)+$", node.value):
            return True
    return False


def test_nothing_in_suite_or_scripts_imports_the_tests():
    files = [*SUITE.rglob("*.py"), *(p for p in (ROOT / "scripts").iterdir() if p.is_file())]
    assert [str(p.relative_to(ROOT)) for p in files if imports_tests(p.read_text(errors="replace"))] == []
    # scripts do not even name a test file's path: what they need lives in suite/testing/
    scripts = [p for p in (ROOT / "scripts").iterdir() if p.is_file()]
    assert [p.name for p in scripts if re.search(r"tests/(dist|unit|e2e)/", p.read_text(errors="replace"))] == []
    assert imports_tests("from tests.dist.spawn import make_cell") and imports_tests("import tests.unit")
    assert imports_tests('spec_from_file_location("m", root / "tests/dist/bare.py")')
    assert not imports_tests("# tests/unit/test_x.py checks this\nx = 1")
