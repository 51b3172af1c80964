"""The package's modules import one another without a cycle, and the core needs NumPy only.

Every `from .x import ...` / `from .. import x` in minillm/, at any depth in a file (lazy
imports inside functions count too), is an edge; the graph must have a topological order.
"""
import ast
import sys
from pathlib import Path

from tests.helpers import topological_order

PACKAGE = Path(__file__).resolve().parents[1] / "minillm"
OPTIONAL = {"torch", "transformers", "safetensors", "tokenizers", "threadpoolctl", "gguf",
            "hypothesis", "matplotlib", "jinja2", "llama_cpp"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path) -> set[str]:
    """The minillm modules a file imports (a package counts as its __init__)."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            if not node.module:  # from . import x: x is a module of that package
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("minillm"))
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    return {m for m in found if m in modules and m != module_name(path)}


def test_no_import_cycles():
    graph = {module_name(p): internal_imports(p) for p in PACKAGE.rglob("*.py")}
    # A package's __init__ re-exports its modules; those edges point down, not up.
    order = topological_order(graph)
    assert len(order) == len(graph)


def test_the_core_imports_numpy_and_the_standard_library_only():
    for path in PACKAGE.rglob("*.py"):
        if path.parts[-2] in ("convert", "testing"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level: optional packages only inside functions
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            for name in names:
                top = name.split(".")[0]
                assert top not in OPTIONAL, f"{path.name} imports {name} at module level"
                assert top == "numpy" or top in sys.stdlib_module_names, (path.name, name)


def test_import_minillm_gives_the_serving_engine():
    """`import minillm` alone makes minillm.serving (the Engine) available, in a fresh
    interpreter where nothing else imported it first."""
    import subprocess

    code = ("import sys, minillm; assert 'minillm.serving' in sys.modules; "
            "print(minillm.serving.Engine.__module__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True)
    assert run.stdout.strip() == "minillm.serving.engine"
