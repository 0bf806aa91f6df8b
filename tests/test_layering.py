"""The import graph of src/pybpf keeps the layering of docs/architecture.md.

Arrows only point down: ``pybpf.kernel`` and ``pybpf.emulated`` never import each other, and no
module imports (directly or through others) a module that imports it back. Imports are read
with ``ast`` from every module, those inside functions included: a lazy import is still a
dependency. Imports under ``if TYPE_CHECKING:`` run only for a type checker, yet they count too:
a module that needs another's types while that one imports it is one piece split in two.
Inside pybpf.emulated the floors (machine < maps < prog < net < the front) import only
downwards, and nothing outside the package imports its floors.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "pybpf"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules(root: Path) -> dict[str, Path]:
    """Python modules, and C extensions (by their source: they import no pybpf module)."""
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))
            + sorted((root / PACKAGE).rglob("*.c"))}


def _type_checking_blocks(tree: ast.AST) -> set[ast.AST]:
    """The nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                inside.update(ast.walk(stmt))
    return inside


def imports_of(name: str, path: Path, modules: set[str], type_only: bool = True) -> set[str]:
    """The pybpf modules ``name`` imports: ``from .x import y`` is x, or x.y when y is a
    module (``from . import x`` imports the module x); ``import pybpf.a.b`` is pybpf.a.b.
    ``type_only=False`` leaves out the imports under ``if TYPE_CHECKING:``."""
    if path.suffix == ".c":
        return set()
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    skip = set() if type_only else _type_checking_blocks(tree)
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base.pop()  # the package the module lives in
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & modules
            # Names that are not modules come from the target's own code.
            if submodules != {f"{target}.{alias.name}" for alias in node.names}:
                found.add(target)
            found |= submodules
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path = SRC, type_only: bool = True) -> dict[str, set[str]]:
    modules = all_modules(root)
    names = set(modules)
    return {name: imports_of(name, path, names, type_only) for name, path in modules.items()}


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when there is none (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in sorted(graph):
        if state.get(root):
            continue
        path = [root]
        stack = [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return []


def test_the_reader_resolves_relative_imports_and_submodules(tmp_path):
    pkg = tmp_path / "pybpf"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import thing\n")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n    from . import c\n")
    (pkg / "c.py").write_text("from .sub.b import x\nif TYPE_CHECKING:\n    from . import a\n")
    (pkg / "sub" / "__init__.py").write_text("from .. import c\n")
    (pkg / "sub" / "b.py").write_text("import pybpf.a\nfrom ..a import f\n")
    graph = import_graph(tmp_path)
    assert graph == {"pybpf": {"pybpf.a"}, "pybpf.a": {"pybpf.sub.b", "pybpf.c"},
                     "pybpf.c": {"pybpf.sub.b", "pybpf.a"}, "pybpf.sub": {"pybpf.c"},
                     "pybpf.sub.b": {"pybpf.a"}}
    assert find_cycle(graph) == ["pybpf.a", "pybpf.c", "pybpf.a"]
    assert import_graph(tmp_path, type_only=False)["pybpf.c"] == {"pybpf.sub.b"}
    assert find_cycle(import_graph(tmp_path, type_only=False)) == [
        "pybpf.a", "pybpf.c", "pybpf.sub.b", "pybpf.a"]


def test_no_import_cycle_in_pybpf_counting_type_only_imports():
    cycle = find_cycle(import_graph(type_only=True))
    assert not cycle, "import cycle (type-only imports counted): " + " -> ".join(cycle)


@pytest.mark.parametrize("importer, imported", [("kernel", "emulated"), ("emulated", "kernel")])
def test_backends_never_import_each_other(importer, imported):
    crossing = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if in_package(name, f"{PACKAGE}.{importer}")
        for target in targets if in_package(target, f"{PACKAGE}.{imported}"))
    assert not crossing, "; ".join(crossing)


# The emulated kernel's floors, lowest first (docs/architecture.md): a module may import its
# own floor and the floors below it, never one above. The front is the package's own modules.
EMULATED = f"{PACKAGE}.emulated"
FLOORS = ("machine", "maps", "prog", "net")


def floor_of(module: str) -> int | None:
    """The floor of a module of pybpf.emulated (len(FLOORS) for the front), else None."""
    if not in_package(module, EMULATED) or module == EMULATED:
        return None
    part = module[len(EMULATED) + 1:].split(".")[0]
    return FLOORS.index(part) if part in FLOORS else len(FLOORS)


def test_the_floor_reader_places_modules():
    assert floor_of(f"{EMULATED}.machine.rcu") == 0
    assert floor_of(f"{EMULATED}.net") == 3
    assert floor_of(f"{EMULATED}.system") == len(FLOORS)
    assert floor_of(EMULATED) is None and floor_of(f"{PACKAGE}.maps") is None


def test_the_emulated_floors_import_only_downwards():
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if floor_of(name) is not None
        for target in targets
        if floor_of(target) is not None and floor_of(target) > floor_of(name))
    assert not upward, "; ".join(upward)


def test_no_module_outside_imports_the_floors_of_the_emulated_backend():
    """Benchmarks, testing helpers and the rest use what pybpf.emulated exports; only the
    backend factory makes an EmulatedSystem."""
    allowed = {f"{PACKAGE}.backends": {f"{EMULATED}.system"}}
    reaching = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if not in_package(name, EMULATED)
        for target in targets
        if in_package(target, EMULATED) and target != EMULATED
        and target not in allowed.get(name, ()))
    assert not reaching, "; ".join(reaching)

