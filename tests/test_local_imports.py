"""Imports sit at the top of a module, unless they keep a heavy library out of a light path.

A function-local import is allowed only where importing at the top would load something heavy
for every importer: a third-party library (numpy, pandas, duckdb, torch, gradio, ...), a slow
standard-library module, or a project module whose import loads one of those. What a project
module loads is read from source: its import-time imports (function bodies and
`if TYPE_CHECKING:` blocks excluded), its parent packages' (importing `store.csv_safe` runs
store/__init__.py, which opens DuckDB's module), and, transitively, theirs. A name taken from a
module with a module `__getattr__` (engine.api) is loaded on demand, so it counts as heavy.
Any other local import is either moved to the top or named below with its reason.
"""
from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

from tests.test_layering import MODULES, PACKAGES, _loaded_by, _project, _resolve

# Standard-library modules slow enough to import (or pulling in enough) that a light path
# should not pay for them; the rest of the standard library is cheap and imported at the top.
SLOW_STDLIB = frozenset({
    "asyncio", "multiprocessing", "concurrent", "ssl", "http", "urllib", "email", "xml", "tarfile",
    "zipfile", "sqlite3", "importlib", "tkinter", "unittest", "pydoc", "doctest", "lzma", "bz2",
    "ctypes", "curses", "venv", "ensurepip", "wsgiref", "xmlrpc", "smtplib", "ftplib", "imaplib",
    "poplib", "mailbox", "socketserver", "webbrowser", "cProfile", "profile", "pstats", "tracemalloc",
    "inspect", "ast", "dis", "pickletools", "decimal", "fractions", "statistics", "csv", "uuid",
    "secrets", "getpass", "gzip", "shlex", "platform", "locale", "gettext", "calendar", "difflib",
    "pprint"})
# What a light path must never load; the classification is checked against a real import of them.
HEAVY_LIBRARIES = ("torch", "transformers", "duckdb", "pandas", "numpy", "scipy", "gradio", "pyarrow")

# Modules whose light imports stay inside functions, with the reason.
LIGHT_LOCAL_MODULES: dict[str, str] = {
    # `import engine.api` loads 3 project modules rather than 28: each name loads on first use
    # (module __getattr__), its helpers' imports too.
    "engine.api": "the API loads what a caller uses, when it is used",
}
# Light local imports kept local, "module imports name", each with its reason. Keep them few.
LIGHT_LOCAL_EXCEPTIONS: dict[str, str] = {
    "engine.limits imports resource": "Unix only: where it is missing, the limit is skipped (inside a try)",
    # A seam: tests/test_why_cited_child.py replaces the use case on its module to prove the web
    # process never fits; the child's server reads it at call time so that an in-process fit would fail.
    "demo.fit_child imports engine.usecases.bias.why_cited.why_cited": "read at call time (a test's seam)",
}


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_time_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: outside functions and `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            return
        children = node.orelse if isinstance(node, ast.If) and _is_type_checking(node.test) else (
            list(ast.iter_child_nodes(node)))
        for child in children:
            visit(child)

    visit(tree)
    return found


def local_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports inside function bodies, each once (a nested function's too)."""
    seen: dict[int, ast.Import | ast.ImportFrom] = {}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    seen.setdefault(id(node), node)
    return sorted(seen.values(), key=lambda n: (n.lineno, n.col_offset))


def _top_names(module: str) -> set[str]:
    """Names a module binds at import time (a module `__getattr__` serves the others)."""
    tree = _tree(MODULES[module])
    names = {a.asname or a.name.split(".")[0] for n in import_time_imports(tree) for a in n.names}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        for target in node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]:
            if isinstance(target, ast.Name):
                names.add(target.id)
    return names


def targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import statement loads, one dotted name per imported name."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _resolve(module, node) if module in MODULES else node.module or ""
    return [f"{base}.{a.name}" for a in node.names]


def heavy_in(name: str) -> set[str]:
    """The heavy things importing `name` (a module, or a module's attribute) loads."""
    root = name.split(".")[0]
    if root == "__future__":
        return set()
    if root not in PACKAGES:
        return {root} if root not in sys.stdlib_module_names or root in SLOW_STDLIB else set()
    module = _project(name)
    if module is None:
        return {name}
    heavy: set[str] = set()
    attribute = name[len(module) + 1:].split(".")[0]
    if attribute and attribute not in _top_names(module) and any(
            isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in _tree(MODULES[module]).body):
        heavy.add(f"{module}.__getattr__")
    parts = module.split(".")
    for loaded in (".".join(parts[:end]) for end in range(1, len(parts) + 1)):
        if loaded in MODULES:
            heavy |= _closure(loaded, MODULES[loaded])
    return heavy


_IN_PROGRESS: set[str] = set()


@cache
def _closure(module: str, path: Path) -> frozenset[str]:
    """What importing `module` (read from `path`) loads that is heavy."""
    if module in _IN_PROGRESS:  # a circle (the layering test refuses them) adds nothing new
        return frozenset()
    _IN_PROGRESS.add(module)
    try:
        return frozenset().union(*(heavy_in(name) for node in import_time_imports(_tree(path))
                                   for name in targets(module, node)))
    finally:
        _IN_PROGRESS.discard(module)


def light_local_imports() -> list[str]:
    """Every function-local import of something light, as "module imports name"."""
    found: list[str] = []
    for module, path in MODULES.items():
        if module in LIGHT_LOCAL_MODULES:
            continue
        for node in local_imports(_tree(path)):
            names = targets(module, node)
            if not set().union(*(heavy_in(n) for n in names)):
                found.extend(f"{module} imports {n}" for n in names)
    return sorted(set(found))


def test_local_imports_keep_only_heavy_modules_out_of_the_top():
    assert light_local_imports() == sorted(LIGHT_LOCAL_EXCEPTIONS)


def test_the_checker_sees_a_light_local_import(tmp_path, monkeypatch):
    path = tmp_path / "probe.py"
    path.write_text("import json\n\ndef f():\n    import re\n    import numpy\n    import shlex\n"
                    "    from engine.errors import UserError\n    from store.csv_safe import safe_cell\n"
                    "    from engine.api import explain\n    from engine import api\n\n"
                    "    def g():\n        from . import paths\n")
    monkeypatch.setitem(MODULES, "engine.probe", path)
    found = [f for f in light_local_imports() if f.startswith("engine.probe ")]
    # numpy and shlex are heavy; store.csv_safe loads store/__init__.py (DuckDB); engine.api's
    # names load on demand; `import json` is already at the top.
    assert found == ["engine.probe imports engine.errors.UserError", "engine.probe imports engine.paths",
                     "engine.probe imports re"]


def test_what_the_checker_calls_light_loads_nothing_heavy():
    # The classification against a real import: every project module it calls light, imported
    # together in a fresh interpreter, loads none of the heavy libraries.
    light = [m for m in MODULES if not heavy_in(m) and not m.endswith("__main__")]
    assert len(light) > 50
    assert _loaded_by(light, HEAVY_LIBRARIES) == []
