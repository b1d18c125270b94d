"""`python -m engine why-cited`: why was this document cited? The citation choice model.

Thin: parse, call engine.usecases.bias.why_cited, print. Reads only the store and never imports torch.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg
from engine.errors import UserError
from engine.types import MODES
from engine.usecases.bias.why_cited import (
    WhyCitedRequest,
    citation_counts,
    few_clusters_notes,
    not_converged,
    robust_note,
    separation_notes,
    why_cited,
)
from engine.usecases.study.effects import StudyEffectsRequest, why_cited_study


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "why-cited",
        help="why was a document cited? a choice model of relevance, position, label and repetition",
        description="Fit a conditional logit of which shown document an answer cites (each answer a "
        "stratum, statsmodels' ConditionalLogit) with relevance, position, label and repetition as "
        "covariates, over the stored answers of the chosen experiments or study. Each effect is an odds "
        "ratio with its 95% interval and p (model-based, and cluster-robust by item beside it), in words. "
        "An answer citing k of its n documents is one choice of a k-subset (the k-of-n conditional logit; the "
        "output says how many answers cite several). A covariate that separates cited from uncited documents "
        "is named, and the other effects are fitted in its limit. Also the suppression rate (answers citing no shown "
        "document) per experiment and mode, with a chi-square test across them and, for two, the exact "
        "McNemar test on the items both answered. Answers that cite nothing or every document carry no "
        "information on which document is chosen and are left out of the fit (counted).",
    )
    p.add_argument("--experiment", action="append", default=[], metavar="ID",
                   help="experiment id or name (see `python -m engine list`); repeat for several")
    p.add_argument("--study", default=None, metavar="NAME",
                   help="a study (a grid): one model across it, the label effect in each configuration with "
                        "intervals cluster-robust by item, the Wald test of whether it differs between "
                        "configurations (jointly and per axis) and every two configurations' difference with "
                        "Holm's correction (docs/method.md); with --pooled or --experiment, one pooled choice "
                        "model of all its experiments instead")
    p.add_argument("--pooled", action="store_true",
                   help="with --study: fit the pooled choice model of its experiments (as --experiment does)")
    p.add_argument("--save", action="store_true",
                   help="with --study: keep the per-configuration effects in the store's table "
                        "study_label_effects (replacing the study's rows of the same modes)")
    p.add_argument("--mode", action="append", default=None, metavar="MODE",
                   help=f"only these modes' answers ({', '.join(MODES)}); repeatable or comma-separated "
                        "(default: all)")
    p.add_argument("--position", choices=("group", "number"), default="group",
                   help="position as first/middle/last (group, default) or as a number (per step down the list)")
    p.add_argument("--interaction", action="append", default=[], metavar="A:B",
                   help="add an interaction of two of relevant, position, label, repeated (e.g. "
                        "label:relevant); repeatable")
    p.add_argument("--reference", default=None, metavar="LABEL",
                   help="the label the others are compared with (default: label B of the experiments' "
                        "metadata type, so an odds ratio above 1 favours label A, as CAB > 0 does)")
    p.add_argument("--no-memory-check", action="store_true",
                   help="fit even where the fit would take more memory than is available now (by default "
                        "such a fit is refused in one line before a row is read; both the choice model and a --study "
                        "fit read the decision rows a chunk of runs at a time and keep about 90 bytes an answer, "
                        "docs/figures.md)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_db_arg(p)
    p.set_defaults(main=main)


def _modes(values: list[str] | None) -> tuple[str, ...] | None:
    if not values:
        return None
    return tuple(dict.fromkeys(m.strip() for v in values for m in v.split(",") if m.strip()))


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path

    if args.study is not None and not args.experiment and not args.pooled:
        return _study(args)
    if args.save:
        raise UserError("--save keeps the study model's effects: give --study NAME without --pooled or --experiment")
    request = WhyCitedRequest(tuple(args.experiment), args.study, _modes(args.mode), args.position,
                              tuple(args.interaction), args.reference, memory_check=not args.no_memory_check)
    result = why_cited(request, db_path(args.db))
    if args.json:
        print(json_for_terminal(json.dumps(result.as_dict(), indent=2, ensure_ascii=False)))
    else:
        print(for_terminal(format_text(result), keep_newlines=True))
    return 0


def _study(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path

    for option, given in (("--interaction", args.interaction), ("--reference", args.reference)):
        if given:
            raise UserError(f"{option} applies to the pooled choice model: add --pooled (the study model compares "
                            "label A with label B of each configuration's metadata type)")
    request = StudyEffectsRequest(args.study, _modes(args.mode), args.position, args.save,
                                  memory_check=not args.no_memory_check)
    result = why_cited_study(request, db_path(args.db))
    if args.json:
        print(json_for_terminal(json.dumps(result.as_dict(), indent=2, ensure_ascii=False)))
    else:
        print(for_terminal(format_study_text(result), keep_newlines=True))
    return 0


def format_study_text(result: Any) -> str:
    """The study model: per-configuration label effects, the interaction tests, the pairwise differences."""
    from engine.commands.bias import text_columns
    from engine.presentation.formatting import format_p, format_ratio

    fit = result.fit
    lines = [
        f"one model of label bias across study '{result.study}' ({len(result.experiment_ids)} experiments): "
        f"{fit.n_answers:,} answers, {fit.n_informative:,} of them cite some but not all of their documents "
        f"({fit.n_items:,} items)",
        "conditional logit of which shown document is cited (each answer a stratum) with relevance, position, the "
        "label and the label x configuration interactions; intervals " + fit.covariance
        + (f" over axes {', '.join(fit.axes)}" if fit.axes else " (one configuration)"),
    ]
    lines += [f"not an axis: {axis}: {why}" for axis, why in fit.dropped_axes]
    if not fit.converged:
        lines.append("warning: the fit did not converge; read the intervals with care")
    table = [["configuration", "label A vs B", "answers", "items", "log odds", "odds ratio", "95% CI", "p"]]
    for e in fit.configurations:
        table.append([e.configuration, f"{e.label_a} vs {e.label_b}", f"{e.n_answers:,}", f"{e.n_items:,}",
                      f"{e.log_odds:+.3f}", format_ratio(e.odds_ratio),
                      f"[{format_ratio(e.or_low)}, {format_ratio(e.or_high)}]", format_p(e.p)])
    body = text_columns(table, right={2, 3, 4, 5, 7})
    lines += ["", body[0], "-" * max(len(x) for x in body), *body[1:], ""]
    if fit.interaction is None:
        lines.append("one configuration: no test between configurations")
    else:
        tests = [fit.interaction, *fit.per_axis]
        for t in tests:
            lines.append(f"Wald test: {t.hypothesis}: chi2 = {t.chi2:.2f}, df = {t.df}, p {format_p(t.p)}")
        rows = [["configuration b", "minus configuration a", "difference (log odds)", "95% CI", "p",
                 f"p ({fit.correction})"]]
        for d in fit.pairwise:
            rows.append([d.b, d.a, f"{d.difference:+.3f}", f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]", format_p(d.p),
                         format_p(d.p_adjusted) + (" *" if d.reject else "")])
        body = text_columns(rows, right={2, 4, 5})
        lines += ["", f"pairwise differences of the label effect, {fit.correction}-corrected over "
                      f"{len(fit.pairwise)} pairs (* : adjusted p < 0.05)",
                  body[0], "-" * max(len(x) for x in body), *body[1:]]
    lines += [f"note: {n}" for n in fit.notes]
    if result.saved is not None:
        lines.append(f"saved {result.saved} rows to the table study_label_effects")
    return "\n".join(lines)


def format_text(result: Any) -> str:
    """The human-readable model and suppression rates."""
    from engine.commands.bias import text_columns
    from engine.presentation.formatting import format_p, format_ratio

    fit, s = result.fit, result.suppression
    lines = [
        f"citation choice model over {len(result.experiment_ids)} experiment"
        f"{'s' if len(result.experiment_ids) != 1 else ''} ({result.n_runs} runs): {fit.n_answers:,} answers, "
        f"{fit.n_informative:,} of them cite some but not all of their documents and inform the fit "
        f"({fit.n_documents:,} shown documents)",
        "conditional logit of which shown document is cited (each answer a stratum); position "
        + ("as first/middle/last" if fit.position == "group" else "as a number")
        + (f"; labels against '{fit.label_reference}'" if fit.label_reference else ""),
    ]
    lines.append(citation_counts(fit))
    if not fit.converged:
        lines.append("warning: " + not_converged(fit))  # engine.usecases.bias.why_cited
    table = [["effect", "odds ratio", "95% CI", "p", f"robust 95% CI (by {fit.cluster})", "robust p"]]
    for e in fit.effects:
        table.append([e.term, format_ratio(e.odds_ratio), f"[{format_ratio(e.ci_low)}, {format_ratio(e.ci_high)}]",
                      format_p(e.p), "none (no spread)" if e.robust_undefined
                      else f"[{format_ratio(e.robust_ci_low)}, {format_ratio(e.robust_ci_high)}]",
                      format_p(e.robust_p)])
    body = text_columns(table, right={1, 3, 5})
    lines += ["", body[0], "-" * max(len(x) for x in body), *body[1:], ""]
    lines += [f"- {e.sentence}" for e in fit.effects]
    lines += separation_notes(fit)
    lines += [f"not estimated: {term}: {why}" for term, why in fit.dropped]
    lines.append(robust_note(fit))
    lines += [f"robust interval of {e.term}: {e.robust_undefined}" for e in fit.effects if e.robust_undefined]
    lines += few_clusters_notes(fit)
    lines += ["", "suppression: answers citing no shown document"]
    rows = [["condition", "answers", "cite nothing", "rate", "95% CI (Wilson)"]]
    for r in s.rates:
        rows.append([r.condition, f"{r.answers:,}", f"{r.silent:,}", f"{100 * r.rate:.1f}%",
                     f"[{100 * r.ci_low:.1f}%, {100 * r.ci_high:.1f}%]"])
    body = text_columns(rows, right={1, 2, 3})
    lines += [body[0], "-" * max(len(x) for x in body), *body[1:]]
    if s.chi2_p is not None:
        lines.append(f"chi-square test across conditions: chi2 = {s.chi2:.2f}, df = {s.chi2_df}, p {format_p(s.chi2_p)}")
    if s.mcnemar_p is not None:
        lines.append(f"exact McNemar test on {s.mcnemar_pairs:,} items answered in both: silent in the first only "
                     f"{s.mcnemar_b}, in the second only {s.mcnemar_c}, p {format_p(s.mcnemar_p)}")
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)
