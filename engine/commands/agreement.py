"""`python -m engine agreement`: how far the judges of citations agree.

Thin: parse, call engine.usecases.judges.agreement, print. Each number names the test or library it
comes from; a statistic the data cannot define says why instead. --format json gives every
number, --format csv the table of pairs.
"""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg
from engine.usecases.judges.agreement import AgreementRequest, agreement


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "agreement",
        help="agreement between the judges of citations (Cohen's and Fleiss' kappa, Krippendorff's alpha)",
        description="Agreement between the judges of the cited documents of an experiment's runs (or of "
        "chosen runs): each judge's verdict is attributable or not (a verdict the parser could not read "
        "is left out and counted). Per pair of judges the cited documents both judged, raw agreement and "
        "Cohen's kappa with its asymptotic 95% interval (statsmodels); for the panel Fleiss' kappa "
        "(statsmodels, the documents every judge judged) and Krippendorff's alpha (the krippendorff "
        "package, nominal); each model judge against each human judge (import-labels): accuracy, "
        "precision and recall of attributable with Wilson intervals; and where a human labelled part of "
        "what a judge judged, the attribution rate corrected by prediction-powered inference.",
    )
    p.add_argument("--experiment", default=None, help="experiment id or name (see `python -m engine list`)")
    p.add_argument("--runs", action="append", default=None, metavar="RUN[,RUN...]",
                   help="run ids instead of an experiment, repeatable or comma-separated")
    p.add_argument("--judge", action="append", default=None, metavar="NAME",
                   help="a judge to include, repeatable (default: every judge of these runs)")
    add_db_arg(p)
    p.add_argument("--format", choices=("text", "json", "csv"), default="text",
                   help="text (default), json (every number), or csv (one row per pair of judges)")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path

    runs = tuple(r.strip() for v in args.runs or () for r in v.split(",") if r.strip())
    result = agreement(AgreementRequest(db_path(args.db), args.experiment, runs, tuple(args.judge or ())))
    fmt = "json" if args.json else args.format
    if fmt == "json":
        print(json_for_terminal(json.dumps(result.as_dict(), indent=2, ensure_ascii=False)))
    elif fmt == "csv":
        print(csv_text(result), end="")
    else:
        print(for_terminal(format_text(result), keep_newlines=True))
    return 0


def csv_text(result: Any) -> str:
    """The table of pairs as CSV; names escaped for a terminal and quoted where a spreadsheet would run them."""
    import csv

    from store.csv_safe import csv_rows

    rows: list[list[Any]] = [["judge_a", "judge_b", "n", "raw_agreement", "kappa", "kappa_ci_low", "kappa_ci_high",
                              "undefined"]]
    for p in result.pairs:
        a = p.agreement
        ci = a.kappa_ci or (None, None)
        rows.append([for_terminal(p.judge_a), for_terminal(p.judge_b), a.n, a.raw_agreement, a.kappa, ci[0], ci[1],
                     a.undefined or a.ci_undefined or ""])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(csv_rows(rows))
    return out.getvalue()


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _ci(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]"


def _share(p: Any) -> str:
    return f"undefined: {p.undefined}" if p.value is None else f"{p.value:.3f}{_ci(p.ci)} ({p.k}/{p.n})"


def format_text(result: Any) -> str:
    """The judges, the pair table, the panel line, the table against human labels and the PPI lines."""
    from engine.commands.bias import text_columns

    what = f"experiment {result.experiment_id}" if result.experiment_id else "runs"
    lines = [f"{what}: run(s) {', '.join(result.run_ids)}", ""]
    table = [["judge", "kind", "verdicts", "no verdict (left out)"]]
    table += [[j.judge, j.kind, str(j.n_verdicts), str(j.n_null)] for j in result.judges]
    lines += text_columns(table, right={2, 3})
    lines += ["", "pairs of judges: Cohen's kappa with its asymptotic 95% CI (statsmodels cohens_kappa), "
              "on the cited documents both judged"]
    table = [["judge A", "judge B", "n", "raw agreement", "kappa [95% CI]"]]
    for p in result.pairs:
        a = p.agreement
        if a.kappa is None:
            kappa = f"undefined: {a.undefined}"
        elif a.kappa_ci is None:
            kappa = f"{a.kappa:.3f} (no interval: {a.ci_undefined})"
        else:
            kappa = f"{a.kappa:.3f}{_ci(a.kappa_ci)}"
        table.append([p.judge_a, p.judge_b, str(a.n), _f(a.raw_agreement), kappa])
    lines += text_columns(table, right={2, 3}) if result.pairs else ["  (one judge: no pairs)"]
    panel = result.panel
    fleiss = (f"undefined: {panel.fleiss_undefined}" if panel.fleiss_kappa is None
              else f"{panel.fleiss_kappa:.3f} on the {panel.n_complete} documents every judge judged")
    alpha = (f"undefined: {panel.alpha_undefined}" if panel.krippendorff_alpha is None
             else f"{panel.krippendorff_alpha:.3f} (nominal)")
    lines += ["", f"panel of {panel.n_judges} judges on {panel.n_items} cited documents: Fleiss' kappa "
              f"(statsmodels fleiss_kappa) {fleiss}; Krippendorff's alpha (krippendorff package) {alpha}"]
    if result.panel_note():
        lines.append(result.panel_note())
    if result.against_human:
        lines += ["", "against human labels: accuracy, and precision and recall of 'attributable', with Wilson "
                  "95% CIs (statsmodels proportion_confint)"]
        table = [["judge", "human", "n", "accuracy", "precision", "recall"]]
        table += [[h.judge, h.human, str(h.scores.n), _share(h.scores.accuracy), _share(h.scores.precision),
                   _share(h.scores.recall)] for h in result.against_human]
        lines += text_columns(table, right={2})
    lines += [""] if result.ppi else []
    for row in result.ppi:
        r = row.rate
        value = (f"undefined: {r.undefined}" if r.estimate is None
                 else f"{r.estimate:.3f}{_ci(r.ci)}" + (f" ({r.note})" if r.note else ""))
        lines.append(f"attribution rate by {row.judge} corrected with {row.human}'s {r.n_labelled} labels "
                     f"(prediction-powered inference, Angelopoulos et al. 2023; 95% CI): {value}; "
                     f"the judge alone on the {r.n_unlabelled} others: {_f(r.naive_judge_rate)}, "
                     f"the labels alone: {_f(r.human_rate)}")
    return "\n".join(lines)
