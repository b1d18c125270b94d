"""The paper's tables from the store: Table 1 (quality, EM) and Table 2 (CAB) rows, the AttrScore
and Prompt 5 rows beside them, and the self-interpretation blocks (`--layout xai`). The data
behind `python -m engine report`, the app's Bias tab and engine.api; how they are printed is
the faces' (engine.presentation.formatting holds what both print alike).

Table 1: model x metadata label (of relevant / non-relevant documents; "-" for vanilla) ->
citation precision and recall (x100) and EM. Table 2: metadata type x model -> CAB on precision
and recall (x100) with the p of the paired test `bias` uses (engine.statistics.bias.difference_test).
Every complete run has its row (a study's shared vanilla run one row for the experiments it
serves), and no row mixes experiments: rows that model, dataset and labels would show alike carry a setting, the options in which their
experiments differ, else the experiment's name or id (engine.usecases.bias.row_labels). Datasets
are named by file name and content hash prefix, never by the path as typed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.datasets.data import SAMPLE_NAME
from engine.errors import UserError
from engine.paths import SAMPLE_DATASET, require_store
from engine.prompting.prompts import TYPE_TITLES  # the paper's order of the built-in types
from engine.types import ANSWER_METRICS, MODES, ORDERS, XAI_VARIANTS
from engine.usecases.bias.report_shares import explanation_rows, verification_rows
from engine.usecases.bias.row_labels import (
    Configuration,
    configuration,
    configuration_fields,
    configurations,
    differing,
    experiment_label,
    label_collisions,
    run_config,
    run_experiment,
    setting_label,
    shared_vanilla,
    with_label,
)
from engine.usecases.experiments import unknown_experiment


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _value(x: Any) -> float | None:
    return None if _missing(x) else float(x)


def _dataset(rec: dict[str, Any]) -> str:
    return rec.get("dataset_label") or rec.get("dataset") or "-"


_TABLE1_READS = ("run_id", "experiment_id", "model", "dataset", "dataset_label", "dataset_sha", "metadata_type",
                 "rag_mode", "label_relevant", "label_nonrelevant", "precision", "recall", "exact_match", "n")
# Why a precision is undefined: a run none of whose answers cites averages only the paper's 0s.
UNCITED = "no answer cites a shown document"


def table1(runs: Any, settings: Mapping[str, Any] | None = None,
           confs: Mapping[str, Configuration] | None = None,
           uncited: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Rows of Table 1 from run_metrics rows (a DataFrame, oldest first): one per run.

    `settings` (store.queries.run_settings) tells experiments apart by configuration and finds
    shared vanilla runs; without it they are told apart by name or id. A vanilla run copied from
    a shown one of the same configuration (a study's) is not a row of its own: the row of the run
    it copies serves its experiment too (`experiment_ids`). The rows of one experiment, and of
    the experiments sharing one vanilla run, form a block: its vanilla row, then its labelled rows.
    `confs`: row_labels.configurations(settings) where the caller has them for both tables;
    `uncited` (uncited_of): runs whose precision is None, `precision_undefined` saying why.
    """
    from store.queries import records as records_of

    settings = settings or {}
    # Only the columns read: records of run_metrics' 43 columns cost more than the table.
    records = records_of(runs[[c for c in _TABLE1_READS if c in runs.columns]])
    conf = {r["run_id"]: (confs or {}).get(r["run_id"]) or configuration(run_config(settings, r["run_id"]))
            for r in records}
    copies = shared_vanilla(records, settings, conf)
    runs_by_id = {r["run_id"]: r for r in records}
    # experiment -> its block (the experiment whose vanilla run its own copies, else itself)
    block_of = {runs_by_id[copy]["experiment_id"]: runs_by_id[source]["experiment_id"]
                for copy, source in copies.items()}
    rows: list[dict[str, Any]] = []
    for rec in records:
        if rec["run_id"] in copies:
            continue
        rel = rec["label_relevant"] if rec["rag_mode"] != "vanilla" else None
        non = rec["label_nonrelevant"] if rec["rag_mode"] != "vanilla" else None
        if rec["rag_mode"] != "vanilla" and _missing(rel):
            rel, non = f"{rec['metadata_type'] or '?'} {rec['rag_mode']}", None
        served = [rec["experiment_id"]] + [runs_by_id[c]["experiment_id"]
                                           for c, source in copies.items() if source == rec["run_id"]]
        found = settings.get(rec["run_id"])
        rows.append({
            "model": rec["model"],
            "dataset": _dataset(rec),
            "dataset_sha": rec["dataset_sha"],
            "setting": "",
            "relevant": rel or "-",
            "non_relevant": non or "-",
            "precision": None if _missing(rec["precision"]) or rec["run_id"] in uncited else 100 * rec["precision"],
            "precision_undefined": UNCITED if rec["run_id"] in uncited else None,
            "recall": None if _missing(rec["recall"]) else 100 * rec["recall"],
            "em": _value(rec["exact_match"]),
            "n": int(rec["n"]),
            "run_id": rec["run_id"],
            "experiment_id": rec["experiment_id"],
            "experiment_ids": list(dict.fromkeys(served)),
            "experiment_name": found.experiment_name if found is not None else None,
            "configuration": configuration_fields(conf[rec["run_id"]]),
            "block": block_of.get(rec["experiment_id"], rec["experiment_id"]),
        })
    paths = differing(conf[r["run_id"]] for r in rows)
    for row in rows:
        row["setting"] = setting_label(conf[row["run_id"]], paths)

    names = {runs_by_id[c]["experiment_id"]: run_experiment(settings, c, runs_by_id[c]["experiment_id"])
             for c in copies}

    def experiments(row: dict[str, Any]) -> str:
        own = run_experiment(settings, row["run_id"], row["experiment_id"])
        return ", ".join([own] + [names[e].removeprefix("experiment ") for e in row["experiment_ids"][1:]])

    # Blocks that would print alike, one with a vanilla row: every row of theirs names its
    # experiment, so that no vanilla row seems to go with another experiment's labelled rows.
    blocks: dict[tuple, set[str]] = {}
    vanilla: set[tuple] = set()
    for row in rows:
        key = (row["model"], row["dataset_sha"], row["setting"])
        blocks.setdefault(key, set()).add(row["block"])
        if row["relevant"] == "-":
            vanilla.add(key)
    for row in rows:
        key = (row["model"], row["dataset_sha"], row["setting"])
        if len(blocks[key]) > 1 and key in vanilla:
            row["setting"] = with_label(row["setting"], experiments(row))
    label_collisions(rows, lambda r: (r["model"], r["dataset_sha"], r["setting"], r["relevant"], r["non_relevant"]),
                     (experiments, lambda r: f"run {r['run_id']}"))
    models = list(dict.fromkeys(row["model"] for row in rows))
    order = list(dict.fromkeys(row["block"] for row in rows))
    # The paper's order: per model, the vanilla row first, then labelled rows as they came; here
    # per model and block.
    rows.sort(key=lambda r: (models.index(r["model"]), order.index(r["block"]), r["relevant"] != "-"))
    for row in rows:
        del row["block"]
    return rows


def uncited_of(db: Any, runs: Any) -> frozenset[str]:
    """The runs of a Table 1 frame none of whose answers cites a shown document; only a mean
    precision of 0 or none can hide one (a positive mean needs a citing answer)."""
    from store.queries import uncited_runs

    rows = [] if runs.empty else runs[["run_id", "precision"]].to_dict("records")
    return uncited_runs(db, [r["run_id"] for r in rows if _missing(r["precision"]) or r["precision"] == 0])


def table2(bias: Any, settings: Mapping[str, Any] | None = None,
           confs: Mapping[str, Configuration] | None = None) -> list[dict[str, Any]]:
    """Rows of Table 2 from bias-view rows (a DataFrame, oldest first): one per experiment with
    CAB, told apart as in table1 where model, dataset, type and labels are alike. A CAB the view
    leaves undefined (NULL) stays None, with its reason (`undefined_reason`) where the view gives one.
    `confs`: as in table1."""
    from engine.statistics.bias import view_row_test
    from store.queries import records

    settings = settings or {}
    experiments: dict[str, dict[str, Any]] = {}
    if not bias.empty:  # CAS rows are not shown: not made into records either
        bias = bias[bias["measure"] == "CAB"]
    for rec in records(bias):
        if rec["measure"] != "CAB":
            continue
        found = settings.get(rec.get("run_a", ""))
        exp = experiments.setdefault(rec["experiment_id"], {
            "metadata_type": rec["metadata_type"],
            "label_a": None if _missing(rec.get("label_a")) else rec.get("label_a"),
            "label_b": None if _missing(rec.get("label_b")) else rec.get("label_b"),
            "model": rec["model"],
            "dataset": _dataset(rec),
            "dataset_sha": rec.get("dataset_sha"),
            "setting": "",
            "experiment_id": rec["experiment_id"],
            "experiment_name": found.experiment_name if found is not None else None,
            "conf": (confs or {}).get(rec.get("run_a", "")) or configuration(found.config if found is not None else {}),
        })
        exp[rec["metric"]] = _value(rec["value"])
        # The view gives the test's inputs; engine.statistics.bias its p, the one `bias` prints.
        tested = view_row_test(rec)
        exp[f"{rec['metric']}_p"] = None if tested is None else tested.p
        if exp[rec["metric"]] is None:
            reason = rec.get("undefined_reason")
            exp[f"{rec['metric']}_undefined"] = None if _missing(reason) else str(reason)
        exp["n"] = int(rec["n"])
        if rec["n"] != rec["n_a"] or rec["n"] != rec["n_b"]:
            exp["note"] = f"paired {rec['n']} of {rec['n_a']}/{rec['n_b']} items"
    rows = list(experiments.values())
    paths = differing(e["conf"] for e in rows)
    for row in rows:
        row["setting"] = setting_label(row["conf"], paths)
    label_collisions(rows, lambda r: (r["metadata_type"], r["label_a"], r["label_b"], r["model"],
                                      r["dataset_sha"] or r["dataset"], r["setting"]),
                     (lambda r: experiment_label(r["experiment_name"], r["experiment_id"]),))
    order = {t: i for i, t in enumerate(TYPE_TITLES)}
    models = list(dict.fromkeys(e["model"] for e in rows))
    rows.sort(key=lambda e: (order.get(e["metadata_type"], len(order)), str(e["metadata_type"]),
                             models.index(e["model"])))
    keys = ("metadata_type", "label_a", "label_b", "model", "dataset", "dataset_sha", "setting", "precision",
            "precision_p", "recall", "recall_p", "n", "experiment_id", "experiment_name", "note")
    return [{**{k: r.get(k) for k in keys}, "configuration": configuration_fields(r["conf"]),
             **{k: r[k] for k in ("precision_undefined", "recall_undefined") if k in r}} for r in rows]


def with_floors(db: Any, rows2: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table 2's rows with each CAB's rerun floor (engine.usecases.bias.report.experiment_floors:
    precision_floor and recall_floor in points, None where there is none, and floor_note saying
    why), for the experiments that have reruns; the others get None and no note."""
    from engine.usecases.bias.report import experiment_floors
    from store.queries import rerun_targets

    rerun = rerun_targets(db) if rows2 else frozenset()
    out = []
    for row in rows2:
        found = experiment_floors(db, row["experiment_id"]) if row["experiment_id"] in rerun else None
        cab = {f.metric: f for f in (found.floors if found else ()) if f.measure == "CAB"}
        out.append({**row, **{f"{m}_floor": _value(cab[m].value) if m in cab else None for m in ("precision", "recall")},
                    "floor_note": (found.note or next((cab[m].undefined_reason for m in cab if cab[m].undefined_reason),
                                                      None)) if found else None})
    return out


def experiment_tables(db: Any, experiment_ids: list[str] | tuple[str, ...]
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of Tables 1 and 2 for these experiments (ids), as `report --experiment` gives them for one.

    Read run by run (store.queries.table1_runs / report_bias_rows), so that a few experiments
    cost the same in a store of a million answers as alone (the app's Bias tab). `db`: a store,
    or a request's ReadSession (store.queries.session), whose read this joins; Table 2's rows
    kept in the store are used while their experiment is unchanged, and those computed now join
    what the session keeps.
    """
    from store.queries import read_session, report_bias_rows, run_settings, table1_runs

    with read_session(require_store(db)) as session:
        conn = session.db
        settings = run_settings(conn, experiment_ids)
        confs = configurations(settings)
        return (table1(runs := table1_runs(conn, experiment_ids), settings, confs, uncited_of(conn, runs)),
                table2(report_bias_rows(session, experiment_ids), settings, confs))


def dataset_matches(wanted: str, name: Any, sha: Any) -> bool:
    """Whether --dataset WANTED names a dataset: its file name, or a prefix of its content hash."""
    wanted = wanted.strip()
    wanted = SAMPLE_DATASET.name if wanted == SAMPLE_NAME else wanted  # the bundled sample, as every --dataset names it
    if isinstance(name, str) and name and name in (wanted, Path(wanted).name):
        return True
    prefix = wanted.lower()
    return len(prefix) >= 4 and all(c in "0123456789abcdef" for c in prefix) and str(sha or "").startswith(prefix)


def narrow(frame: Any, experiment: str | None = None, model: str | None = None, dataset: str | None = None) -> Any:
    """The rows of a run_metrics or bias frame of this experiment (id), model and dataset (as
    `dataset_matches` reads it); None: any."""
    if frame.empty:
        return frame
    keep = [True] * len(frame)
    if experiment is None and model is None and dataset is None:
        return frame[keep]
    # Only the columns read: records of every column cost ~0.2 s per call for 1,000 runs.
    columns = [c for c in ("experiment_id", "model", "dataset_name", "dataset_sha") if c in frame.columns]
    for i, rec in enumerate(frame[columns].to_dict("records")):
        if experiment is not None and rec["experiment_id"] != experiment:
            keep[i] = False
        elif model is not None and rec["model"] != model:
            keep[i] = False
        elif dataset is not None and not dataset_matches(dataset, rec.get("dataset_name"), rec.get("dataset_sha")):
            keep[i] = False
    return frame[keep]


def check_filters(path: Path, all_runs: Any, experiment: str | None, model: str | None, dataset: str | None) -> None:
    """UserError, naming what there is, when a filter matches no complete run (or no run at all)."""
    if experiment is not None and not (all_runs["experiment_id"] == experiment).any():
        raise UserError(unknown_experiment(path, experiment))
    if model is None and dataset is None:
        return
    records = [r for r in all_runs.to_dict("records") if r["status"] == "complete"]
    if model is not None and not any(r["model"] == model for r in records):
        known = ", ".join(sorted({str(r["model"]) for r in records})) or "none"
        raise UserError(f"no complete run of model '{model}' in {path} (models with complete runs: {known})")
    if dataset is not None and not any(dataset_matches(dataset, r["dataset_name"], r["dataset_sha"]) for r in records):
        known = ", ".join(sorted({str(r["dataset_label"]) for r in records})) or "none"
        raise UserError(f"no complete run on dataset '{dataset}' in {path} (datasets with complete runs: {known})")


def study_experiments(path: Path, study: str | None) -> list[str] | None:
    """The experiment ids of --study, or None without it; an unknown study is refused in one line."""
    if study is None:
        return None
    from store.queries import study_experiment_ids, study_listing

    ids = study_experiment_ids(path, study)
    if ids is None:
        known = ", ".join(s.name for s in study_listing(path)[:5]) or "none yet (run with comma lists or --study)"
        raise UserError(f"no study '{study}' in {path}; studies: {known}")
    return ids


# ---------------------------------------------------------------- --layout xai
# The self-interpretation study's tables (Garigliotti's Tables 2 to 4): one block per model, XAI
# variant and few-shot count (and dataset, when the runs span several); in each block one row
# per cut-off x order x condition (vanilla, or metadata type and mode) with answer recall,
# citation precision, citation recall and citation F1 (x100). A vanilla run copied from another
# (a study's shared vanilla, config `shared_from`) is shown once, as the run it was copied from.

XAI_METRICS = tuple((name, ANSWER_METRICS[name].words) for name in ("answer_recall", "precision", "recall", "f1"))


def _int_or_none(x: Any) -> int | None:
    value = _value(x)
    return None if value is None else int(value)


# The settings the xai layout has blocks and columns for; the others label its rows where they differ.
XAI_SHOWN = ("prompt.xai", "prompt.few_shot", "prompt.top_k", "prompt.order")


def xai_blocks(runs: list[dict[str, Any]], settings: list[dict[str, Any]],
               configs: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Blocks from run_metrics records (complete runs) and run_prompt_settings records; with
    `configs` (store.queries.run_settings) rows that the layout's columns show alike are told
    apart (`setting`: the other settings in which they differ, else the experiment's name or id)."""
    configs = configs or {}
    by_run = {s["run_id"]: s for s in settings}
    present = {r["run_id"] for r in runs}
    many_datasets = len({r.get("dataset_sha") for r in runs}) > 1
    blocks: dict[tuple, dict[str, Any]] = {}
    for rec in runs:
        s = by_run.get(rec["run_id"], {})
        shared = s.get("shared_from")
        if isinstance(shared, str) and shared in present:
            continue  # the same answers as its source, which is shown
        xai, few_shot = s.get("xai") or "none", _int_or_none(s.get("few_shot")) or 0
        dataset = rec.get("dataset_label") if many_datasets else None
        key = (rec["model"], dataset, xai, few_shot)
        block = blocks.setdefault(key, {"model": rec["model"], "dataset": dataset, "xai": xai,
                                        "few_shot": few_shot, "rows": []})
        mode = rec["rag_mode"]
        condition = "vanilla" if mode == "vanilla" else f"{rec.get('metadata_type') or '?'} {mode}"
        row = {"top_k": _int_or_none(s.get("top_k")), "order": s.get("order") or "ranked", "condition": condition,
               "mode": mode, "n": _int_or_none(rec.get("n")) or 0, "run_id": rec["run_id"],
               "experiment_id": rec["experiment_id"], "setting": ""}
        for column, _ in XAI_METRICS:
            value = _value(rec.get(column))
            row[column] = None if value is None else value * 100
        block["rows"].append(row)

    def row_order(row: dict[str, Any]) -> tuple:
        k = row["top_k"]
        return (k is None, k or 0, ORDERS.index(row["order"]) if row["order"] in ORDERS else len(ORDERS),
                MODES.index(row["mode"]) if row["mode"] in MODES else len(MODES), row["condition"])

    def block_order(item: tuple) -> tuple:
        (model, dataset, xai, few_shot), _ = item
        return (str(model), str(dataset), XAI_VARIANTS.index(xai) if xai in XAI_VARIANTS else len(XAI_VARIANTS), few_shot)

    conf = {r["run_id"]: configuration(run_config(configs, r["run_id"])) for b in blocks.values() for r in b["rows"]}
    paths = tuple(p for p in differing(conf.values()) if p not in XAI_SHOWN)
    for block in blocks.values():
        for row in block["rows"]:
            row["setting"] = setting_label(conf[row["run_id"]], paths)
        label_collisions(block["rows"], lambda r: (r["top_k"], r["order"], r["condition"], r["setting"]),
                         (lambda r: run_experiment(configs, r["run_id"], r["experiment_id"]),
                          lambda r: f"run {r['run_id']}"))
    out = []
    for _, block in sorted(blocks.items(), key=block_order):
        block["rows"].sort(key=row_order)
        block["best"] = {
            column: max((r[column] for r in block["rows"] if r[column] is not None), default=None)
            for column, _ in XAI_METRICS
        }
        out.append(block)
    return out


# ---------------------------------------------------------------- the report, as one request


@dataclass(frozen=True)
class ReportRequest:
    """Which complete runs the report covers: all, or those of an experiment (id or name), a
    model, a dataset (file name or hash prefix) or a study; `table` "1", "2" or "all"."""

    db: Path
    table: str = "all"
    experiment: str | None = None
    model: str | None = None
    dataset: str | None = None
    study: str | None = None


@dataclass(frozen=True)
class ReportTables:
    """Rows of Tables 1 and 2, and of verification and explanations (only in the full report)."""

    table1: list[dict[str, Any]]
    table2: list[dict[str, Any]]
    verification: list[dict[str, Any]]
    explanations: list[dict[str, Any]]
    runs: Any  # the complete runs covered (run_metrics rows, a DataFrame, oldest first)
    experiment: str | None  # the request's experiment as an id


def _covered_runs(request: ReportRequest, db: Any = None) -> tuple[Any, str | None, list[str] | None]:
    """(the complete runs the request covers, its experiment as an id, its study's experiments);
    a filter that matches nothing is refused in one line naming what there is. Read through
    `db` (an open connection) when given."""
    from store.queries import run_metric_table

    db = Path(request.db) if db is None else db
    experiment = _experiment_id(request, db)
    runs, study = _covered(request, run_metric_table(db, status=None, reruns=False), experiment)
    return runs, experiment, study


def _experiment_id(request: ReportRequest, db: Any) -> str | None:
    """The request's experiment as an id: a `run --experiment` name works as well as the id; an
    unknown one is refused by _covered."""
    from store.queries import resolve_experiment

    return None if request.experiment is None else resolve_experiment(db, request.experiment) or request.experiment


def _covered(request: ReportRequest, all_runs: Any, experiment: str | None) -> tuple[Any, list[str] | None]:
    """_covered_runs' complete runs and study from run_metric_table's rows of every run."""
    path = Path(request.db)
    check_filters(path, all_runs, experiment, request.model, request.dataset)
    runs = narrow(all_runs[all_runs["status"] == "complete"], experiment, request.model, request.dataset)
    study = study_experiments(path, request.study)
    if study is not None:
        runs = runs[runs["experiment_id"].isin(study)]
    return runs, study


def report_tables(request: ReportRequest) -> ReportTables:
    """The paper's tables for the runs the request covers."""
    from store.queries import reading

    path = Path(require_store(request.db))
    # One read connection for the whole report: each open costs more than most of its reads.
    with reading(path) as conn:
        return _report_tables(request, conn)


def _report_tables(request: ReportRequest, db: Any) -> ReportTables:
    """report_tables, reading through `db` (a path or an open connection)."""
    from store.queries import report_frames, run_settings

    experiment = _experiment_id(request, db)
    # Read together: the runs' answers counted once. An experiment and nothing else asked for
    # reads that experiment's runs alone; a model or dataset filter names what the whole store has.
    alone = experiment is not None and request.model is None and request.dataset is None
    all_runs, bias = report_frames(db, experiment, runs_of_experiment=alone)
    runs, study = _covered(request, all_runs, experiment)
    bias = narrow(bias, experiment, request.model, request.dataset)
    if study is not None and not bias.empty:
        bias = bias[bias["experiment_id"].isin(study)]
    ids = list(dict.fromkeys(runs["experiment_id"].tolist()
                             + (bias["experiment_id"].tolist() if not bias.empty else [])))
    settings = run_settings(db, ids)
    confs = configurations(settings)
    rows1 = table1(runs, settings, confs, uncited_of(db, runs)) if request.table in ("1", "all") else []
    rows2 = with_floors(db, table2(bias, settings, confs)) if request.table in ("2", "all") else []
    # Only where `verify` / `explain` stored some, and only in the full report: the output is
    # otherwise what it was before verification existed.
    verification = verification_rows(db, runs) if request.table == "all" else []
    explanations = explanation_rows(db, runs) if request.table == "all" else []
    return ReportTables(rows1, rows2, verification, explanations, runs, experiment)


def report_xai_blocks(request: ReportRequest) -> list[dict[str, Any]]:
    """The self-interpretation blocks for the runs the request covers (`table` is not read)."""
    from store.queries import run_prompt_settings, run_settings

    require_store(request.db)
    runs, _, _ = _covered_runs(request)
    settings = run_prompt_settings(Path(request.db), runs["run_id"].tolist()).to_dict("records")
    configs = run_settings(Path(request.db), list(dict.fromkeys(runs["experiment_id"].tolist())))
    return xai_blocks(runs.to_dict("records"), settings, configs)
