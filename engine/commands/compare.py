"""`python -m engine compare A B`: two runs, two experiments' modes or two experiments, item by item.

Thin: parse, call engine.usecases.compare.compare, print. A and B are run ids, experiments (id or
name) with a mode ("EXP:base"), or whole experiments (then mode by mode, and their CAS and CAB
against each other). Every difference is B - A. Hints go to stderr so --json and --format csv
stay machine-readable.

The text is the table, then one short verdict line per metric naming the test that gave it (the
table holds the numbers once; the verdict, which may carry an equivalence test, gets a line of
its own rather than a column as wide as its longest reason). `--explain` spells each metric out
in a sentence instead.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.errors import UserError
from engine.paths import DEFAULT_DB_HELP
from engine.types import COMPARED_METRICS
from engine.usecases.compare.sides import large_sample_above
from engine.usecases.runs.rerun_marks import MARK

DEFAULT_ITEMS = 10


def add_parser(sub: argparse._SubParsersAction) -> None:
    above = large_sample_above()
    p = sub.add_parser(
        "compare",
        help="compare two runs, modes or experiments on the same items, with paired tests",
        description="Compare B against A on the items both hold (paired by item id): per metric the "
        "means, B - A with a 95% interval (exact for 0/1 metrics, paired bootstrap otherwise), the p "
        "value that gives the verdict (exact McNemar for 0/1 metrics, the paired permutation test "
        "otherwise, the paired t-test beside it) with Holm's correction, TOST where a margin applies, "
        "the smallest difference detectable at 80% power, the flips, and the items that differ most. "
        f"Above {above:,} differing pairs a metric is tested with the paired t-test or McNemar's chi-square and "
        "a t interval instead (--exact keeps the permutation and exact tests). "
        "A and B are run ids, EXPERIMENT:MODE, or whole experiments (mode by mode, plus their CAS and "
        "CAB). The rules: docs/method.md, 'Comparing two runs'.",
    )
    p.add_argument("a", metavar="A", help="run id, EXPERIMENT:MODE (id or name; vanilla, base or cf) or EXPERIMENT")
    p.add_argument("b", metavar="B", help="the same kinds as A; differences are B - A")
    p.add_argument("--db", default=None, help=f"DuckDB file (default: {DEFAULT_DB_HELP})")
    p.add_argument("--metric", action="append", default=None, metavar="NAME",
                   help="a metric to compare, repeatable or comma-separated (default: all of "
                        f"{', '.join(COMPARED_METRICS)})")
    p.add_argument("--margin", "--equivalence-margin", dest="margin", default=None, metavar="M",
                   help="equivalence margins for TOST ('equivalent within M'), per metric as NAME=M, "
                        "comma-separated (e.g. precision=5,recall=5,n_citations=0.2; also CAS_f1, CAB_f1...); "
                        "a plain number is the margin for every metric in points (x100), not n_citations")
    p.add_argument("--pair-by-id", action="store_true", help="pair items by id even when the datasets differ")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table (same as --format json)")
    p.add_argument("--format", choices=("text", "json", "csv"), default="text",
                   help="text (default), json, or csv: every paired item, its metrics in A and B and B - A "
                        "(item ids escaped for the terminal and quoted where a spreadsheet would run them)")
    p.add_argument("--explain", action="store_true",
                   help="one sentence per metric instead of the short verdict lines: the interval and how it "
                        "was made, every p value, the equivalence test and the detectable difference, with the "
                        "tests spelled out (default: the table and one verdict line per metric)")
    p.add_argument("--items", type=int, default=DEFAULT_ITEMS, metavar="N",
                   help=f"show the N items that differ most (default {DEFAULT_ITEMS})")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples, 100 to 100000 (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and permutation seed (default 0)")
    p.add_argument("--exact", action="store_true",
                   help="the permutation test, exact McNemar and their intervals at any size (default: above "
                        f"{above:,} differing pairs the paired t-test or McNemar's chi-square with a t interval, "
                        "seconds instead of minutes at a million items; docs/method.md)")
    p.set_defaults(main=main)


def _metrics(values: list[str] | None) -> tuple[str, ...] | None:
    if not values:
        return None
    return tuple(m.strip() for v in values for m in v.split(",") if m.strip())


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path
    from engine.usecases.compare.compare import CompareRequest, compare

    if args.items < 0:
        raise UserError(f"--items must be 0 or more, not {args.items}")
    from engine.usecases.compare.compare import parse_margins

    fields: dict[str, Any] = {"margins": parse_margins(args.margin), "pair_by_id": args.pair_by_id,
                              "seed": args.seed, "exact": args.exact}
    metrics = _metrics(args.metric)
    if metrics is not None:
        fields["metrics"] = metrics
    if args.resamples is not None:
        fields["resamples"] = args.resamples
    result = compare(CompareRequest(args.a, args.b, **fields), db_path(args.db))
    fmt = "json" if args.json else args.format
    if fmt == "json":
        print(json_for_terminal(json.dumps(result.as_dict(items=args.items), indent=2, ensure_ascii=False, default=str)))
    elif fmt == "csv":
        print(csv_for_terminal(result.items()), end="")
    else:
        print(for_terminal(format_text(result, args.items, explain=args.explain), keep_newlines=True))
    return 0


def csv_for_terminal(frame: Any) -> str:
    """The frame as CSV for stdout: stored text (item ids) escaped for a terminal cell by cell, as
    `report --format csv` does, and quoted where a spreadsheet would run it (store.csv_safe)."""
    from store.csv_safe import csv_frame

    shown = frame.copy()
    for i in range(shown.shape[1]):
        if shown.iloc[:, i].dtype.kind not in "biufc":  # text columns; numbers stay numbers
            shown.iloc[:, i] = shown.iloc[:, i].map(lambda v: for_terminal(v) if isinstance(v, str) else v)
    return csv_frame(shown).to_csv(index=False)


def _num(x: float | None, fmt: str = ".1f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, fmt)


def _p(p: float | None) -> str:
    from engine.presentation.formatting import format_p

    return format_p(p)


def _run_line(name: str, run: Any) -> str:
    return (f"{name}: run {run.run_id}  experiment {run.experiment_name}  {run.rag_mode}  model {run.model}"
            f"{'  ' + run.quantization if run.quantization and run.quantization != 'none' else ''}"
            f"  dataset {run.dataset_label}  ({run.status})")


def _metric_rows(metrics: Any) -> list[str]:
    from engine.commands.bias import text_columns

    table = [["metric", "n", "A", "B", "B - A", "95% CI", "test", "p", "p Holm", "p t-test", "MDD 80%"]]
    for m in metrics:
        table.append([m.metric, str(m.n), _num(m.mean_a), _num(m.mean_b), _num(m.diff, "+.1f"), _ci(m), m.test,
                      _p(m.p), _p(m.p_holm), _t_p(m), "undefined" if m.min_detectable_undefined else
                      _num(m.min_detectable)])
    body = text_columns(table, right={1, 2, 3, 4, 7, 8, 9, 10})
    return [body[0], "-" * max(len(x) for x in body), *body[1:]]


def _t_p(m: Any) -> str:
    """The paired t-test's p beside a permutation test; "undefined" where it has none."""
    if m.t is None:
        return ""
    return "undefined" if m.p_t is None or math.isnan(m.p_t) else _p(m.p_t)


def _ci(m: Any) -> str:
    """The interval; '*' marks a bootstrap interval on few items (approximate); undefined says so."""
    if m.ci_undefined:
        return "undefined"
    return f"[{_num(m.ci_low, '+.1f')}, {_num(m.ci_high, '+.1f')}]{'*' if m.ci_approximate else ''}"


def _short_verdict(m: Any) -> str:
    """The metric's verdict as the use case gave it, with the test(s) behind it and their Holm p:
    the difference test always, the equivalence test where a margin applies."""
    why = f"{m.test}, Holm p {_p(m.p_holm)}"
    e = m.equivalence
    if e is not None and not e.undefined:
        why += f"; {e.method} within +-{e.margin:g}, Holm p {_p(e.p_holm)}"
    return f"{m.metric}: {m.verdict} ({why})"


def _verdicts(metrics: Any, explain: bool, approximate_below: int) -> list[str]:
    if explain:
        return [_verdict_line(m, approximate_below) for m in metrics]
    # Metrics with fewer than two pairs have no test at all: one line names them together, with
    # the verdict the use case gave each of them (the same one: too few items).
    few = [m for m in metrics if m.n < 2]
    lines = [_short_verdict(m) for m in metrics if m.n >= 2]
    return lines + ([f"{', '.join(m.metric for m in few)}: {few[0].verdict} (fewer than 2 paired; no test)"]
                    if few else [])


def _verdict_line(m: Any, approximate_below: int) -> str:
    """One sentence per metric (--explain): the difference and its interval, which test gave p, Holm beside
    it, TOST, the detectable difference; what is undefined says why."""
    if m.ci_undefined:
        ci = f"; interval undefined: {m.ci_undefined}"
    else:
        how = "exact" if m.ci_method.startswith("exact") else m.ci_method
        if m.ci_approximate:
            how += f", approximate below {approximate_below} items"
        ci = f" [{_num(m.ci_low, '+.1f')}, {_num(m.ci_high, '+.1f')}] ({how})"
    t = ""
    if m.t is not None:
        t = (f", paired t-test p {_p(m.p_t)}" if m.p_t is not None and not math.isnan(m.p_t)
             else ", paired t-test undefined" + (": every paired difference is equal" if m.n >= 2 else ""))
    eq = ""
    if m.equivalence:
        e = m.equivalence
        eq = (f"; equivalence within +-{e.margin:g} undefined: {e.undefined}" if e.undefined else
              f"; {e.method} within +-{e.margin:g}: p {_p(e.p)}, Holm p {_p(e.p_holm)}")
    if m.min_detectable is not None:
        by = (f"{m.test} at the observed discordance" if m.discordant is not None
              else "paired t-test at the observed SD")
        power = f"; with {m.n} items a difference of {_num(m.min_detectable)} is detectable at 80% power ({by})"
    else:
        power = f"; detectable difference undefined: {m.min_detectable_undefined}"
    return (f"{m.metric}: {m.verdict} (B - A = {_num(m.diff, '+.1f')}{ci}; {m.test} p {_p(m.p)}, "
            f"Holm p {_p(m.p_holm)}{t}{eq}{power})")


def format_text(result: Any, n_items: int = DEFAULT_ITEMS, *, explain: bool = False) -> str:
    """The human-readable comparison: the tables and one short verdict line per metric, or with
    `explain` one sentence per metric and the tests in full."""
    approximate_below = result.approximate_below

    lines = [f"compare B against A: A = {result.request.a}, B = {result.request.b}; differences are B - A, "
             "shares and scores in points (x100)"]
    for r in result.runs:
        lines += ["", f"== {r.title} ==", _run_line("A", r.run_a), _run_line("B", r.run_b)]
        p = r.pairing
        lines.append(f"paired {p.n_paired} items by id; left out: {p.only_a} only in A, {p.only_b} only in B"
                     + ("; datasets differ, paired by id on request" if p.pair_by_id else ""))
        lines += [f"note: {n}" for n in r.notes]
        lines += ["", *_metric_rows(r.metrics), ""]
        lines += _verdicts(r.metrics, explain, approximate_below)
        if r.em_flips:
            f = r.em_flips
            lines.append(f"exact match flips over {f.n} items: right->wrong {f.right_to_wrong}, "
                         f"wrong->right {f.wrong_to_right}")
        c = r.citation_flips
        lines.append(f"citation flips over {c.shown_both} documents shown in both: cited in A only "
                     f"{c.a_only_relevant} relevant + {c.a_only_nonrelevant} not; in B only "
                     f"{c.b_only_relevant} relevant + {c.b_only_nonrelevant} not")
        if r.reruns.known:
            lines.append(r.reruns.line())
        if n_items and len(r.items):
            lines += ["", f"items that differ most in {r.sort_metric} (of {len(r.items)}; all: --format csv):"]
            lines += ["  " + x for x in _item_rows(r.items.head(n_items), r.sort_metric, r.reruns.known)]
    for b in result.bias:
        lines += ["", f"== {b.measure}: experiment B's against experiment A's ==",
                  f"A: runs {' and '.join(x.run_id for x in b.runs_a)}; B: runs {' and '.join(x.run_id for x in b.runs_b)}",
                  f"paired {b.pairing.n_paired} items held by all four runs; left out: up to {b.pairing.only_a} "
                  f"of A's, {b.pairing.only_b} of B's", "", *_metric_rows(b.metrics), ""]
        lines += _verdicts(b.metrics, explain, approximate_below)
    # Said once: whether a flip between A and B also happens on a rerun is unknown for every pair.
    unknown = [f"flips: {r.reruns.line()}" for r in result.runs[:1] if not any(x.reruns.known for x in result.runs)]
    if not explain:
        lines += ["", f"p Holm: over the metrics of one comparison, at 0.05; *: bootstrap on fewer than "
                  f"{approximate_below} items, approximate;",
                  "MDD 80%: smallest |B - A| detectable at 80% power; --explain: every test in full "
                  "(docs/method.md, 'Comparing two runs')", *unknown]
        return "\n".join(lines)
    lines += ["", "p (the verdict's): exact McNemar (binomial test on the discordant pairs) for 0/1 metrics, the "
              "paired permutation test (sign flips; null: A and B exchangeable within items) otherwise, the "
              "paired t-test beside it; Holm over the metrics of one comparison, for 'different' and for "
              "'equivalent' apart. 95% CI: exact (Clopper-Pearson on the discordant pairs) for 0/1 metrics, "
              f"percentile bootstrap otherwise (*: fewer than {approximate_below} items, where it covers less than "
              f"95%). Above {large_sample_above():,} differing pairs (unless --exact): McNemar's chi-square "
              "(continuity-corrected) or the paired t-test, and the t interval. MDD: smallest |B - A| detectable "
              "at 80% power. Rules: docs/method.md, 'Comparing two runs'.", *unknown]
    return "\n".join(lines)


def _item_rows(items: Any, metric: str, reruns: bool) -> list[str]:
    """The items table; with reruns, a last column marks the items whose citations change on a
    rerun too."""
    import pandas as pd

    from engine.commands.bias import text_columns

    rows = [["item", "A", "B", "B - A"] + (["rerun"] if reruns else [])]
    columns = (items["item_id"], items[f"{metric}_a"], items[f"{metric}_b"], items[f"{metric}_diff"],
               items["changes_on_rerun"])
    for item, a, b, d, again in zip(*columns, strict=True):
        rows.append([str(item), _num(float(a)), _num(float(b)), _num(float(d), "+.1f")]
                    + ([MARK if not pd.isna(again) and again else ""] if reruns else []))
    return text_columns(rows, right={1, 2, 3})
