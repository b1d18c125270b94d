"""The run pipeline's imports go one way: core (runner, planner, backends, write loop) never
reaches the store, the use cases or a face, and no module of it imports another in a circle,
function-local imports included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ("engine.runner", "engine.planner", "engine.run_request", "engine.provenance", "engine.backends",
        "engine.write_loop", "engine.backend_ray", "engine.study", "engine.experiment")


def _imports(module: str) -> set[str]:
    """Every module of this project that `module` imports, at its top or inside a function."""
    path = ROOT / (module.replace(".", "/") + ".py")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] in ("engine", "store", "demo", "gradio")
            and ((ROOT / (m.replace(".", "/") + ".py")).is_file() or m.split(".")[0] in ("gradio", "store"))}


def test_core_of_the_run_pipeline_imports_no_store_use_case_or_face():
    for module in CORE:
        bad = sorted(m for m in _imports(module)
                     if m.startswith(("store", "gradio", "demo", "engine.usecases", "engine.commands")))
        assert not bad, f"{module} imports {bad}"


def test_the_run_pipeline_has_no_import_circle():
    modules = CORE + ("engine.usecases.run", "engine.usecases.study", "engine.commands.run")
    graph = {m: {t for t in _imports(m) if t in modules} for m in modules}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(t == goal or (t not in seen and reaches(t, goal, seen | {t})) for t in graph[start])

    circles = [m for m in modules if reaches(m, m, {m})]
    assert not circles, circles


def test_faces_reach_the_run_pipeline_through_the_use_cases_only():
    assert not {m for m in _imports("demo.handlers.run") if m.startswith("engine.commands")}
    assert not {m for m in _imports("demo.jobs") if m.startswith("engine.commands")}
