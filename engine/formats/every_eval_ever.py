"""Records of the Every Eval Ever schema (the `every-eval-ever` package, schema 0.3.0): one
experiment's aggregate record and its instance-level records, built from plain values.

Pure: no store, no files. The numbers come from engine.statistics (CAS and CAB with their
intervals, tests and rerun floors, as `python -m engine bias` reports them) and from the store's
per-item metrics; this module only places them in the schema's fields:

- one evaluation result per mode and citation metric (precision, recall, F1, the paper's exact
  match: means over the run's items, proportions), and one per measure and metric of CAS and CAB
  (points, x100) with its 95% percentile-bootstrap interval, its test, p and verdict, and its
  rerun floor, in `score_details`;
- one instance record per answer: the question, the gold answers, the answer, the cited
  documents as `answer_attribution` (one entry per citation mark, documents numbered from 1 as
  shown), and the mode, labels and every per-item metric in `metadata`.

CAB is named in full, "citation attribution bias (Abolghasemi et al.)": COMPL-AI's
"Counterfactual Assessment of Bias" uses the same letters for another measure. The schema's
`details` and `metadata` hold strings only, so numbers there are written with repr(), which
reads back as the same float. A measure that is undefined has no number the schema could hold:
it is left out of the results and said, with its reason, in `source_metadata.additional_details`.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.types import EXPORTED_METRICS

SCHEMA_VERSION = "0.3.0"
CAB_NAME = "citation attribution bias (Abolghasemi et al.)"
CAS_NAME = "citation attribution sensitivity (Abolghasemi et al.)"
CAB_NOT = ("not COMPL-AI's 'Counterfactual Assessment of Bias', which uses the same letters for another "
           "measure")
MEASURE_NAMES = {"CAB": CAB_NAME, "CAS": CAS_NAME}
MEASURE_IDS = {"CAB": "citation_attribution_bias", "CAS": "citation_attribution_sensitivity"}
MODE_METRICS = ("precision", "recall", "f1", "exact_match")
MODE_METRIC_NAMES = {"precision": "citation precision", "recall": "citation recall", "f1": "citation F1",
                     "exact_match": "exact match (the paper's: any normalised gold answer in the answer)"}
CITATION_PARSER = "pattrieval citation parser: [n] marks, documents numbered from 1 as shown to the model"
# Per-item values kept in an instance record's metadata, as strings (repr of the float): every
# metric of an export's row (engine.types.ANSWER_METRICS' exported ones).
ITEM_NUMBERS = EXPORTED_METRICS


@dataclass(frozen=True)
class ModeSummary:
    """One mode's chosen run and its metrics' means over its items (NaN where no item has one)."""

    mode: str
    run_id: str
    n_items: int
    means: Mapping[str, float]  # MODE_METRICS -> mean, a proportion


@dataclass(frozen=True)
class ExperimentFacts:
    """What the aggregate record says of one experiment."""

    experiment_id: str
    model: str
    quantization: str | None
    dataset: str  # the store's label: file name and content hash
    dataset_sha: str
    metadata_type: str | None
    label_a: str | None
    label_b: str | None
    modes: Sequence[ModeSummary]
    report: Mapping[str, Any]  # engine.usecases.bias.report's report (results, rerun_floors, bootstrap)
    version: str  # pattrieval's
    retrieved_timestamp: str  # Unix epoch seconds, as the schema asks


def file_id(experiment_id: str) -> str:
    """A UUID (version 4 in form, as the schema's file names require) fixed by the experiment id,
    so that exporting the same experiment again names the same files."""
    return str(uuid.UUID(bytes=hashlib.sha256(experiment_id.encode()).digest()[:16], version=4))


def _safe(part: str) -> str:
    """A path component of the datastore layout from a model id's part."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in part).strip(".")
    return cleaned or "unknown"


def repository_path(model: str, experiment_id: str) -> tuple[str, str]:
    """(aggregate, samples) paths in the datastore layout data/<benchmark>/<developer>/<model>/."""
    developer, _, name = model.rpartition("/")
    folder = f"data/pattrieval/{_safe(developer.split('/')[-1] if developer else 'unknown')}/{_safe(name)}"
    uid = file_id(experiment_id)
    return f"{folder}/{uid}.json", f"{folder}/{uid}_samples.jsonl"


def _number(x: Any) -> str:
    return "" if x is None else repr(float(x)) if isinstance(x, float) else str(x)


def _finite(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def mode_result(facts: ExperimentFacts, summary: ModeSummary, metric: str) -> dict[str, Any] | None:
    """A mode's mean of one metric as an evaluation result; None where no item has the metric."""
    value = summary.means.get(metric, math.nan)
    if not _finite(value):
        return None
    return {
        "evaluation_result_id": f"{summary.mode}.{metric}",
        "evaluation_name": f"{summary.mode} {MODE_METRIC_NAMES[metric]}",
        "source_data": _source(facts),
        "metric_config": {
            "evaluation_description": f"mean over items of {MODE_METRIC_NAMES[metric]} in the {summary.mode} mode "
                                      f"({_mode_words(facts, summary.mode)})",
            "metric_id": f"pattrieval.{summary.mode}.{metric}", "metric_name": MODE_METRIC_NAMES[metric],
            "metric_kind": "accuracy" if metric == "exact_match" else metric, "metric_unit": "proportion",
            "lower_is_better": False, "score_type": "continuous", "min_score": 0.0, "max_score": 1.0,
        },
        "score_details": {"score": float(value), "details": {"run_id": summary.run_id, "mode": summary.mode},
                          "uncertainty": {"num_samples": summary.n_items}},
    }


def _mode_words(facts: ExperimentFacts, mode: str) -> str:
    if mode == "vanilla":
        return "documents carry no label"
    a, b = facts.label_a or "label A", facts.label_b or "label B"
    relevant, other = (a, b) if mode == "base" else (b, a)
    return f"relevant documents labelled {relevant}, the others {other}"


def bias_result(facts: ExperimentFacts, row: Mapping[str, Any], floor: Mapping[str, Any] | None) -> dict[str, Any]:
    """One CAS or CAB row of the bias report (defined value) as an evaluation result."""
    measure, metric = row["measure"], row["metric"]
    name = MEASURE_NAMES[measure]
    boot = facts.report.get("bootstrap") or {}
    uncertainty: dict[str, Any] = {"num_samples": int(row["n"])}
    if _finite(row.get("ci_low")) and _finite(row.get("ci_high")):
        uncertainty["confidence_interval"] = {
            "lower": float(row["ci_low"]), "upper": float(row["ci_high"]), "confidence_level": 0.95,
            "method": f"{boot.get('method', 'percentile')} bootstrap over items, seed {boot.get('seed', 0)}"}
        uncertainty["num_bootstrap_samples"] = int(boot.get("resamples", 0))
    details = {"measure": name, "abbreviation": measure, "note": CAB_NOT if measure == "CAB" else "",
               "test": row["test"], "p": _number(row.get("p")), "verdict": row.get("direction") or "",
               "n_items": _number(row["n"]), "n_differ": _number(row["n_differ"]),
               "interval_note": row.get("interval_note") or "", **_floor_details(floor)}
    signed = measure == "CAB"
    description = (f"mean over items of (M_base - M_cf) x 100, M = citation {metric}; > 0 favours "
                   f"{facts.label_a or 'label A'} (the label of the relevant documents in base); 0: no label bias"
                   if signed else f"mean over items of |M_vanilla - M_base| x 100, M = citation {metric}; "
                                  "above 0 whenever anything varies, so read it beside its rerun floor")
    return {
        "evaluation_result_id": f"{MEASURE_IDS[measure]}.{metric}",
        "evaluation_name": f"{name}, citation {metric}",
        "source_data": _source(facts),
        "metric_config": {
            "evaluation_description": description,
            "metric_id": f"pattrieval.{MEASURE_IDS[measure]}.{metric}", "metric_name": f"{name}, citation {metric}",
            "metric_kind": "bias" if signed else "sensitivity", "metric_unit": "points",
            # The schema asks for a direction; CAB's best value is 0, its sign says which label.
            "lower_is_better": not signed, "score_type": "continuous",
            "min_score": -100.0 if signed else 0.0, "max_score": 100.0,
            "additional_details": {"best": "0 (closer to 0 is less label bias)" if signed else "0"},
        },
        "score_details": {"score": float(row["value"]), "details": details, "uncertainty": uncertainty},
    }


def _floor_details(floor: Mapping[str, Any] | None) -> dict[str, str]:
    """The rerun floor of a measure as strings (`run --reruns`), or that there is none."""
    if not floor:
        return {"rerun_floor": "not measured: `run --reruns 1` measures it"}
    if floor.get("undefined_reason"):
        return {"rerun_floor": f"undefined: {floor['undefined_reason']}"}
    out = {"rerun_floor": _number(floor.get("value")), "rerun_floor_ci_low": _number(floor.get("ci_low")),
           "rerun_floor_ci_high": _number(floor.get("ci_high")), "rerun_floor_reruns": _number(floor.get("n_reruns")),
           "rerun_floor_mode": floor.get("mode") or "", "rerun_floor_test": floor.get("test") or ""}
    if _finite(floor.get("p")):
        out["rerun_floor_p"] = _number(floor["p"])
        out["rerun_floor_verdict"] = floor.get("verdict") or ""
    return out


def _source(facts: ExperimentFacts) -> dict[str, Any]:
    return {"dataset_name": facts.dataset, "source_type": "other",
            "additional_details": {"dataset_sha": facts.dataset_sha}}


def aggregate_record(facts: ExperimentFacts, samples_path: str, checksum: str, total_rows: int) -> dict[str, Any]:
    """The aggregate record (eval.schema.json) of one experiment; `samples_path` its instance file's
    repository path, `checksum` that file's sha256 and `total_rows` its lines."""
    results: list[dict[str, Any]] = []
    for summary in facts.modes:
        results += [r for m in MODE_METRICS if (r := mode_result(facts, summary, m)) is not None]
    floors = {(f["measure"], f["metric"]): f for f in facts.report.get("rerun_floors") or ()}
    undefined = {}
    for row in facts.report["results"]:
        if row.get("value") is None or row.get("undefined_reason"):
            undefined[f"{MEASURE_NAMES[row['measure']]}, citation {row['metric']}"] = \
                f"undefined: {row.get('undefined_reason') or 'no value'}"
            continue
        results.append(bias_result(facts, row, floors.get((row["measure"], row["metric"]))))
    model = facts.model
    details = {"experiment_id": facts.experiment_id, "metadata_type": facts.metadata_type or "",
               "label_a": facts.label_a or "", "label_b": facts.label_b or "",
               "modes": json.dumps([s.mode for s in facts.modes]),
               "runs": json.dumps({s.mode: s.run_id for s in facts.modes}),
               "CAB": f"{CAB_NAME}; {CAB_NOT}", "CAS": CAS_NAME,
               "rerun_note": facts.report.get("rerun_note") or "", **undefined}
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": f"pattrieval/{facts.experiment_id}/{model}/{facts.retrieved_timestamp}",
        "retrieved_timestamp": facts.retrieved_timestamp,
        "source_metadata": {"source_name": "PAttriEval", "source_type": "evaluation_run",
                            "source_organization_name": "unknown", "evaluator_relationship": "third_party",
                            "additional_details": {k: str(v) for k, v in details.items()}},
        "model_info": {"name": model, "id": model,
                       "additional_details": {"deployment_type": "unknown" if facts.quantization == "imported"
                                              else "self_deployed",
                                              "model_availability": "unknown",
                                              "quantization": facts.quantization or ""}},
        "eval_library": {"name": "pattrieval", "version": facts.version},
        "evaluation_results": results,
        "detailed_evaluation_results": {"format": "jsonl", "file_path": samples_path, "hash_algorithm": "sha256",
                                        "checksum": checksum, "total_rows": total_rows},
    }


def instance_record(facts: ExperimentFacts, evaluation_id: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """One answer (a row of the store's export: store.queries.EXPORT_COLUMNS) as an instance record
    (instance_level_eval.schema.json), linked to its mode's citation precision result."""
    mode = row["mode"]
    gold = [int(x) for x in row.get("gold") or ()]
    cited = [int(x) for x in row.get("cited") or ()]
    # pandas gives NaN for a missing text (a vanilla run's labels and type): None here.
    labels = (_text(row.get("label_relevant")), _text(row.get("label_nonrelevant"))) if mode in ("base", "cf") else None
    attribution = []
    for position in cited:
        attribution.append({"turn_idx": 0, "source": "output.raw", "extracted_value": str(position),
                            "extraction_method": CITATION_PARSER, "is_terminal": True})
    metadata = {"mode": mode, "run_id": row["run_id"], "experiment_id": row["experiment_id"],
                "metadata_type": _text(row.get("metadata_type")) or "",
                "label_relevant": (labels[0] or "") if labels else "", "label_nonrelevant": (labels[1] or "") if labels else "",
                "cited": json.dumps(cited), "gold": json.dumps(gold),
                "cited_labels": json.dumps([(labels[0] if p in gold else labels[1]) if labels else None for p in cited]),
                **{k: _number(_plain(row.get(k))) for k in ITEM_NUMBERS}}
    precision = _plain(row.get("precision"))
    exact = _plain(row.get("exact_match"))
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": evaluation_id,
        "model_id": facts.model,
        "evaluation_name": f"{mode} {MODE_METRIC_NAMES['precision']}",
        "evaluation_result_id": f"{mode}.precision",
        "sample_id": str(row["item_id"]),
        "interaction_type": "single_turn",
        "input": {"raw": _text(row.get("question")) or "", "reference": [str(a) for a in row.get("gold_answers") or ()]},
        "output": {"raw": [_text(row.get("answer")) or ""]},
        "messages": None,
        "answer_attribution": attribution,
        # Precision is defined for every answer (0 where it cites nothing, as the paper counts it).
        "evaluation": {"score": float(precision),
                       "is_correct": bool(_finite(exact) and float(exact) >= 1.0)},
        "metadata": metadata,
    }


def _text(x: Any) -> str | None:
    """A text cell as str; None where missing."""
    plain = _plain(x)
    return None if plain is None else str(plain)


def _plain(x: Any) -> Any:
    """numpy and pandas scalars as Python values; missing values (None, NaN, pd.NA) as None."""
    if x is None:
        return None
    if hasattr(x, "item"):
        x = x.item()
    try:
        if x != x:  # NaN
            return None
    except TypeError:  # pd.NA
        return None
    return x
