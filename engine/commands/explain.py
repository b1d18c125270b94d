"""`python -m engine explain --experiment ID|--run ID`: Prompt 5 explanations of stored answers.

Everything that can fail is checked before the first write: the options, the store, the runs
and their answers, the model, and every prompt's length. Each finished batch is then committed
on its own, so kill -9 loses at most the batch in flight, and the same command again explains
only what is missing (items explained by the same explainer model are skipped).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from engine.judging import add_model_options, add_target_options, answered_runs, check_args, check_lengths, choose_model, load


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="explain the citations of stored answers (Prompt 5)",
        description="Ask a model to explain the citations of each stored answer (Prompt 5: the "
        "question, its answer and the same documents, order and labels it saw), and store each "
        "explanation with its tokens, raw log-probs, the document numbers it mentions and whether "
        "it gives a label as a reason.",
    )
    add_target_options(p)
    add_model_options(p, role="explainer", max_new_tokens=256)
    p.set_defaults(main=main)


def chosen_runs(args: argparse.Namespace, verb: str):
    """(store path, the runs of --experiment / --run that have answers, model to load, its name as
    stored) for `explain` and `verify`; a UserError in one line when any of them is wrong."""
    from engine.commands.bias import db_path, unknown_experiment
    from store.queries import explain_runs

    check_args(args)
    path = db_path(args.db)
    runs = explain_runs(path, experiment=args.experiment, run=args.run)
    unknown = unknown_experiment(path, args.experiment) if runs is None and args.experiment is not None else ""
    answered = answered_runs(runs, path, args, verb, unknown)
    return (path, answered, *choose_model(args.model, answered))


def main(args: argparse.Namespace) -> int:
    from store.queries import explain_sources

    path, answered, model, label = chosen_runs(args, "explain")

    todo = [(run, explain_sources(path, run, label, args.limit)) for run in answered]
    n_todo = sum(len(s) for _, s in todo)
    if n_todo == 0:
        for run in answered:
            print(f"  run {run.run_id}  {run.rag_mode:<7}  already explained by {label}")
        _print_rates(path, [r.run_id for r in answered])
        return 0

    from engine.explain import explain_prompt
    from engine.generate import GenerationConfig

    loaded = load(model, args)
    check_lengths(loaded, ((f"run {run.run_id}, item '{s.item.id}'", explain_prompt(s)) for run, sources in todo for s in sources),
                  args.max_new_tokens, "explanation")

    from tqdm import tqdm

    from engine.explain import explain_batches
    from store.explanation_store import ExplanationStore

    store = ExplanationStore(path)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    bar = tqdm(total=n_todo, unit="item", desc=f"explain with {label}", file=sys.stderr, dynamic_ncols=True)
    try:
        for run, sources in todo:
            done = 0
            if sources:
                for n in explain_batches(loaded, run, sources, label, config, store.write_batch):
                    done += n
                    bar.update(n)
            print(f"  run {run.run_id}  {run.rag_mode:<7}  explained {done} answer{'s' if done != 1 else ''} with {label}")
    finally:
        bar.close()
    _print_rates(path, [r.run_id for r in answered])
    experiment = answered[0].experiment_id
    db = f" --db {shlex.quote(args.db)}" if args.db else ""
    print(f"see the shares beside the bias with: python -m engine bias --experiment {experiment}{db}", file=sys.stderr)
    return 0


def _print_rates(path, run_ids: list[str]) -> None:
    from store.queries import explanation_rates

    for run_id, model, mode, n, n_label, share in explanation_rates(path, run_ids):
        print(f"  {mode:<7} run {run_id}  {model}: {n_label} of {n} explanations give a label as a reason ({share:.0%})")
