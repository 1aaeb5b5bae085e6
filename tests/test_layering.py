"""The compiler's layers import only downward (an AST walk over the package):

    base (errors, IR) -> frontends, interpreters and IR analyses -> poly/schedule
    -> kernel IR (lowering, halo planning) -> runtime support (build, load,
    call, halo library) -> targets (platforms, passes, printers, registry,
    tuner) -> runtime drivers (distributed runs) -> the public API.

A module may import its own layer or a lower one. Runtime support sits
below the targets because a target's toolchain builds and loads through it;
the distributed driver sits above them because it compiles a rank's
kernels with the kernel's own target (the kernels reach it through a driver
it plugs in, so runtime support never imports it). Every import counts,
also those made inside a function, with no exceptions; and no two modules
import each other, through any number of others.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"msc": ROOT / "msc"}  # folders are import paths

LAYERS = [
    ("base", ("msc.errors", "msc.ir", "msc.version")),
    ("frontend", ("msc.frontend", "msc.textual", "msc.reference", "msc.arguments", "msc.linear")),
    ("poly/schedule", ("msc.poly", "msc.schedule")),
    ("kernel IR", ("msc.codegen.kernel_ir", "msc.codegen.isl_ast", "msc.codegen.lower", "msc.codegen.halo_plan")),
    ("runtime support", ("msc.runtime.build", "msc.runtime.buffers", "msc.runtime.kernel", "msc.runtime.halo",
                         "msc.runtime.athread_emu", "msc.runtime.cuda_emu", "msc.runtime.cuda_kernel",
                         "msc.runtime.checkpoint", "msc.runtime.output", "msc.runtime.progress", "msc.runtime.threads",
                         "msc.plot")),
    ("targets", ("msc.codegen", "msc.tuner")),
    ("runtime drivers", ("msc.runtime",)),
]
# Everything else (msc itself, msc.stencil, msc.cli, msc.solvers, ...) is the public API, the top layer.



def layer(module: str) -> int:
    """The rank of `module`: the most specific prefix listed wins."""
    best, rank = -1, len(LAYERS)
    for k, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), k
    return rank


def modules() -> dict[str, Path]:
    out = {}
    for package, directory in PACKAGES.items():
        for path in directory.rglob("*.py"):
            parts = path.relative_to(directory).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
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
                problems.append(f"{path.relative_to(ROOT)}:{line}: {module} ({LAYERS[layer(module)][0] if layer(module) < len(LAYERS) else 'API'}) "
                                f"imports {imported} ({LAYERS[layer(imported)][0] if layer(imported) < len(LAYERS) else 'API'})")
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_the_check_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from msc.codegen.openmp import OpenMPTarget\n")
    assert imports(bad) == [("msc.codegen.openmp", 2)]
    assert layer("msc.codegen.openmp") > layer("msc.schedule")
    assert layer("msc.codegen.lower") < layer("msc.codegen.openmp") < layer("msc.runtime.distributed")
    assert layer("msc.stencil") == len(LAYERS)


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
