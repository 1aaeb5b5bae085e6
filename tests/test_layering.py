"""The compiler's layers import only downward (an AST walk over the package).

The folders of msc/ are the layers, from the bottom:

    ir (StencilIR, arguments, reference interpreter, linear form)
    -> frontend, textual (tracing; the .msc language) -> poly (PolyIR, schedules)
    -> codegen (kernel IR, lowering, halo plans, printers, the target registry)
    -> runtime (build and cache, buffers, kernels, halo library, emulators' loaders,
       distributed runs) -> tune (the tuner) -> targets (cpu, gpu, sunway, mpi)
    -> solvers (swCholesky) -> the public API: pde and the package's top-level modules.

A top-level module that imports nothing from msc (errors, version) is the
base, below everything. A module may import its own layer or a lower one.
The runtime sits below the targets because a target builds and loads through
it; distributed runs reach a target through the registry, by name. Every
import counts, also those made inside a function, with no exceptions; and no
two modules import each other, through any number of others.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "msc"  # folders are import paths

FOLDERS = [("ir",), ("frontend", "textual"), ("poly",), ("codegen",), ("runtime",), ("tune",), ("targets",),
           ("solvers",), ("pde",)]
BASE, API = -1, len(FOLDERS) - 1  # top-level modules: the base (leaves) or the API, beside pde


def layer(module: str) -> int:
    """The rank of `module` (a dotted name under msc) from its folder."""
    parts = module.split(".")[1:]
    if not parts:
        return API  # msc/__init__.py
    for k, folders in enumerate(FOLDERS):
        if parts[0] in folders:
            return k
    path = modules().get(module)
    if path is not None and path.parent == PACKAGE and not imports(path):
        return BASE
    return API


def name(rank: int) -> str:
    return "base" if rank == BASE else "API" if rank == API else "/".join(FOLDERS[rank])


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(("msc", *parts))] = path
    return out


def imports(path: Path) -> list[tuple[str, int]]:
    """(module imported, line) for every msc import of the file, outside `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("msc")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("msc") and node.level == 0:
            for a in node.names:  # `from msc.codegen import lower` imports a module when one has that name
                sub = f"{node.module}.{a.name}"
                out.append((sub if sub in modules() else node.module, node.lineno))
    return out


def test_layers_import_only_downward():
    problems: list[str] = []
    for module, path in sorted(modules().items()):
        for imported, line in imports(path):
            if layer(imported) > layer(module) and not any(
                    p.startswith(f"{path.relative_to(ROOT)}:{line}:") for p in problems):
                problems.append(f"{path.relative_to(ROOT)}:{line}: {module} ({name(layer(module))}) "
                                f"imports {imported} ({name(layer(imported))})")
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_the_check_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from msc.targets.cpu.openmp import OpenMPTarget\n")
    assert imports(bad) == [("msc.targets.cpu.openmp", 2)]
    assert layer("msc.targets.cpu.openmp") > layer("msc.poly.schedule")
    assert layer("msc.codegen.lower") < layer("msc.runtime.distributed") < layer("msc.targets.cpu.openmp")
    assert layer("msc.errors") == BASE < layer("msc.ir") < layer("msc.frontend.trace") == layer("msc.textual.parser")
    assert layer("msc.stencil") == layer("msc.pde.steps") == layer("msc") == API


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_two_modules_import_each_other():
    """No import circle of any length, imports inside functions included (a package's
    __init__ counts as the module of its name)."""
    known = modules()
    graph = {m: {i for i, _ in imports(p) if i in known and i != m} for m, p in known.items()}
    assert circles(graph) == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles(graph))


def test_the_circle_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert circles(graph) == [["a", "b", "c"]]
