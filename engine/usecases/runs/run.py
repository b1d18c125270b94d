"""Run an experiment: a dataset x one prompt configuration x RAG modes, stored as it goes.

    from engine.usecases.runs.run import ExperimentRequest, run_experiment
    outcome = run_experiment(ExperimentRequest(run_request, "data.jsonl", Path("runs.duckdb")))

Everything that can fail is checked before the first write: the settings, the dataset, the plan
(read from the store without creating it), the model and every prompt's length. Only then are
the experiment, its runs and the items created, in one transaction (engine.running.runner).

A face passes `progress` (called with a Progress at every step and after every stored batch)
and `stop` (asked between steps and after every batch; when it says yes, RunCancelled is raised
and what was committed stays). `load` replaces how a model is loaded (the app's cache);
`read_dataset` how a dataset file is read (the app's capped child process).
A study grid (comma lists) is engine.usecases.study.study.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.datasets.data import Dataset, load_dataset
from engine.errors import FieldError, RunCancelled
from engine.generation import model_check, model_choice
from engine.generation.model_choice import (
    REAL_MAX_NEW_TOKENS,
    SMOKE,  # a value of this API (default_max_new_tokens); torch-free
    SMOKE_MAX_NEW_TOKENS,
    resolve_model,
)
from engine.paths import default_db_path, store_writable_problem
from engine.prompting.study import plan_line
from engine.running.run_request import Rerun, load_model_for
from engine.usecases.bias.kept import after_nothing_to_do, after_run
from engine.usecases.served import ServerOptions, check_server, record_served, served_run, server_backend

if TYPE_CHECKING:  # light at import: every CLI command builds the run parser, which reads the bounds here
    from engine.running.planner import ExperimentPlan
    from engine.running.run_request import ExperimentOutcome, RunRequest


Stage = Literal["planned", "loading", "generating", "stored"]
ProgressFn = Callable[["Progress"], None]
StopFn = Callable[[], bool]
LoadFn = Callable[["RunRequest"], Any]
ReadFn = Callable[..., "Dataset"]  # (path, *, skip_invalid, top_k) -> Dataset, as engine.datasets.data.load_dataset


@dataclass(frozen=True)
class RayOptions:
    """Generate on a pool of Ray actors; this process still writes the store."""

    address: str | None = None  # HOST:PORT of a running cluster, or "auto"; None: a Ray started here
    actors: int = 1  # model replicas
    gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs, else 0


@dataclass(frozen=True)
class ExperimentRequest:
    """One experiment: what to run, on which dataset, into which store, on which backend."""

    run: RunRequest
    dataset: str | Path | Dataset  # a file or folder, or a dataset already loaded
    db: Path | None = None  # None: engine.paths.default_db_path()
    # The name the store records for the dataset in place of its path (an upload's file name).
    dataset_name: str | None = None
    ray: RayOptions | None = None  # None: generate in this process
    server: ServerOptions | None = None  # an OpenAI-compatible server; excludes `ray`


@dataclass(frozen=True)
class StudySummary:
    """A study grid as planned, before the first model loads."""

    name: str
    n_experiments: int
    axis_sizes: tuple[tuple[str, int], ...]  # (axis, number of values), the grid's order
    n_shared: int  # vanilla runs copied from another metadata type's experiment
    n_runs: int
    n_items: int  # the most items a run covers
    n_generations: int  # answers the runs hold once complete
    n_todo: int  # to generate now
    n_copied: int  # to copy now

    @property
    def varied_axes(self) -> list[str]:
        """The axes with more than one value, in the grid's order; ["model"] when none is."""
        return [axis for axis, n in self.axis_sizes if n > 1] or ["model"]

    @property
    def plan_line(self) -> str:
        """'plan: 28 runs x 50 items = 1,400 generations; 300 to generate, 100 copied' (one line)."""
        return plan_line(self.n_runs, self.n_items, self.n_generations, self.n_todo, self.n_copied)


@dataclass(frozen=True)
class Progress:
    """One step of a run or a study, for a face to show (a progress bar, a job's status)."""

    stage: Stage  # planned, loading (a model), generating (starts), stored (a batch)
    message: str = ""
    total: int | None = None  # answers to generate (or copy), once known
    done: int = 0  # of those, stored so far in this invocation
    step: int = 0  # stored by this event
    experiment_id: str | None = None
    label: str | None = None  # the model as the store names it
    study: StudySummary | None = None  # with "planned", for a study


def check_request(request: RunRequest) -> None:
    """What a request to run needs besides the settings it was made with (RunRequest checks those)."""
    if not request.modes:
        raise FieldError("modes", "no {modes} to run")
    if request.rerun is not None and request.reruns:
        raise FieldError("reruns", "a rerun cannot ask for {reruns} of its own")


def check_ray(ray: RayOptions | None, device: str) -> None:
    """Refuse Ray settings that cannot work, in one line; the address is probed in seconds, not
    the minutes ray.init hangs on a dead one. Nothing for a local run."""
    if ray is None:
        return
    if ray.actors < 1:
        raise FieldError("actors", "{actors} must be at least 1")
    if ray.gpus_per_actor is not None and not (math.isfinite(ray.gpus_per_actor) and ray.gpus_per_actor >= 0):
        raise FieldError("gpus_per_actor", "{gpus_per_actor} must be 0 or more, not {value}", value=ray.gpus_per_actor)
    from engine.running.backend_ray import check_address, check_ray_device, import_ray

    check_ray_device(device)
    import_ray()  # the install hint, before anything is read
    check_address(ray.address)


def resolve_db(db: Path | str | None) -> Path:
    """The store a request names, or the default one."""
    return Path(db) if db else default_db_path()


def check_store_writable(db: Path) -> None:
    """Refuse, in one line, a store this user cannot write, before anything is written or a model
    loads (a Space's root-owned app folder failed the run after its model had loaded)."""
    problem = store_writable_problem(db)
    if problem:
        # The CLI says "--db or PATTRIEVAL_DB" (engine.commands._field_words), the app its operator's setting.
        raise FieldError("db", "cannot write the store {path}: {problem}; name a writable one with {db}", path=db,
                         problem=problem)


def run_experiment(request: ExperimentRequest, *, progress: ProgressFn | None = None, stop: StopFn | None = None,
                   load: LoadFn | None = None, read_dataset: ReadFn | None = None) -> ExperimentOutcome:
    """Check, plan, load the model (only when there is work), measure every prompt, then run or
    resume each mode's run; returns how each ended.

    `load` None: engine.running.run_request.load_model_for, after engine.generation.model_check.check_model_name (a
    typo fails in a second, before torch is imported). UserError (one line) on anything the user
    can fix; RunCancelled once `stop` says yes."""
    from engine.running.planner import check_prompt_lengths, plan_experiment
    from engine.running.runner import execute_plan
    from store.run_store import RunStore

    run = request.run
    check_request(run)
    check_server(request.server, request.ray)
    check_ray(request.ray, run.device)
    if run.reruns and request.ray is not None:
        # A Ray pool is built for one generation config; a rerun samples with its own seed.
        raise FieldError("reruns", "{reruns} runs in this process or on a server, not on Ray: run them without Ray")
    db = resolve_db(request.db)
    check_store_writable(db)  # before the smoke model is written or any model loads
    step = _Steps(progress, stop)
    dataset = _dataset(request.dataset, run, read_dataset, request.dataset_name)
    step.check()
    run = served_run(run, request.server) if request.server is not None else resolved(run)
    sink = RunStore(db, on_finished=after_run(db))  # the Bias page's values, kept as each experiment ends
    plan = plan_experiment(dataset, run, sink)
    reruns = rerun_plans(plan, dataset, sink)
    n_todo = plan.n_todo + sum(p.n_todo for p in reruns)
    step.emit("planned", total=n_todo, experiment_id=plan.experiment_id, message=rerun_cost(plan, reruns))
    step.check()
    if plan.nothing_to_do and all(p.nothing_to_do for p in reruns):
        # Every run ended already: what a process killed before keeping them left unkept, kept now.
        after_nothing_to_do(db, [plan.experiment_id, *(p.experiment_id for p in reruns)])
        return replace(execute_plan(plan, None, sink), reruns=tuple(execute_plan(p, None, sink) for p in reruns))
    loaded = backend = None
    try:
        if n_todo:
            step.emit("loading", message=f"loading {run.label}", experiment_id=plan.experiment_id)
            if request.server is not None:
                # Checked before any run is claimed; the server's context is its own business
                # (an over-long prompt fails its request), so no lengths are measured here.
                backend = server_backend(run, request.server, stop)
            elif request.ray is not None:
                prepare_load(run.model, check=load is None)
                # The driver plans and measures with the tokenizer; the model loads on the workers.
                backend, driver = ray_backend(run, request.ray)
                plan = check_prompt_lengths(plan, driver)
                backend.start()
            else:
                prepare_load(run.model, check=load is None)
                loaded = (load or _default_load)(run)
                step.check()
                plan = check_prompt_lengths(plan, loaded)
                reruns = [check_prompt_lengths(p, loaded) for p in reruns]
        step.emit("generating", message="generating", total=plan.n_todo + sum(p.n_todo for p in reruns),
                  experiment_id=plan.experiment_id, label=run.label)
        outcome = execute_plan(plan, loaded, sink, on_progress=step.stored, should_stop=stop, backend=backend)
        done = []
        for rerun in reruns:
            # A server generates with the config it was given: each rerun gets its own (its sampling seed).
            own = server_backend(rerun.request, request.server, stop) if request.server is not None and rerun.n_todo else None
            try:
                done.append(execute_plan(rerun, loaded, sink, on_progress=step.stored, should_stop=stop,
                                         backend=own))
            finally:
                if own is not None:
                    record_served(sink, own)
                    own.close()
        return replace(outcome, reruns=tuple(done))
    finally:
        if backend is not None:
            if request.server is not None:
                record_served(sink, backend)
            backend.close()


def rerun_plans(plan: ExperimentPlan, dataset: Dataset, sink: Any) -> list[ExperimentPlan]:
    """The plans of the reruns `plan`'s request asks for (RunRequest.reruns): the k-th repeats the
    same modes over the same items, as an experiment of its own marked as a rerun of this one."""
    from engine.running.planner import plan_experiment

    run = plan.request
    if not run.reruns:
        return []
    limits = [r.limit for r in plan.runs]
    limit = None if None in limits else max(limit for limit in limits if limit is not None)
    return [plan_experiment(dataset, replace(run, rerun=Rerun(plan.experiment_id, k), reruns=0, experiment=None,
                                             repeat=False, limit=limit), sink)
            for k in range(1, run.reruns + 1)]


def rerun_cost(plan: ExperimentPlan, reruns: list[ExperimentPlan]) -> str:
    """What the reruns add, said before the work starts ("" without reruns)."""
    if not reruns:
        return ""
    answers = sum(len(r.items) for r in reruns[0].runs)
    todo = sum(p.n_todo for p in reruns)
    return (f"reruns: {len(reruns)} x {answers:,} answers ({'+'.join(r.mode for r in plan.runs)}) = "
            f"{len(reruns) * answers:,} more answers, {todo:,} of them to generate now")


def run_metrics(db: Path | str, run_ids: list[str]):
    """Citation precision/recall/F1 (x100) and exact match per run (the run_metrics view), a DataFrame."""
    from store.queries import run_summaries

    return run_summaries(db, run_ids)


# ---------------------------------------------------------------- shared with the study use case


class _Steps:
    """A run's progress and cancel: events with a running count, and the between-steps check."""

    def __init__(self, progress: ProgressFn | None, stop: StopFn | None):
        self.progress, self.stop = progress, stop
        self.done, self.total, self.experiment_id = 0, None, None

    def emit(self, stage: Stage, **fields: Any) -> None:
        self.total = fields.get("total", self.total)
        self.experiment_id = fields.get("experiment_id", self.experiment_id)
        if self.progress is not None:
            self.progress(Progress(stage, done=self.done, **fields))

    def stored(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(Progress("stored", done=self.done, step=n, total=self.total, experiment_id=self.experiment_id))

    def check(self) -> None:
        if self.stop is not None and self.stop():
            raise RunCancelled("cancelled before generating")


def _dataset(source: str | Path | Dataset, run: RunRequest, read: ReadFn | None, name: str | None,
             top_k: int | None = None) -> Dataset:
    """The dataset a request names. Its identity is all its valid items; the runs' limit picks a
    prefix. top_k: an item must have a relevant document among those the model will be shown."""
    if isinstance(source, Dataset):
        dataset = source
    else:
        dataset = (read or load_dataset)(source, skip_invalid=run.skip_invalid, top_k=run.prompt.top_k if top_k is None else top_k)
    # The store names an upload by its file name, never by its server path (SQL console).
    return replace(dataset, source=name) if name else dataset


def resolved(run: RunRequest) -> RunRequest:
    """'auto' and 'smoke' resolved to what loads and how the store names it (engine.generation.model_choice);
    a request that already carries its label is kept as it is."""
    if run.model_label is not None:
        return run

    model, label = resolve_model(run.model)
    return replace(run, model=model, model_label=label)


def prepare_load(model: str, *, check: bool) -> None:
    """Before a model loads: with `check`, refuse an unknown name in a second (the default loader;
    load_model checks too, for every other caller); and no per-shard bars from transformers."""
    if check:
        model_check.check_model_name(model)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _default_load(run: RunRequest):
    return load_model_for(run)


def ray_backend(run: RunRequest, ray: RayOptions):
    """A RayBackend for `run` (tokenizer loaded here, model on the workers), not yet started, and
    the tokenizer stand-in that measures prompts."""
    from engine.running.backend_ray import RayBackend, load_driver_tokenizer

    driver = load_driver_tokenizer(run)
    backend = RayBackend(run, driver.tokenizer, address=ray.address, actors=ray.actors,
                         gpus_per_actor=ray.gpus_per_actor)
    return backend, driver


def default_max_new_tokens(models: Collection[str], *, cpu: bool = False) -> int:
    """The most new tokens per answer when none is asked for: short for the smoke model alone (its
    answers are noise: a few tokens show the pipeline), a real model's 256 otherwise, or 128 where
    `cpu` asks for a concise answer that a CPU writes in time (the quickstart)."""
    if set(models) == {SMOKE}:
        return SMOKE_MAX_NEW_TOKENS
    return 128 if cpu else REAL_MAX_NEW_TOKENS


def auto_model(*, gpu: bool) -> Any:
    """The model `--model auto` runs here (engine.generation.model_choice.ModelChoice: its name and
    why): Mistral on a GPU, Qwen2.5-0.5B on a CPU, the smoke model offline."""
    return model_choice.choose_auto_model(gpu=gpu)
