"""Imports flow one way: core <- store <- use cases <- presentation and the API <- faces (the CLI,
the app), with no circles.

Every module's imports are read from its source with `ast`, function-local ones included (a
local import hides a cycle from Python, not from this test; tests/test_local_imports.py says which
imports may sit inside a function). The layers are DESIGN.md's:

- core: engine/ except the use cases, presentation, the API and the CLI. No DuckDB, no Gradio, no store.
- store: store/. Of the project, it imports only the engine's types, errors and limits (a leaf
  module of OS limits that the sandbox and the loader's child share).
- use cases: engine/usecases/, in folders by what a user does (runs, bias, judges, compare, study,
  storage) over a ground of shared modules; one folder imports another one way (below).
- presentation and the API: engine/presentation/ (formatting, display: how results read, which the
  faces share) and the curated API in engine/api.py, which hands out use cases and presentation
  alike. The use cases do not import presentation, bar the named exceptions below.
- faces: the CLI (engine/__main__.py, engine/commands/) and the app (demo/). A face never imports
  another face, and imports only the use cases, presentation, the API and the ground, bar named
  exceptions.

Inside the core, engine/'s concept folders (docs/architecture.md) import one way too: the ground
(engine's top-level leaf modules: types, errors, paths, limits, bounds, sink, suggest) imports
no folder; datasets, prompting and statistics (the pure core) never import generation, so they
load no torch; generation imports only the ground; running and judges sit above both.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "store", "demo")
STORE_MAY_IMPORT = {"engine.types", "engine.errors", "engine.limits"}
RANK = {"core": 0, "store": 1, "usecases": 2, "presentation": 3, "api": 3, "cli": 4, "app": 4}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def layer(module: str) -> str:
    if module.startswith("store"):
        return "store"
    if module.startswith("demo"):
        return "app"
    if module == "engine.__main__" or module.startswith("engine.commands"):
        return "cli"
    # Inspect's tasks are use cases that Inspect's runner calls (engine/inspect_tasks).
    if module.startswith(("engine.usecases", "engine.inspect_tasks")):
        return "usecases"
    if module.startswith("engine.presentation"):
        return "presentation"
    if module == "engine.api":
        return "api"
    return "core"


# Which folders of engine/ each folder may import, besides itself and the ground.
FOLDER_MAY_IMPORT: dict[str, set[str]] = {
    "ground": set(),
    "datasets": set(),
    "prompting": {"datasets"},
    "statistics": {"datasets", "prompting"},
    "generation": set(),
    "running": {"datasets", "prompting", "generation"},
    "judges": {"datasets", "prompting", "generation", "statistics"},
    "formats": set(),
}
PURE_CORE = ("datasets", "prompting", "statistics")


def folder(module: str) -> str | None:
    """The concept folder of an engine module ("ground" for engine's top-level leaf modules);
    None outside the core (use cases, API, CLI, store, app)."""
    parts = module.split(".")
    if parts[0] != "engine" or layer(module) != "core":
        return None
    if len(parts) >= 2 and parts[1] in FOLDER_MAY_IMPORT:
        return parts[1]
    return "ground"


def folder_arrows() -> list[str]:
    wrong = []
    for module in MODULES:
        mine = folder(module)
        if mine is None:
            continue
        for target in sorted(t for t in (_project(n) for n in imports_of(module)) if t):
            theirs = folder(target)
            if theirs is None or theirs == mine or target == "engine" or module.startswith(target + "."):
                continue
            if theirs != "ground" and theirs not in FOLDER_MAY_IMPORT[mine] or (mine == "ground"):
                wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    return wrong


# The use cases' folders, by what a user does, and which of them each may import besides itself and
# the use cases' ground (engine/usecases/*.py: what several folders share, importing no folder).
# Each arrow is there for a reason the importing side names:
USECASE_FOLDER_MAY_IMPORT: dict[str, set[str]] = {
    "ground": set(),  # served (a run or a judge on a server), experiments (an unknown one, in one line)
    "bias": set(),  # the bias report, the Bias page and its kept values, the tables, the choice model
    "judges": set(),  # explain, verify, the probes that read answers held fixed, agreement
    # A merge or an import keeps the Bias page's values (bias.kept); an export writes the bias report.
    "storage": {"bias"},
    # A run's end keeps the Bias page's values (bias.kept), evaluate gives CAS and CAB and imports
    # answers held in memory (storage), listing a study's experiments (bias.tables), items the
    # threshold of "used" (judges.used).
    "runs": {"bias", "judges", "storage"},
    "compare": {"runs"},  # the rerun marks (runs.rerun_marks)
    "study": {"runs", "bias"},  # a study runs experiments, keeps their values, fits across them
}
USECASE_GROUND = ["engine.usecases", "engine.usecases.experiments", "engine.usecases.served"]


def usecase_folder(module: str) -> str | None:
    """The folder of a use-case module ("ground" for engine/usecases/*.py); None elsewhere."""
    parts = module.split(".")
    if parts[:2] != ["engine", "usecases"]:
        return None
    is_package = module in MODULES and MODULES[module].name == "__init__.py"
    return parts[2] if len(parts) > 3 or len(parts) == 3 and is_package else "ground"


def usecase_folder_arrows() -> list[str]:
    wrong = []
    for module, targets in _graph().items():
        mine = usecase_folder(module)
        if mine is None:
            continue
        for target in sorted(targets):
            theirs = usecase_folder(target)
            if theirs is None or theirs == mine or theirs == "ground" and mine != "ground":
                continue
            if theirs not in USECASE_FOLDER_MAY_IMPORT[mine]:
                wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    return wrong


# Imports of presentation by the use cases, "module imports target", each with its reason. A result's
# notebook repr is imported when the result is shown, so that it reads as the CLI prints it
# wherever it came from (a use case, the API, a face); attaching it elsewhere would make a repr
# depend on what else was imported.
USECASES_PRESENTING_EXCEPTIONS = {
    "engine.usecases.bias.report imports engine.presentation.display": "BiasReport's notebook repr",
    "engine.usecases.runs.evaluate imports engine.presentation.display": "Evaluation's notebook repr",
}
USECASES_PRESENTING = set(USECASES_PRESENTING_EXCEPTIONS)


def usecases_presenting() -> list[str]:
    return sorted(f"{module} imports {target}" for module, targets in _graph().items()
                  if layer(module) == "usecases" for target in targets if layer(target) == "presentation")


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """Every module (project or third-party) that `module` imports anywhere in its source."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            names.add(target)
            # `from engine import api` imports the module engine.api.
            names.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES)
    return names


def _project(name: str) -> str | None:
    """The project module an imported name refers to (the longest known prefix), or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in MODULES:
            return candidate
    return None


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module in MODULES:
        targets = {_project(n) for n in imports_of(module)}
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    return graph


def back_arrows() -> list[str]:
    wrong = []
    for module in MODULES:
        mine = layer(module)
        for name in sorted(imports_of(module)):
            top = name.split(".")[0]
            if mine in ("core", "store") and top in ("gradio", "demo"):
                wrong.append(f"{module} ({mine}) imports {name}")
            if mine == "core" and top in ("duckdb", "store"):
                wrong.append(f"{module} ({mine}) imports {name}")
            target = _project(name)
            if target is None or target == module or module.startswith(target + "."):
                continue
            theirs = layer(target)
            if mine == "store" and theirs != "store" and target not in STORE_MAY_IMPORT and target != "engine":
                wrong.append(f"{module} (store) imports {target}")
            elif {mine, theirs} == {"cli", "app"}:
                wrong.append(f"{module} ({mine}) imports {target} ({theirs}): a face never imports another")
            elif RANK[theirs] > RANK[mine] and f"{module} imports {target}" not in USECASES_PRESENTING:
                wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    return wrong


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_points_up_a_layer():
    assert back_arrows() == []


def test_engine_folders_import_one_way():
    assert folder_arrows() == []


def test_every_core_module_sits_in_a_folder_its_name_says():
    # The ground is small on purpose: a new module goes into the folder of what it is.
    ground = sorted(m for m in MODULES if folder(m) == "ground")
    assert ground == ["engine", "engine.bounds", "engine.errors", "engine.limits", "engine.paths", "engine.sink",
                      "engine.suggest", "engine.types"]
    assert {folder(m) for m in MODULES} - {None} == set(FOLDER_MAY_IMPORT)


def _loaded_by(names: list[str], heavy: tuple[str, ...]) -> list[str]:
    """Which of `heavy` importing `names` loads, in a fresh interpreter."""
    import json
    import subprocess
    import sys

    code = ("import json, sys\n" + "".join(f"import {n}\n" for n in names)
            + f"print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_pure_core_loads_no_torch():
    # Import every module of datasets, prompting and statistics.
    names = sorted(m for m in MODULES if folder(m) in PURE_CORE)
    assert _loaded_by(names, ("torch", "transformers", "duckdb", "gradio")) == []


# A face plans a judge (what explain or verify will do, refused in one line where it cannot)
# before any model loads: the judges' definitions and plan, and the use cases that read the store
# for them, load no torch until a judge is loaded.
JUDGE_PLANNING = ("engine.judges.registry", "engine.judges.plan", "engine.usecases.judges.judge_runs",
                  "engine.usecases.judges.explain", "engine.usecases.judges.verify")


def test_planning_a_judge_loads_no_torch():
    assert set(JUDGE_PLANNING) <= set(MODULES)
    assert _loaded_by(list(JUDGE_PLANNING), ("torch", "transformers", "gradio")) == []


def test_no_modules_import_each_other_in_a_circle():
    assert cycles() == []


def test_use_case_folders_import_one_way():
    assert usecase_folder_arrows() == []


def test_every_use_case_sits_in_a_folder():
    # The use cases' ground is small on purpose: a new use case goes into the folder of what a user does.
    ground = sorted(m for m in MODULES if usecase_folder(m) == "ground")
    assert ground == USECASE_GROUND
    assert {usecase_folder(m) for m in MODULES} - {None} == set(USECASE_FOLDER_MAY_IMPORT)


def test_the_use_cases_import_presentation_only_where_named():
    assert usecases_presenting() == sorted(USECASES_PRESENTING)


def test_presentation_imports_only_the_core():
    wrong = [f"{m} imports {t}" for m, targets in _graph().items() if layer(m) == "presentation"
             for t in targets if layer(t) not in ("core", "presentation")]
    assert wrong == []


def test_the_use_case_folder_checker_sees_a_wrong_arrow(tmp_path, monkeypatch):
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from engine.usecases.runs.run import run_experiment\n"
                    "from engine.usecases.served import ServerOptions\n")
    monkeypatch.setitem(MODULES, "engine.usecases.bias.probe", path)
    assert usecase_folder_arrows() == [
        "engine.usecases.bias.probe (bias) imports engine.usecases.runs.run (runs)"]


def test_every_module_is_under_500_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


# The checker itself: it must see what it is there to see.
@pytest.mark.parametrize(("source", "expected"), [
    ("import duckdb\n", "duckdb"),
    ("def f():\n    from store import db\n", "store.db"),
    ("from . import types\n", "engine.types"),
])
def test_the_walker_sees_local_and_relative_imports(tmp_path, monkeypatch, source, expected):
    path = tmp_path / "probe.py"
    path.write_text(source)
    monkeypatch.setitem(MODULES, "engine.probe", path)
    assert expected in imports_of("engine.probe")


def test_the_layers_are_the_designs():
    assert [layer(m) for m in ("engine.prompting.prompts", "store.db", "engine.usecases.runs.run",
                               "engine.presentation.formatting", "engine.api",
                               "engine.commands.run", "engine.__main__", "demo.app")] == [
        "core", "store", "usecases", "presentation", "api", "cli", "cli", "app"]


# What the CLI may import of the project: the use cases, presentation, the API, its own modules and the
# ground. Everything below the use cases (the core's folders, the store) is reached through them.
CLI_MAY_IMPORT = ("engine.usecases", "engine.presentation", "engine.api", "engine.commands", "engine.__main__")
GROUND = ("engine", "engine.errors", "engine.types", "engine.paths", "engine.bounds", "engine.limits",
          "engine.suggest", "engine.sink")
# Named exceptions, each with its reason; keep them few.
CLI_EXCEPTIONS = {
    # OWASP's rule against formula injection, one home for every CSV cell the tool writes (the
    # app's too). Pure: it reads no store; routing it through a use case would only rename it.
    "store.csv_safe": "the one rule for CSV cells a spreadsheet could run",
}


def face_imports_past_the_use_cases(face: str) -> list[str]:
    """Imports of a face's modules that reach past the use cases (the ground and third-party
    modules are fine; a face's own modules too)."""
    wrong = []
    for module in MODULES:
        if layer(module) != face:
            continue
        for name in sorted(imports_of(module)):
            target = _project(name)
            if target is None or target in GROUND or target in CLI_EXCEPTIONS:
                continue
            if face == "cli" and any(target == p or target.startswith(p + ".") for p in CLI_MAY_IMPORT):
                continue
            if face == "app" and (target.startswith("demo") or layer(target) in ("usecases", "presentation", "api")):
                continue
            wrong.append(f"{module} imports {name}")
    return wrong


def test_the_cli_imports_only_use_cases_the_api_and_the_ground():
    assert face_imports_past_the_use_cases("cli") == []


# The app's named exceptions, "module imports target": its own server plumbing and sandboxes,
# where a use case would only rename a store or engine function. Keep them few.
APP_EXCEPTIONS = {
    "demo.__main__ imports store.db": "the server checks the store once at start, before any tab reads it",
    "demo.results_repo imports store.db": "a results repository's stores are opened at start (server plumbing)",
    "demo.jobs imports store.db": "utc_now: the job queue's times on the store's clock",
    "demo.jobs imports engine.running.run_request": "the worker's default model loader; the use cases take it as `load`",
    "demo.settings imports store.server_paths": "the one rule that masks server paths in what a visitor reads",
    "demo.fit_child imports store.sandbox": "the why-cited fit's bounded child process takes the store sandbox's environment",
    "demo.judges_child imports store.sandbox": "the Judges tab's bounded child process takes the same environment",
    # A stranger's upload is read only in a capped child process (the CLI reads its user's own
    # file in process, through the use cases): the dataset sandbox is the app's alone.
    "demo.job_work imports engine.datasets.load_child": "the dataset sandbox: a job's read",
    "demo.handlers.grid imports engine.datasets.load_child": "the dataset sandbox: a grid's plan reads the upload",
    "demo.handlers.run imports engine.datasets.load_child": "the dataset sandbox: the upload's check",
    "demo.handlers.sql imports store.queries.console": "the SQL console runs a visitor's SQL in the store's sandbox; the app is its one face",
    "demo.handlers.sql imports store.examples": "the README's example queries: the SQL tab's data",
    "demo.handlers.why_cited imports store.state_cache": "the app's memo of its own pages per store state; it reads no store",
    "demo.handlers.judges imports store.state_cache": "the same memo, for the agreements the Judges tab computed",
    "demo.render imports engine.prompting.citations": "the one parser of citation marks: the drill-down marks the spans the metrics counted",
}
# Imports of the app that still reach past the use cases. This list may only shrink:
# move the decision into a use case and strike its line; never add one.
APP_NOT_YET = [
    "demo.handlers.run imports engine.datasets.data",  # dataset_location: a typed path, `sample` as the CLI reads it
]


def test_the_app_imports_only_use_cases_the_api_and_the_ground():
    found = face_imports_past_the_use_cases("app")
    assert sorted(found) == sorted([*APP_EXCEPTIONS, *APP_NOT_YET])
    assert not set(APP_EXCEPTIONS) & set(APP_NOT_YET)


def test_the_app_checker_sees_an_import_past_the_use_cases(tmp_path, monkeypatch):
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from store.queries import count_runs\n"
                    "from engine.usecases.runs.listing import holds_runs\nfrom engine.api import RunRequest\n"
                    "from demo.render import SMOKE_NOTE\nfrom engine.types import MODES\n")
    monkeypatch.setitem(MODULES, "demo.probe", path)
    assert sorted(face_imports_past_the_use_cases("app")) == sorted([*APP_EXCEPTIONS, *APP_NOT_YET,
                                                                     "demo.probe imports store.queries"])


def test_the_face_checker_sees_an_import_past_the_use_cases(tmp_path, monkeypatch):
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from engine.statistics.stats import BOOTSTRAP_APPROXIMATE_BELOW\n"
                    "from store.queries import explanation_rates\nfrom engine.usecases.runs.run import SMOKE\n"
                    "from engine.errors import UserError\nimport pandas\n")
    monkeypatch.setitem(MODULES, "engine.commands.probe", path)
    assert face_imports_past_the_use_cases("cli") == [
        "engine.commands.probe imports engine.statistics.stats", "engine.commands.probe imports store.queries"]
