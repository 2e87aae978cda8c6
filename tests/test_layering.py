"""The package's layering, read from its source: no import cycles, commands stay commands.

Every ``import`` in ``profiler/`` and ``governors/`` counts, including those inside
functions (a deferred import hides a cycle from Python, not from a reader) and those
under ``if TYPE_CHECKING:`` (a type that one module names is still a dependency). An
edge goes to the module named: ``from a.b import c`` is an edge to ``a.b.c`` when that
is a module, else to ``a.b``; a package's ``__init__`` that a submodule import passes
through is not an edge, as Python imports it without the submodule's help.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("profiler", "governors")
ENTRY_POINTS = {"profiler.__main__"}  # may import the CLI: it is the CLI


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return dict(_modules())


@functools.cache
def _modules() -> dict[str, Path]:
    # Read once per session: the sources do not change while the tests run.
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:`` (a type only: nothing runs the import)."""
    return {id(n) for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for b in node.body for n in ast.walk(b)}


def imports_of(name: str, path: Path, known: set[str], runtime_only: bool = False) -> set[str]:
    """The project modules ``name`` imports anywhere in its source (``runtime_only``:
    leaving out those under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip = type_checking_nodes(tree) if runtime_only else set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a non-module attribute
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph(runtime_only: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a fresh copy: a test may change it)."""
    return {name: set(deps) for name, deps in _graph(runtime_only).items()}


@functools.cache
def _graph(runtime_only: bool) -> dict[str, frozenset[str]]:
    # Parsing every module takes ~1.5 s: once per session for each kind of graph.
    mods = modules()
    return {name: frozenset(imports_of(name, path, set(mods), runtime_only))
            for name, path in mods.items()}


def find_cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
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


def test_the_walk_sees_known_edges() -> None:
    """The walk itself: edges that exist today are found (a parser bug would find none)."""
    g = graph()
    assert "profiler.cli" in g["profiler.__main__"]
    assert "profiler.errors" in g["profiler.cli"]
    assert "governors" in g["profiler.cli.pin"]


def test_a_cycle_is_found() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    cycles = find_cycles(graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def room(name: str) -> str:
    """A package of profiler/ (profiler.sim), a module directly in it, or governors."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "profiler" else parts[0]


def test_no_package_knots() -> None:
    """Packages are layers: no two import each other, by any path, at run time (imports
    inside functions count). The simulated board plugs into the role factories from above
    (profiler.sim.platform), so no factory below it imports profiler.sim."""
    rooms: dict[str, set[str]] = {}
    for a, deps in graph(runtime_only=True).items():
        rooms.setdefault(room(a), set()).update(room(b) for b in deps if room(b) != room(a))
    knots = find_cycles(rooms)
    assert not knots, "package knots: " + "; ".join(" <-> ".join(k) for k in knots)
    below_sim = {"governors", "profiler.boards", "profiler.executors", "profiler.markers",
                 "profiler.power", "profiler.recordings"}
    assert not [r for r in below_sim if "profiler.sim" in rooms.get(r, set())]


def is_command(name: str) -> bool:
    """A module under profiler/cli/ that registers a subcommand (it defines `register`)."""
    if not name.startswith("profiler.cli.") or is_shared_cli(name):
        return False
    path = modules()[name]
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in tree.body)


#: What no command owns: the CLI package itself, and profiler/cli/common/ (argument types,
#: shared plumbing, progress bars); everything else in profiler/cli/ is a command.
def is_shared_cli(name: str) -> bool:
    return name in ("profiler.cli", "profiler.cli.common") or name.startswith("profiler.cli.common.")


def test_only_the_entry_point_imports_the_cli() -> None:
    g = graph()
    bad = sorted(f"{a} -> {b}" for a, deps in g.items() for b in deps
                 if b.startswith("profiler.cli") and not a.startswith("profiler.cli")
                 and a not in ENTRY_POINTS)
    assert not bad, "library modules importing the CLI: " + ", ".join(bad)


@pytest.mark.parametrize("kind", ["command", "shared"])
def test_no_command_imports_another(kind: str) -> None:
    """Commands only parse, call the library and render; what two of them need lives in
    a shared module, which imports no command either."""
    g = graph()
    commands = {m for m in g if is_command(m)}
    assert {"profiler.cli.layers", "profiler.cli.run", "profiler.cli.pin"} <= commands
    # profiler/cli/ holds commands only, beside cli/common/ for what they share
    assert {m for m in g if m.startswith("profiler.cli.") and not is_shared_cli(m)} == commands
    sources = commands if kind == "command" else {m for m in g if is_shared_cli(m)}
    bad = sorted(f"{a} -> {b}" for a in sources for b in g[a] if b in commands)
    assert not bad, f"{kind} modules importing a command module: " + ", ".join(bad)
