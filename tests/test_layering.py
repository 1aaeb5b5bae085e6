"""The compiler's layers import only downward (an AST walk over the package):

    base (errors, IR) -> frontends, interpreters and IR analyses -> poly/schedule
    -> kernel IR (lowering, halo planning) -> runtime support (build, load,
    call, halo library) -> targets (platforms, passes, printers, registry,
    tuner) -> runtime drivers (distributed runs) -> the public API.

A module may import its own layer or a lower one. Runtime support sits
below the targets because a target's toolchain builds and loads through it;
the distributed driver sits above them because it compiles a rank's
kernels with the kernel's own target. Every import counts, also those made
inside a function, except the few deliberate ones listed in UPWARD
(none of them closes a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"msc": ROOT / "msc"}  # folders are import paths

LAYERS = [
    ("base", ("msc.errors", "msc.ir")),
    ("frontend", ("msc.frontend", "msc.textual", "msc.reference", "msc.arguments", "msc.linear")),
    ("poly/schedule", ("msc.poly", "msc.schedule")),
    ("kernel IR", ("msc.codegen.kernel_ir", "msc.codegen.isl_ast", "msc.codegen.lower", "msc.codegen.halo_plan")),
    ("runtime support", ("msc.runtime.build", "msc.runtime.buffers", "msc.runtime.kernel", "msc.runtime.halo",
                         "msc.runtime.athread_emu", "msc.runtime.cuda_emu", "msc.runtime.cuda_kernel",
                         "msc.runtime.checkpoint", "msc.runtime.output", "msc.runtime.progress", "msc.plot")),
    ("targets", ("msc.codegen", "msc.tuner")),
    ("runtime drivers", ("msc.runtime",)),
]
# Everything else (msc itself, msc.stencil, msc.cli, msc.solvers, ...) is the public API, the top layer.

# (importer, imported): deliberate upward imports
UPWARD = {
    ("msc.textual.parser", "msc.stencil"): "load_stencil wraps the parsed IR in the user's Stencil",
    ("msc.runtime.kernel", "msc.runtime.distributed"): "run(comm=...) hands the run to the distributed driver",
}


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


def _only_version(path: Path) -> bool:
    """The module uses the bare `msc` package for msc.__version__ only."""
    tree = ast.parse(path.read_text())
    uses = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "msc"]
    return all(u == "__version__" for u in uses)


def test_layers_import_only_downward():
    problems: list[str] = []
    for module, path in sorted(modules().items()):
        for imported, line in imports(path):
            if imported == "msc" and _only_version(path):
                continue
            if layer(imported) > layer(module) and (module, imported) not in UPWARD and not any(
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
