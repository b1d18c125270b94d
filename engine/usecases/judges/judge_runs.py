"""What the judge use cases (explain, verify, the judge's label bias, propensity, document use)
share on the store's side: the runs a request names and which of them have answers, the judge
model to load and its name as stored, the default loader, and the one writer of each table a
judge writes (engine.judges.registry.TABLES).

The judges themselves (what they ask, how their answers are read, the plan and the batch loop)
are engine.judges'; this module reads and writes the store for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from engine.errors import FieldError, UserError, WordedError
from engine.judges.judging import choose_model, load_model_quietly
from engine.judges.plan import Load, Stop, check_stop
from engine.paths import require_store
from engine.types import ExplainRun, Explanation, Verification
from engine.usecases.experiments import unknown_experiment
from engine.usecases.served import served_model

if TYPE_CHECKING:
    from engine.usecases.served import ServerOptions
    from store.verification_store import JudgeRow


JudgedRow = Explanation | Verification  # a row of a table a judge writes


@dataclass(frozen=True)
class JudgeRequest:
    """What every judge request says (ExplainRequest and VerifyRequest add their own): which
    runs, which judge, how many answers, and how the judge loads or is served."""

    db: Path
    experiment: str | None = None  # id or name; or else `runs`
    runs: tuple[str, ...] = ()
    model: str | None = None  # Hugging Face id, local folder or 'smoke'; None: the model that answered
    # The judge's name as stored, when `model` is already resolved (the app's requests carry both).
    label: str | None = None
    limit: int | None = None  # only each run's first N answers
    batch_size: int = 8
    max_new_tokens: int = 16
    quantize: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    # An OpenAI-compatible server judges (engine.usecases.served); its model "" = the one that answered.
    server: ServerOptions | None = None


class LoadOptions(Protocol):
    """How a judge model loads locally (every judge request; propensity's and document use's too)."""

    @property
    def quantize(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def dtype(self) -> str: ...


class UnknownRun(WordedError):
    """A run id the store does not hold; `run_id` lets a face word it its own way."""

    def __init__(self, run_id: str, path: Path):
        self.run_id, self.path = run_id, path
        super().__init__("no run '{run_id}' in {path} ({see_runs})", run_id=run_id, path=path)

    def __reduce__(self):  # rebuilt as itself from a child process
        return (UnknownRun, (self.run_id, self.path))


def check_request(request: JudgeRequest) -> None:
    """One line for a bad number or an empty model name (FieldError: each face names the field)."""
    for name in ("batch_size", "max_new_tokens"):
        if getattr(request, name) < 1:
            raise FieldError(name, f"{{{name}}} must be at least 1")
    if request.limit is not None and request.limit < 1:
        raise FieldError("limit", "{limit} must be at least 1")
    if request.model is not None and not request.model.strip():
        raise FieldError("model", "{model} must not be empty")
    if (request.experiment is None) == (not request.runs):
        raise ValueError("give exactly one of experiment and runs")


def answered_runs(request: JudgeRequest, verb: str, stop: Stop | None = None) -> list[ExplainRun]:
    """The runs of the request that have answers, in mode order; one line when any is unknown or
    none has answers."""
    from store.queries import explain_runs

    path = Path(require_store(request.db))  # their first read: a missing store is no store to judge
    runs: list[ExplainRun] = []
    if request.experiment is not None:
        found = explain_runs(path, experiment=request.experiment)
        if found is None:
            raise UserError(unknown_experiment(path, request.experiment))
        runs = list(found)
    else:
        for run_id in request.runs:
            check_stop(stop, "cancelled before generating")
            found = explain_runs(path, run=run_id)
            if found is None:
                raise UnknownRun(run_id, path)
            runs.extend(found)
    answered = [r for r in runs if r.n_answers]
    if not answered:
        what = f"run {', '.join(request.runs)}" if request.runs else f"experiment '{request.experiment}'"
        raise UserError(f"{what} has no answers to {verb} yet (run it first with `python -m engine run`)")
    return answered


def judge_model(request: JudgeRequest, answered: Sequence[ExplainRun]) -> tuple[str, str]:
    """(what to load, its name as stored): the request's, else the one model that answered."""
    if request.label is not None and request.model is not None:
        return request.model, request.label
    server = request.server
    if server is not None:  # a served name is the server's: nothing to resolve or load here
        models = {r.model for r in answered}
        name = server.model or request.model
        if not name and len(models) > 1:
            raise FieldError("model", "the runs were answered by {n} models ({names}); choose the served one with "
                             "{model}", n=len(models), names=", ".join(sorted(models)))
        name = name or next(iter(models))
        return name, name
    return choose_model(request.model, answered)


def load_judge(request: LoadOptions) -> Load:
    """The default loader: the model as the request asks (4-bit on a GPU by default), with
    $HF_TOKEN when set; on the request's server when it names one."""
    server: ServerOptions | None = getattr(request, "server", None)  # propensity and document use have none
    if server is not None:
        served = server
        return lambda model: served_model(replace(served, model=model))

    def load(model: str) -> Any:
        return load_model_quietly(model, quantize=request.quantize, device=request.device, dtype=request.dtype,
                                  hf_token=os.environ.get("HF_TOKEN") or None)

    return load


def table_writer(db: Path, table: str, judge: JudgeRow | None = None) -> Callable[[Sequence[JudgedRow]], object]:
    """The one writer of a judge's table (engine.judges.registry.TABLES): each call commits one
    batch. `judge`: the `judges` row a verifications batch is written with."""
    # A judge's rows are its table's (engine.judges.registry.Judge pairs them), hence the casts.
    if table == "explanations":
        from store.explanation_store import ExplanationStore

        explanations = ExplanationStore(db)
        return lambda rows: explanations.write_batch(cast(Sequence[Explanation], rows))
    if table == "verifications":
        from store.verification_store import VerificationStore

        verifications = VerificationStore(db)
        return lambda rows: verifications.write_batch(cast(Sequence[Verification], rows), judge)
    raise ValueError(f"no writer for table {table!r}")
