"""CAS and CAB of one experiment, with tests, intervals and citation confidence: the report behind
`python -m engine bias`, the app's Bias tab and engine.api.

Reads only the store, through store.queries' functions that return tuples: pandas, which the
DataFrame queries import, would cost more than everything else this does (scripts/bench_bias.py).
Reports are kept per store state (store.state_cache): every visitor of the Bias tab asks for the
same few.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError
from engine.paths import require_store
from engine.presentation.display import bias_report_html, bias_report_text
from engine.prompting.prompts import METADATA_TYPES
from engine.types import MODES
from engine.usecases.experiments import unknown_experiment

if TYPE_CHECKING:
    from store.queries import ReadSession

# Fewer resamples leave the 2.5% tails a handful of draws; more only cost time (2,000 items:
# about 0.1 s per 1,000 resamples).
MIN_RESAMPLES = 100
MAX_RESAMPLES = 100_000


def add_modes_command(experiment_id: str, runs: list[Any], modes: Sequence[str], db_arg: str | None) -> str:
    """The command that adds the missing modes to an experiment, from its newest run."""
    run = runs[-1]
    meta = ((run.config.get("prompt") or {}).get("metadata")) or {}
    db = ["--db", db_arg] if db_arg else []
    if run.quantization == "imported":
        # import takes one mode per call and an answers file only the user has.
        args = ["import", "--dataset", run.dataset or "DATASET", "--answers", "ANSWERS.jsonl", "--mode", modes[0],
                "--experiment", experiment_id]
    else:
        args = ["run", "--experiment", experiment_id, "--model", run.model, "--dataset", run.dataset or "DATASET",
                "--modes", ",".join(modes)]
    args += ["--metadata", run.metadata_type or "TYPE"]
    built_in = METADATA_TYPES.get(run.metadata_type or "")
    if meta.get("label_a") and (built_in is None or meta["label_a"] != built_in.label_a):
        args += ["--label-a", meta["label_a"], "--label-b", meta.get("label_b", "")]
        if meta.get("consideration"):
            args += ["--consideration", meta["consideration"]]
        for extra in meta.get("extra_labels") or ():
            args += ["--extra-label", extra]
    prompt = run.config.get("prompt") or {}
    for setting in ("relevant_at", "repetition", "label_scope"):  # stored only when not at the default
        if prompt.get(setting):
            args += ["--" + setting.replace("_", "-"), prompt[setting]]
    then = f" (then --mode {', '.join(modes[1:])})" if run.quantization == "imported" and len(modes) > 1 else ""
    return "python -m engine " + shlex.join(args + db) + then


@dataclass(frozen=True)
class BiasReport:
    """What `bias` prints: the report (JSON-ready) and the next-command hint."""

    report: dict[str, Any]
    hint: str

    @property
    def results(self) -> Any:
        """CAS and CAB as a DataFrame, one row per measure and metric, in the CLI's order."""
        import pandas as pd

        return pd.DataFrame.from_records(self.report["results"])

    @property
    def floors(self) -> Any:
        """The rerun floors (`run --reruns`) as a DataFrame, one row per measure and metric in the
        order of `results`; empty where the experiment has no rerun (`report["rerun_note"]` says so)."""
        import pandas as pd

        return pd.DataFrame.from_records(self.report.get("rerun_floors") or [])

    def __repr__(self) -> str:  # in a notebook: the CLI's table, not the whole dict

        return bias_report_text(self.report)

    def _repr_html_(self) -> str:
        return bias_report_html(self.report)


# Every visitor of the app's Bias tab asks for the same few reports: they are kept per store state.
@functools.cache
def _report_cache():
    """The reports kept, made on first use: importing store at import time would load DuckDB for `--help`."""
    from store.state_cache import StoreStateCache

    return StoreStateCache(32)


def clear_report_cache() -> None:
    """Forget every cached report (scripts/bench_app.py times uncached calls with it)."""
    _report_cache().clear()


def bias_report(path: Path, experiment: str, *, resamples: int | None = None, seed: int = 0,
                db_arg: str | None = None, session: ReadSession | None = None,
                explanations: bool = True, floors: bool = True) -> BiasReport:
    """CAS and CAB of one experiment (by id or name) with tests, intervals and confidence.

    The same request on an unchanged store returns the report computed before (a copy; see
    store.state_cache: a write that lands meanwhile is never hidden). Errors are not kept.
    A report kept in the store (store.derived) is used while the experiment's runs are as they
    were. `session`: the request's read of the store (store.queries.ReadSession), which a report
    computed now joins for its caller to keep (the app does; `python -m engine bias` only reads,
    in a session of its own). `explanations=False` leaves out the explanation rates (the Bias page
    reads them once for all its experiments), `floors=False` the rerun floors (rerun_floor_report:
    the values kept after a run leave them out).
    """
    from store.queries import read_session

    if resamples is not None and not MIN_RESAMPLES <= resamples <= MAX_RESAMPLES:
        raise UserError(f"--resamples must be between {MIN_RESAMPLES} and {MAX_RESAMPLES:,}, not {resamples}")
    if seed < 0:
        raise UserError(f"--seed must be 0 or more, not {seed}")
    if session is None:  # a session is a store already
        require_store(path)

    def computed() -> BiasReport:
        with read_session(session if session is not None else Path(path)) as reader:
            return kept_or_computed(reader, experiment, resamples, seed, db_arg, explanations, floors)

    return _report_cache().get(path, (experiment, resamples, seed, db_arg, explanations, floors), computed)


# derived_values' kind of a kept report (bump the number when the report's content changes).
BIAS_REPORT = "bias_report/3"  # /2: label_note; /3: tests, undefined CAS/CAB
# The rerun floors are not kept with it: they are read at every request (rerun_floor_report).


def kept_or_computed(session: ReadSession, experiment: str, resamples: int | None, seed: int, db_arg: str | None,
                     explanations: bool = True, floors: bool = True) -> BiasReport:
    """The report kept in the store for this request, else computed now (and added to what
    `session` keeps); explanations are always read now (`engine explain` adds them without
    changing the runs)."""
    from store.queries import explanation_rates, kept_derived

    db = session.db
    key = json.dumps([experiment, resamples, seed, db_arg])
    found = kept_derived(session, BIAS_REPORT, experiment, key)
    if found is not None and found[1] is not None:
        report, hint = found[1]["report"], found[1]["hint"]
    else:
        report, hint = _bias_report(session.path, db, experiment, resamples=resamples, seed=seed, db_arg=db_arg)
        if found is not None:
            session.computed(BIAS_REPORT, found[0], key, json.dumps({"report": report, "hint": hint}, default=_plain_json))
    # Read now, not kept: `run --reruns` adds reruns without changing the experiment's own runs.
    if floors:
        report.update(rerun_floor_report(db, report, resamples, seed))
    # Only where `python -m engine explain` stored some: the report is otherwise unchanged.
    explained = explanation_rates(db, list(report["runs"].values())) if explanations else ()
    if explained:
        report["explanations"] = [
            {"rag_mode": mode, "run_id": run_id, "explainer_model": model, "n_explanations": n,
             "n_mention_label": n_label, "label_share": share}
            for run_id, model, mode, n, n_label, share in explained
        ]
    return BiasReport(report, hint)


def _plain_json(value: Any) -> Any:
    """numpy scalars as Python values (json knows float64, not int64)."""
    return value.item() if hasattr(value, "item") else str(value)


def _bias_report(path: Path, db: Any, experiment: str, *, resamples: int | None, seed: int,
                 db_arg: str | None) -> tuple[dict[str, Any], str]:
    """(report without explanations, hint), computed now from `db` (a path or an open connection)."""
    from engine.statistics.bias import COMPARISONS, compute_bias, labels_for, possible_comparisons
    from engine.statistics.stats import DEFAULT_RESAMPLES
    from store.queries import bias_inputs

    data = bias_inputs(db, experiment)  # an id, or a `run --experiment` name
    if data is None:
        raise UserError(unknown_experiment(path, experiment))
    experiment_id = data.experiment_id
    chosen = data.chosen
    ignored = [r for r in data.runs if r.run_id not in {c.run_id for c in chosen.values()}]
    if not chosen:
        states = ", ".join(f"{r.rag_mode} run {r.run_id} is {r.status}" for r in data.runs)
        raise UserError(f"experiment '{experiment}' has no complete run ({states})")
    missing = [m for m in MODES if m not in chosen]
    add = add_modes_command(experiment, list(data.runs), missing, db_arg) if missing else ""
    if not possible_comparisons(chosen):
        unfinished = "".join(f"; its {r.rag_mode} run {r.run_id} is {r.status}" for r in ignored if r.rag_mode in missing)
        raise UserError(
            f"experiment '{experiment}' has complete runs for {', '.join(chosen)} only "
            f"(CAS needs vanilla and base, CAB needs base and cf){unfinished}; add {', '.join(missing)} with: {add}"
        )

    tables = _mode_tables(data)
    reference = chosen.get("base") or chosen.get("cf") or next(iter(chosen.values()))
    labels = labels_for(reference.metadata_type, reference.config)
    results = compute_bias(
        tables,
        labels,
        run_ids={mode: run.run_id for mode, run in chosen.items()},
        n_resamples=resamples or DEFAULT_RESAMPLES,
        seed=seed,
    )
    report = {
        "experiment_id": experiment_id,
        "model": reference.model,
        "dataset": reference.dataset_label,
        "dataset_sha": reference.dataset_sha,
        "metadata_type": reference.metadata_type,
        "label_a": labels.a if labels else None,
        "label_b": labels.b if labels else None,
        "label_note": label_note(reference.config),
        "runs": {mode: run.run_id for mode, run in chosen.items()},
        "ignored_runs": {r.run_id: f"{r.rag_mode}, {r.status}" for r in ignored},
        "results": [_finite_dict(r.__dict__) for r in results],
        "confidence": [
            _finite_dict(dict(zip(("rag_mode", "cited_docs", "label", "mean_probability", "n_with_probability", "n_citations"), c, strict=True)))
            for c in data.confidence
        ],
        "bootstrap": {"method": "percentile", "resamples": resamples or DEFAULT_RESAMPLES, "seed": seed},
    }
    lacking = [m for m, a, b in COMPARISONS if a not in chosen or b not in chosen]
    if lacking:
        hint = (f"hint: no {' or '.join(lacking)} without {' and '.join(missing)}; "
                f"add {'it' if len(missing) == 1 else 'them'} with: {add}")
    else:
        hint = (f"hint: the paper's tables for this experiment: python -m engine report --experiment {shlex.quote(experiment)}"
                + (f" --db {shlex.quote(db_arg)}" if db_arg else ""))
    return report, hint


def _mode_tables(data: Any) -> dict[str, Any]:
    """Per mode, the chosen run's per-item metrics (a bias_inputs read) as a MetricTable."""
    from engine.statistics.bias import MetricTable

    tables = {}
    for mode, run in data.chosen.items():
        columns = data.metrics[run.run_id]
        tables[mode] = MetricTable(columns.item_ids, columns.values, columns.cites)
    return tables


@dataclass(frozen=True)
class ExperimentFloors:
    """An experiment's reruns and their floors (engine.statistics.rerun_floor), or why there are none."""

    rerun_experiments: tuple[str, ...]
    floors: tuple[Any, ...]  # RerunFloor per measure and metric, in compute_bias's order; () with a note
    note: str | None  # no rerun: how to get one; reruns that cannot be paired: why the floor is undefined


def experiment_floors(db: Any, experiment_id: str, resamples: int | None = None, seed: int = 0) -> ExperimentFloors:
    """The rerun floors of one experiment: each measure between a mode and its reruns (`run
    --reruns`), with its interval and, for CAS, the test against it. Rerun runs that cannot be
    paired with the experiment's (other items) make the floor undefined, said in the note, never
    an error."""
    from engine.statistics.rerun_floor import NO_RERUN, rerun_floors
    from engine.statistics.stats import DEFAULT_RESAMPLES
    from store.queries import bias_inputs, rerun_experiment_ids

    ids = rerun_experiment_ids(db, experiment_id)
    if not ids:
        return ExperimentFloors((), (), NO_RERUN)
    main = bias_inputs(db, experiment_id)
    per_mode = _mode_tables(main) if main is not None else {}
    reruns: dict[str, list[Any]] = {}
    for rerun_id in ids:
        data = bias_inputs(db, rerun_id)
        for mode, table in (_mode_tables(data) if data is not None else {}).items():
            if mode in per_mode:
                reruns.setdefault(mode, []).append(table)
    try:
        floors = rerun_floors(per_mode, reruns, n_resamples=resamples or DEFAULT_RESAMPLES, seed=seed)
    except UserError as err:
        return ExperimentFloors(ids, (), f"rerun floor undefined: {err}")
    return ExperimentFloors(ids, tuple(floors), None)


def rerun_floor_report(db: Any, report: dict[str, Any], resamples: int | None, seed: int) -> dict[str, Any]:
    """The report's rerun floors (experiment_floors), with one line per measure and metric as
    every face prints it; without reruns, the line that says how to get one."""
    from engine.statistics.bias import BiasResult
    from engine.statistics.rerun_floor import floor_line

    found = experiment_floors(db, report["experiment_id"], resamples, seed)
    out: dict[str, Any] = {"rerun_experiments": list(found.rerun_experiments), "rerun_floors": [], "rerun_lines": [],
                           "rerun_note": found.note}
    if not found.floors:
        return out
    # The report's own CAS and CAB (JSON: None where undefined), in the floors' order.
    fields: list[dict[str, Any]] = [{k: math.nan if v is None and k in _FLOAT_FIELDS else v for k, v in r.items()}
                                    for r in report["results"]]
    results = [BiasResult(**f) for f in fields]
    out["rerun_floors"] = [_finite_dict(f.__dict__) for f in found.floors]
    out["rerun_lines"] = [floor_line(r, f) for r, f in zip(results, found.floors, strict=True)]
    return out


_FLOAT_FIELDS = ("value", "ci_low", "ci_high", "p")


def label_note(config: dict[str, Any] | None) -> str | None:
    """How a battery experiment's labels differ from the paper's "label A on relevant documents
    in base, label B in cf" (None where they do not), so that CAB is read for what it is."""
    prompt = (config or {}).get("prompt") or {}
    extra = (prompt.get("metadata") or {}).get("extra_labels") or ()
    if extra:
        return (f"a many-valued type: {len(extra) + 2} labels rotated over the documents, base and cf one step "
                "of the rotation apart, so CAB is not label A against label B; `why-cited` gives each label's effect")
    scope = prompt.get("label_scope", "all")
    if scope != "all":
        side = "relevant documents" if scope == "relevant" else "non-relevant documents"
        return f"only the {side} carry a label (--label-scope {scope})"
    return None


def _finite_dict(d: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN or Infinity: undefined statistics become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}
