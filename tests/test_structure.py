"""The package's shape, as issue 12 asks it: no module-level import cycle, and modules a
reader can hold (about 500 lines at most)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PKG = Path(__file__).resolve().parents[1] / "ficco_sim"
MAX_LINES = 500


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, name: str) -> set[str]:
    """Modules of the package ``path`` imports when it is imported (its module body, not a
    function's, and not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(body) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("ficco_sim"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                if not mod.startswith("ficco_sim"):
                    continue
                out.add(mod)
                for a in node.names:      # `from . import x` may name a submodule
                    out.add(f"{mod}.{a.name}")
    visit(tree.body)
    return out


def _graph() -> nx.DiGraph:
    files = {_module(p): p for p in PKG.rglob("*.py")}
    g = nx.DiGraph()
    for name, path in files.items():
        g.add_node(name)
        for dep in _top_level_imports(path, name):
            if dep in files and dep != name:
                g.add_edge(name, dep)
    return g


def test_no_module_level_import_cycle():
    g = _graph()
    # a package's __init__ importing its own submodules is how a package is made, not a cycle
    # of meaning: leave out the edges from a submodule up to its package's __init__
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if a.startswith(b + ".")])
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"module-level import cycles: {cycles[:5]}"


def test_the_detector_sees_a_cycle(tmp_path):
    a = tmp_path / "ficco_sim" / "a.py"
    a.parent.mkdir()
    a.write_text("from .b import x\n\ndef f():\n    from .c import y\n")
    assert _top_level_imports(a, "ficco_sim.a") == {"ficco_sim.b", "ficco_sim.b.x"}


def test_modules_are_short():
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_building_the_cli_imports_no_heavy_library():
    """Every command builds every subcommand's parser: that must not import pandas, numpy,
    networkx or the engines (a second of a `--help` or a one-point `simulate`)."""
    import subprocess
    import sys
    code = ("import sys; from ficco_sim.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('pandas', 'numpy', 'networkx', 'simpy', 'ficco_sim.engine.closed_form', "
            "'ficco_sim.explore.estimate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_lazy_export_named_like_its_submodule_stays_the_export():
    import ficco_sim.calibrate.fit_gemm  # noqa: F401  (binds the submodule's name on the package)
    import ficco_sim.traces.replay  # noqa: F401
    from ficco_sim.calibrate import fit_gemm
    from ficco_sim.traces import replay
    assert callable(fit_gemm) and callable(replay)
