"""Package attributes imported on first use, so that importing a package (as the CLI does for
every subcommand's parser, and ``import ficco_sim`` before anything) does not import what only
some commands need: numpy, pandas, networkx and the engines take most of a second to import.

A package's ``__init__`` calls :func:`lazy_package` with the names it exports and the module
each comes from. An export named like a submodule (``calibrate.fit_gemm``, the function of
``calibrate/fit_gemm.py``) stays the export when the submodule is imported, as it did when
the package imported its exports eagerly.

>>> import sys, types
>>> pkg = sys.modules["demo_pkg"] = types.ModuleType("demo_pkg")
>>> lazy_package("demo_pkg", {"dumps": "json"})
>>> pkg.dumps({"a": 1}), "dumps" in dir(pkg)
('{"a": 1}', True)
>>> del sys.modules["demo_pkg"]
"""

from __future__ import annotations

import importlib
import sys
import types


class _LazyPackage(types.ModuleType):
    """A package module whose exports (``_lazy``: name -> module) are read from their modules,
    which are imported when first needed."""

    _lazy: dict[str, str]

    def __getattr__(self, name: str) -> object:
        where = self.__dict__.get("_lazy", {}).get(name)
        if where is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        # read through every time (a sys.modules look-up once loaded), never kept here: a
        # mock.patch of the export's home then ends for the package too
        return getattr(importlib.import_module(where, self.__name__), name)

    def __setattr__(self, name: str, value: object) -> None:
        # importing submodule `name` binds it here; an export of that name wins (read lazily)
        if (name in self.__dict__.get("_lazy", {}) and isinstance(value, types.ModuleType)
                and value.__name__ == f"{self.__name__}.{name}"):
            return
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(self.__dict__) | set(self.__dict__.get("_lazy", {})))


def lazy_package(package: str, exports: dict[str, str]) -> None:
    """Make the (already imported) module ``package`` import attribute ``name`` from module
    ``exports[name]`` (relative to the package where it starts with a dot) when first read."""
    module = sys.modules[package]
    module.__class__ = _LazyPackage
    module.__dict__["_lazy"] = dict(exports)
