"""`python -m engine verify --experiment ID|--run ID`: AttrScore attribution verification.

Every (answer sentence, cited document) pair of the stored answers is judged attributable,
extrapolatory or contradictory (engine.verify). As in `explain`, everything that can fail is
checked before the first write (options, store, runs, model, every prompt's length); each finished
batch is then committed on its own, and the same command again judges only the pairs the same
judge model has not judged.
"""

from __future__ import annotations

import argparse
import sys

from engine.commands.explain import chosen_runs
from engine.judging import add_model_options, add_target_options, check_lengths, load

# Top alternatives recorded per step: enough that every tokenization of the three class words
# the judge ranks plausibly ("Att", " Att", "**Att", "attrib", ...) is among them.
TOP_N = 20


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="judge whether each cited document supports its sentence (AttrScore)",
        description="Ask a judge model (AttrScore's validator instruction) whether each document an "
        "answer sentence cites supports the claim (question + sentence): attributable, extrapolatory "
        "(the document lacks the information) or contradictory. Stores each verdict, the raw output "
        "and each class's probability, and prints per run the share of each class.",
    )
    add_target_options(p)
    add_model_options(p, role="judge", max_new_tokens=16)
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.verify import sources_to_verify
    from store.queries import answers_to_verify

    path, answered, model, label = chosen_runs(args, "verify")

    todo = [(run, sources_to_verify(answers_to_verify(path, run, label, args.limit))) for run in answered]
    n_todo = sum(len(s.claims) for _, sources in todo for s in sources)
    if n_todo == 0:
        for run in answered:
            print(f"  run {run.run_id}  {run.rag_mode:<7}  no citations left to verify by {label}")
        _print_shares(path, [r.run_id for r in answered])
        return 0

    from engine.generate import GenerationConfig
    from engine.verify import source_prompts

    loaded = load(model, args)
    check_lengths(loaded, ((f"run {run.run_id}, item '{s.item.id}'", p)
                           for run, sources in todo for s in sources for p in source_prompts(s)),
                  args.max_new_tokens, "verification")

    from tqdm import tqdm

    from engine.verify import verify_batches
    from store.verification_store import VerificationStore

    store = VerificationStore(path)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, top_n_logprobs=TOP_N)
    bar = tqdm(total=n_todo, unit="citation", desc=f"verify with {label}", file=sys.stderr, dynamic_ncols=True)
    try:
        for run, sources in todo:
            done = 0
            if sources:
                for n in verify_batches(loaded, sources, label, config, store.write_batch):
                    done += n
                    bar.update(n)
            print(f"  run {run.run_id}  {run.rag_mode:<7}  verified {done} citation{'s' if done != 1 else ''} with {label}")
    finally:
        bar.close()
    _print_shares(path, [r.run_id for r in answered])
    return 0


def _print_shares(path, run_ids: list[str]) -> None:
    from store.queries import verification_shares

    for run_id, model, mode, n, att, ext, con, unp in verification_shares(path, run_ids):
        print(f"  {mode:<7} run {run_id}  {model}: {n} citations, attributable {att:.0%}, extrapolatory {ext:.0%}, "
              f"contradictory {con:.0%}, unparsed {unp:.0%}")
