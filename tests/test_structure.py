"""Structure facts about src/drainsafe that anyone can check: no import circles (issue 28).

The graph is built from the source with `ast`, not by importing it: every import that runs
at run time is an edge, at module level and inside functions (a function-level import is
still a circle; it only moves the partial-module failure to the first call), and nothing in
an `if TYPE_CHECKING:` block is (it never runs). Relative imports are resolved against the
importing module's package; `from pkg import name` is an edge to the module `pkg.name` when
there is one, else to `pkg`. Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`,
so those packages are edges too, unless the importer is inside them (then they are already
being imported); an explicit import of the importer's own package still is one. Imports by
string (`importlib.import_module`) are not seen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

Graph = Mapping[str, frozenset[str]]

KNOWN: frozenset[frozenset[str]] = frozenset()
"""Circles tolerated for now, each as the set of its modules: none. A circle added here
needs an issue of its own; the test fails when one listed is gone."""


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Module name -> file, for every module of `package` under `src`."""
    files: dict[str, Path] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run, skipping `if TYPE_CHECKING:` bodies (their
    `else:` runs, so it is kept)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom,
             modules: Mapping[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in modules else base


def import_graph(src: Path, package: str) -> dict[str, frozenset[str]]:
    """Module -> the modules of `package` it imports at run time."""
    modules = module_files(src, package)
    graph: dict[str, frozenset[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _runtime_imports(tree):
            for target in _targets(module, is_package, node, modules):
                parts = target.split(".")
                if target in modules and target != module:
                    edges.add(target)
                # The packages the import runs on the way, unless the importer is inside
                # them (then they are already being imported).
                for n in range(1, len(parts)):
                    name = ".".join(parts[:n])
                    if name in modules and name != module \
                            and not module.startswith(name + "."):
                        edges.add(name)
        graph[module] = frozenset(edges)
    return graph


def strongly_connected(graph: Graph) -> list[frozenset[str]]:
    """The graph's circles: its strongly connected components of more than one module
    (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def shortest_circle(graph: Graph, component: frozenset[str]) -> list[str]:
    """One shortest circle through the component's first module, for the message:
    [a, b, ..., a]."""
    start = min(component)
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"{sorted(component)} is not a circle")


def describe(graph: Graph, component: frozenset[str]) -> str:
    circle = " -> ".join(shortest_circle(graph, component))
    return f"{circle} (all modules in the circle: {', '.join(sorted(component))})"


def test_no_import_circles_in_drainsafe() -> None:
    graph = import_graph(SRC, "drainsafe")
    assert "drainsafe.server.admin" in graph  # the graph read the tree it was meant to
    circles = strongly_connected(graph)
    new = [describe(graph, c) for c in circles if c not in KNOWN]
    assert not new, "import circles in src/drainsafe:\n  " + "\n  ".join(new)
    gone = [sorted(c) for c in KNOWN if c not in circles]
    assert not gone, f"no longer circles, remove them from KNOWN: {gone}"


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_graph_finds_function_level_and_relative_circles(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import thing\n",
        "pkg/b.py": "def f():\n    from . import c\n",
        "pkg/c.py": "import pkg.a\n",
        "pkg/d.py": "from pkg import a\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.d"] == {"pkg.a"}
    [circle] = strongly_connected(graph)
    assert circle == {"pkg.a", "pkg.b", "pkg.c"}
    assert describe(graph, circle).startswith("pkg.a -> pkg.b -> pkg.c -> pkg.a")


@pytest.mark.parametrize("guard", ["TYPE_CHECKING", "typing.TYPE_CHECKING"])
def test_type_checking_imports_are_not_edges_but_their_else_is(tmp_path: Path,
                                                               guard: str) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import pkg.b\n",
        "pkg/b.py": f"if {guard}:\n    import pkg.a\nelse:\n    import pkg.c\n",
        "pkg/c.py": "",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.b"] == {"pkg.c"}
    assert strongly_connected(graph) == []


def test_a_module_importing_from_its_own_package_is_an_edge(tmp_path: Path) -> None:
    # The registry pattern: the package imports its plug-ins, which import the package.
    _write(tmp_path, {
        "pkg/__init__.py": "def load():\n    from pkg import plugin\n",
        "pkg/plugin.py": "from pkg import load\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg": {"pkg.plugin"}, "pkg.plugin": {"pkg"}}
    assert strongly_connected(graph) == [frozenset({"pkg", "pkg.plugin"})]


def test_a_package_init_is_an_edge_of_what_imports_inside_it(tmp_path: Path) -> None:
    # Importing pkg.sub.x runs pkg/sub/__init__, which imports pkg.y: y -> sub -> y.
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from pkg.sub.x import X\nfrom pkg import y\n",
        "pkg/sub/x.py": "X = 1\n",
        "pkg/y.py": "from pkg.sub.x import X\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.x"] == frozenset()  # its own package is already being imported
    assert strongly_connected(graph) == [frozenset({"pkg.sub", "pkg.y"})]


def test_no_merge_conflict_markers_in_the_tree() -> None:
    """A merge resolved by hand once left git's markers in a document; git adds such a file
    without a word. Every tracked text file is read."""
    import subprocess

    root = SRC.parent
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                           check=True).stdout.decode().split("\0")
    markers = ("<<<<<<< ", ">>>>>>> ")
    found = []
    for name in filter(None, files):
        path = root / name
        if not path.is_file() or path.suffix in {".png", ".gz", ".pyc"}:
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{i}" for i, line in enumerate(lines, 1)
                  if line.startswith(markers) or line == "======="]
    assert not found, found


def test_tests_import_their_helpers_as_pytest_puts_them_on_the_path() -> None:
    """pytest puts tests/ on sys.path (rootdir-relative packages, no tests/__init__.py):
    `from drain.factory import ...` works under `./dev test`; `from tests.drain...` only
    when the current directory happens to be on the path too (`python -m pytest`)."""
    found = []
    for path in sorted((SRC.parent / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.relative_to(SRC.parent)}: {n}" for n in names
                      if n == "tests" or n.startswith("tests.")]
    assert not found, found
