"""The package's shape, as issue 12 asks it: no module-level import cycle, and modules a
reader can hold (about 500 lines at most)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PKG = Path(__file__).resolve().parents[1] / "ficco_sim"
MAX_LINES = 500


def _module(path: Path, pkg: Path = PKG) -> str:
    parts = path.relative_to(pkg.parent).with_suffix("").parts
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


def _graph(pkg: Path = PKG) -> nx.DiGraph:
    files = {_module(p, pkg): p for p in pkg.rglob("*.py")}
    g = nx.DiGraph()
    for name, path in files.items():
        g.add_node(name)
        for dep in _top_level_imports(path, name):
            if dep in files and dep != name:
                g.add_edge(name, dep)
    return g


def _cycles(pkg: Path = PKG) -> list[list[str]]:
    g = _graph(pkg)
    # a package's __init__ importing its own submodules is how a package is made, not a cycle
    # of meaning: leave out the edges from a submodule up to its package's __init__
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if a.startswith(b + ".")])
    return list(nx.simple_cycles(g))


def test_no_module_level_import_cycle():
    cycles = _cycles()
    assert not cycles, f"module-level import cycles: {cycles[:5]}"


def test_the_detector_sees_a_cycle(tmp_path):
    pkg = tmp_path / "ficco_sim"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub import c\n")
    (pkg / "a.py").write_text("from .b import x\n\ndef f():\n    from .c import y\n")
    (pkg / "sub" / "__init__.py").write_text("from .c import z\n")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    assert _top_level_imports(pkg / "a.py", "ficco_sim.a") == {"ficco_sim.b", "ficco_sim.b.x"}
    assert _cycles(pkg) == []           # a function's import is no edge; a package's own submodules are fine
    (pkg / "b.py").write_text("import ficco_sim.sub.c\nx = 1\n")
    assert sorted(map(sorted, _cycles(pkg))) == [["ficco_sim.a", "ficco_sim.b", "ficco_sim.sub.c"]]


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
            "heavy = ('pandas', 'numpy', 'networkx', 'simpy', 'matplotlib', 'scipy', 'torch', 'ficco_sim.engine.', "
            "'ficco_sim.explore.estimate', 'ficco_sim.simulate'); "
            "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h if h.endswith('.') else h + '.') "
            "for h in heavy)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_lazy_export_named_like_its_submodule_stays_the_export():
    """In a fresh interpreter, the submodule imported first (the import system binds it on
    its package), then the export of the same name read from the package."""
    import subprocess
    import sys
    code = ("import ficco_sim.calibrate.fit_gemm, ficco_sim.traces.replay, ficco_sim.simulate; "
            "from ficco_sim.calibrate import fit_gemm; from ficco_sim.traces import replay; "
            "from ficco_sim import simulate; print(all(callable(f) for f in (fit_gemm, replay, simulate)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
