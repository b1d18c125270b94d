"""`python -m engine run`: one experiment (one run per RAG mode), stored as it goes, or with
comma lists a study grid, one experiment per configuration.

Thin: parse the options, build the typed request, call the use case (engine.usecases.run,
engine.usecases.study) with a tqdm bar as its progress, print the outcome.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from engine.bounds import MAX_NAME_CHARS
from engine.commands._options import (
    RunBar,
    add_battery_args,
    add_db_arg,
    add_extra_label_arg,
    battery_fields,
    extra_labels,
    store_path,
)
from engine.commands._served_options import add_server_args, server_options
from engine.errors import UserError

# engine.types, not engine.prompting.prompts: every command builds this parser, and bias should not pay
# for the prompt module (it imports random, hence hashlib).
from engine.types import FEW_SHOT_COUNTS, MODES, ORDERS, QUANTIZATIONS, XAI_VARIANTS
from engine.usecases.run import MAX_RERUNS, MAX_SEED, MAX_TOP_LOGPROBS  # light at import
from engine.usecases.run_values import BATCHINGS, CITATION_SYNTAXES, INVARIANT, SORTED  # light: no torch

MAX_EXPERIMENT_NAME = MAX_NAME_CHARS  # engine.bounds: one bound for every name
# The sampling options' values when not typed; their argparse default is None, so that one typed
# without --sample is seen and refused (sampling_settings).
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "sample_top_k": 0}
HF_TOKEN_WARNING = ("warning: --hf-token is visible to other users in the process list; "
                    "set HF_TOKEN or run `hf auth login` once instead")


def add_common_run_args(p: argparse.ArgumentParser, *, lists: bool = False) -> None:
    """Options shared by `run` and `quickstart`; every help text states its default.

    `lists=True` (run): --metadata, --top-k, --order, --few-shot and --xai take comma lists,
    parsed and checked by engine.prompting.study instead of argparse.
    """
    g = p.add_argument_group("prompt")
    grid = " (a comma list runs each)" if lists else ""
    g.add_argument(
        "--metadata", default="hai", metavar="TYPE[,TYPE...]" if lists else None,
        help="label type on the documents in base and cf: hai, gender, race, publisher (three labels), or a NAME defined "
        f"with --label-a/--label-b/--consideration{grid} (default: %(default)s)",
    )
    g.add_argument("--label-a", help="custom type: label on relevant documents in base mode (default: none)")
    g.add_argument("--label-b", help="custom type: label on the other documents in base mode (default: none)")
    g.add_argument("--consideration", help="custom type: the sentence added as consideration 3 (default: none)")
    if lists:
        add_extra_label_arg(g)
    g.add_argument(
        "--modes", default=",".join(MODES),
        help=f"comma-separated subset of {','.join(MODES)} (default: %(default)s)",
    )
    g.add_argument(
        "--top-k", type=str if lists else int, default=None, metavar="K[,K...]" if lists else None,
        help=f"show only the first K ranked documents{grid}{', all = every document' if lists else ''} (default: all)",
    )
    g.add_argument(
        "--order", default="ranked", choices=None if lists else ORDERS, metavar="ORDER[,ORDER...]" if lists else None,
        help=f"document order after the cut-off: {', '.join(ORDERS)}; random is seeded per item by "
        f"--seed{grid} (default: %(default)s)",
    )
    g.add_argument(
        "--few-shot", type=str if lists else int, default=0, choices=None if lists else FEW_SHOT_COUNTS,
        metavar="N[,N...]" if lists else None,
        help=f"unlabelled demonstrations before the question: {', '.join(map(str, FEW_SHOT_COUNTS))}{grid} "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--xai", default="none", choices=None if lists else XAI_VARIANTS, metavar="XAI[,XAI...]" if lists else None,
        help=f"self-interpretation question added to the prompt: {', '.join(XAI_VARIANTS)}{grid} (default: %(default)s)",
    )
    if lists:  # run only; quickstart keeps the paper's prompt
        add_battery_args(g, lists=lists)
    m = p.add_argument_group("model and generation")
    add_loading_args(m)
    m.add_argument("--batch-size", type=int, default=8, help="prompts generated together (default: %(default)s)")
    m.add_argument(
        "--max-new-tokens", type=int, default=None, metavar="N",
        help="most tokens generated per answer (default: 48 with --model smoke, whose random weights never stop; "
        + ("else 256)" if lists else "else 256 on a GPU, 128 on a CPU)"),
    )
    m.add_argument("--sample", action="store_true",
                   help="sample instead of greedy decoding; --temperature, --top-p and --sample-top-k are "
                   "refused without it (default: greedy)")
    m.add_argument("--temperature", type=float, default=None,
                   help=f"with --sample only (default: {SAMPLING_DEFAULTS['temperature']})")
    m.add_argument("--top-p", type=float, default=None,
                   help=f"with --sample only: nucleus mass in (0, 1] (default: {SAMPLING_DEFAULTS['top_p']})")
    m.add_argument("--sample-top-k", type=int, default=None, help="with --sample only: keep the K most likely "
                   f"tokens, 0 = off (default: {SAMPLING_DEFAULTS['sample_top_k']})")
    m.add_argument(
        "--seed", type=int, default=0,
        help=f"sampling seed and random-order seed, 0 to {MAX_SEED} (default: %(default)s)",
    )
    m.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch CPU threads that generation computes with, here and on every Ray actor; "
        "recorded with the runs. Log-probs on a CPU differ in their last digits between counts "
        "(default: torch's default here, the physical cores or $OMP_NUM_THREADS)",
    )
    m.add_argument(
        "--batching", choices=BATCHINGS, default=SORTED,
        help=f"how prompts are cut into batches: {SORTED} (by length: fastest, but an answer's log-probs, and at a "
        f"near-tie its tokens, may change with its batch) or {INVARIANT} (fixed shapes: an answer's tokens and "
        "log-probs do not depend on the rest of its batch; about 2x the prompt tokens at --batch-size 8 on the "
        "bundled sample, more at larger sizes); recorded with the runs, ignored by a served model (default: %(default)s)",
    )
    m.add_argument(
        "--top-logprobs", type=int, default=0,
        help=f"also record the top N alternatives per token, 0 to {MAX_TOP_LOGPROBS} (default: %(default)s)",
    )
    s = p.add_argument_group("experiment and store")
    add_db_arg(s)
    s.add_argument(
        "--experiment", default=None, metavar="NAME",
        help="create or extend the experiment NAME (or an experiment id); refused when its model, "
        "dataset or settings differ (default: the newest experiment with the same settings)",
    )
    s.add_argument(
        "--limit", type=int, default=None,
        help="only the first N items; a larger N later extends the same runs (default: all)",
    )
    s.add_argument(
        "--skip-invalid", action="store_true",
        help="leave out invalid items and prompts too long for the model's context, and record "
        "them with the run, instead of refusing (default: refuse)",
    )
    s.add_argument(
        "--repeat", action="store_true",
        help="start a new experiment even if an identical one exists (default: resume or reuse it)",
    )
    if lists:  # run only: the quickstart's experiment has no reruns
        s.add_argument(
            "--reruns", type=int, default=0, metavar="K",
            help=f"after the experiment's runs, K more runs of each mode under the same configuration, 0 to "
            f"{MAX_RERUNS}, each cutting its batches another way (and, with --sample, another seed); stored as "
            "reruns of the experiment, never as experiments of their own: `bias` shows each measure beside its "
            "rerun floor (default: %(default)s)",
        )
    s.add_argument(
        "--citation-syntax", choices=CITATION_SYNTAXES, default="ours",
        help="how answers' citations are read: ours ([1], [1,2], [1-3] ...; a number not shown "
        "counts against precision) or paper (the PAttriEval code's [n] only, numbers not shown "
        "ignored), to reproduce the paper's numbers (default: %(default)s)",
    )


def add_loading_args(group) -> None:
    """How the model is loaded (--quantize, --device, --dtype, --hf-token), shared with `selfcheck`
    so that it loads a model exactly as `run` does."""
    group.add_argument(
        "--quantize", default="auto", choices=QUANTIZATIONS,
        help="auto = 4bit on a GPU, none on CPU (default: %(default)s)",
    )
    group.add_argument("--device", default="auto", help="auto | cpu | cuda:N (default: %(default)s)")
    group.add_argument("--dtype", default="auto", help="auto | bfloat16 | float16 | float32 (default: %(default)s)")
    group.add_argument(
        "--hf-token", default=None,
        help="for gated models; visible to other users in `ps`, so prefer $HF_TOKEN or `hf auth "
        "login` (default: $HF_TOKEN, else the Hugging Face login cache); never stored",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="generate cited answers for a dataset, one run per RAG mode",
        description="Generate cited answers for a dataset, one run per RAG mode, stored as they go.",
    )
    p.add_argument(
        "--model", default="auto", metavar="MODEL[,MODEL...]",
        help="Hugging Face id or local folder; 'smoke' = offline tiny model; 'auto' = "
        "Mistral-7B-Instruct-v0.3 on a GPU, Qwen2.5-0.5B-Instruct on CPU, smoke only offline; "
        "with --backend server, the name the server serves the model under; "
        "a comma list runs each (default: %(default)s)",
    )
    p.add_argument("--dataset", required=True, help=".jsonl, .json, .parquet or a datasets.save_to_disk folder; 'sample' = the bundled sample (required)")
    add_common_run_args(p, lists=True)
    p.add_argument(
        "--study", default=None, metavar="NAME",
        help="run the cross product of the comma lists as the study NAME, one experiment per "
        "configuration; running it again completes what is missing (default: a name made from "
        "the grid, when a list has more than one value)",
    )
    r = p.add_argument_group("scaling out (optional: pip install -r requirements-ray.txt)")
    r.add_argument(
        "--backend", default="local", choices=("local", "ray", "server"),
        help="local = generate in this process; ray = on a pool of Ray actors; server = on an "
        "OpenAI-compatible server (--base-url); this process always writes the store (default: %(default)s)",
    )
    r.add_argument(
        "--ray-address", default=None, metavar="ADDR",
        help="with --backend ray: HOST:PORT of a running cluster (`ray start --head` prints it), or "
        "auto (default: a Ray instance started on this machine)",
    )
    r.add_argument("--actors", type=int, default=None, metavar="N", help="with --backend ray: model replicas (default: 1)")
    r.add_argument(
        "--gpus-per-actor", type=float, default=None, metavar="G",
        help="with --backend ray: GPUs each replica takes (default: 1 when the cluster has GPUs, else 0)",
    )
    add_server_args(p)
    p.set_defaults(main=main)


def check_backend_args(args: argparse.Namespace) -> None:
    """Refuse Ray options without --backend ray (the use case checks the rest: engine.usecases.run.check_ray)."""
    if getattr(args, "backend", "local") != "ray":
        given = [f"--{n.replace('_', '-')}" for n in ("ray_address", "actors", "gpus_per_actor")
                 if getattr(args, n, None) is not None]
        if given:
            raise UserError(f"{given[0]} needs --backend ray")


def ray_options(args: argparse.Namespace):
    """The RayOptions of --backend ray, or None for a local run."""
    if getattr(args, "backend", "local") != "ray":
        return None
    from engine.usecases.run import RayOptions

    return RayOptions(args.ray_address, 1 if args.actors is None else args.actors, args.gpus_per_actor)


def max_new_tokens(args: argparse.Namespace) -> int:
    """--max-new-tokens, or run's default: short for the smoke model (every model of a grid
    smoke), the real models' 256 otherwise. The quickstart sets its own before this is asked."""
    from engine.usecases.run import default_max_new_tokens

    if args.max_new_tokens is not None:
        return args.max_new_tokens
    return default_max_new_tokens({m.strip() for m in str(args.model).split(",") if m.strip()})


def sampling_settings(args: argparse.Namespace) -> dict[str, float]:
    """--temperature, --top-p and --sample-top-k, defaults filled in. One typed without --sample is
    refused: greedy decoding would ignore it, and sampling for the user would make the stored
    configuration something not asked for."""
    typed = {name: getattr(args, name, None) for name in SAMPLING_DEFAULTS}
    given = [name for name, value in typed.items() if value is not None]
    if given and not getattr(args, "sample", False):
        option = "--" + given[0].replace("_", "-")
        raise UserError(f"{option} {typed[given[0]]:g} needs --sample: decoding is greedy without it and would "
                        f"ignore {option}")
    return {name: SAMPLING_DEFAULTS[name] if value is None else value for name, value in typed.items()}


def run_values(args: argparse.Namespace, model: str, label: str | None):
    """The RunValues of parsed arguments: run's defaults filled in (max_new_tokens, sampling,
    $HF_TOKEN), the rest as typed. `label` None: the use case resolves `model` and names it."""
    from engine.usecases.run_values import RunValues

    sampling = sampling_settings(args)
    return RunValues(
        model=model, model_label=label, modes=tuple(args.modes.split(",")), metadata=args.metadata,
        label_a=args.label_a, label_b=args.label_b, consideration=args.consideration, extra_label=extra_labels(args),
        top_k=args.top_k, order=args.order, few_shot=args.few_shot, xai=args.xai, **battery_fields(args),
        quantize=args.quantize, device=args.device, dtype=args.dtype, max_new_tokens=max_new_tokens(args),
        sample=args.sample, temperature=sampling["temperature"], top_p=sampling["top_p"],
        sample_top_k=int(sampling["sample_top_k"]), seed=args.seed, batch_size=args.batch_size,
        top_logprobs=args.top_logprobs, threads=getattr(args, "threads", None), repeat=args.repeat,
        batching=getattr(args, "batching", SORTED), reruns=getattr(args, "reruns", 0),
        experiment=args.experiment, limit=args.limit, skip_invalid=args.skip_invalid,
        citation_syntax=getattr(args, "citation_syntax", "ours"),
        # None lets from_pretrained read $HF_TOKEN or the login cache itself.
        hf_token=args.hf_token or os.environ.get("HF_TOKEN") or None,
    )


def build_request(args: argparse.Namespace, model: str, label: str | None):
    """A RunRequest from parsed arguments, built and checked by the use case's one builder
    (engine.usecases.run_values; FieldError, worded as options by engine.commands._field_words)."""
    from engine.usecases.run_values import build_run_request

    return build_run_request(run_values(args, model, label))


def execute(args: argparse.Namespace, dataset_path: str, model_arg: str, *, hint: bool = True):
    """Check everything, run with a progress bar, print the outcome; returns the ExperimentOutcome.

    `hint=False` leaves out the closing "see the bias with" line, for callers that print their
    own next steps (the quickstart).
    """
    from engine.usecases.run import ExperimentRequest, run_experiment

    request = build_request(args, model_arg, None)
    check_backend_args(args)
    server = server_options(args, model_arg)
    if args.hf_token:
        print(HF_TOKEN_WARNING, file=sys.stderr)
    db_path = store_path(args)
    bar = RunBar(f"x {len(request.modes)} mode(s)")
    try:
        outcome = run_experiment(ExperimentRequest(request, dataset_path, db_path, ray=ray_options(args),
                                                   server=server), progress=bar)
    finally:
        bar.close()
    if all(r.status == "already complete" for r in outcome.runs):
        print("already complete, nothing to do (use --repeat for a new run)")
    _report(outcome, outcome.model, db_path, args, hint=hint)
    return outcome


def _report(outcome, label: str, db_path, args: argparse.Namespace, *, hint: bool = True) -> None:
    """The experiment, its runs, what was skipped, the metrics and the next command."""
    from engine.usecases.run import run_metrics

    name = f" '{outcome.experiment_name}'" if outcome.experiment_name else ""
    n = outcome.n_dataset_items
    items = f"first {args.limit} of {n} items" if args.limit and args.limit < n else f"{n} items"
    print(f"experiment {outcome.experiment_id}{name}  model {label}  dataset {outcome.dataset} ({items})  db {db_path}")
    for run in outcome.runs:
        print(
            f"  run {run.run_id}  {run.mode:<7}  {run.status:<16}  "
            f"generated {run.n_generated} of {run.n_items}, {run.n_with_citation} of them cite a document"
        )
    _print_skipped(outcome.skipped)
    for rerun in outcome.reruns:
        print(f"  rerun experiment {rerun.experiment_id}: "
              + ", ".join(f"{r.mode} run {r.run_id} ({r.status}, generated {r.n_generated} of {r.n_items})"
                          for r in rerun.runs))
    table = run_metrics(db_path, [r.run_id for r in outcome.runs])
    if len(table):
        print(table.to_string(index=False))
    counts = {m: n for m, n in outcome.mode_items.items() if n is not None}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{m} {counts[m]}" for m in MODES if m in counts)
        print(
            f"note: the runs of this experiment cover different numbers of items ({listed}); "
            "bias pairs items by id: give every mode the same --limit"
        )
    if hint:
        # The name the user gave with --experiment, when there is one: it is what they remember,
        # and bias finds an experiment by it as by its id.
        reference = getattr(args, "experiment", None) or outcome.experiment_id
        print(bias_hint(outcome.modes, reference, args.db, repeat=args.repeat))


def bias_hint(modes: tuple[str, ...], experiment: str, db: str | None, *, repeat: bool = False) -> str:
    """The next command: `bias` when the experiment (an id or a name) has a pair to compare, else
    the modes to add."""
    present = set(modes)
    if {"vanilla", "base"} <= present or {"base", "cf"} <= present:
        db_part = f" --db {shlex.quote(db)}" if db else ""
        return f"see the bias with: python -m engine bias --experiment {shlex.quote(experiment)}{db_part}"
    missing = [m for m in MODES if m not in present]
    again = "this command again without --repeat" if repeat else "this command again"
    return (
        f"to see the bias, add {' and '.join(missing)}: run {again} with --modes {','.join(missing)} "
        "(CAS compares vanilla with base, CAB base with cf)"
    )


def _print_skipped(skipped) -> None:
    if not skipped:
        return
    print(f"skipped {len(skipped)} item{'s' if len(skipped) != 1 else ''} (stored with the runs in config_json):")
    for s in skipped[:5]:
        print(f"  {s.where}: item '{s.item_id}': {s.reason}" if s.item_id else f"  {s.where}: {s.reason}")
    if len(skipped) > 5:
        print(f"  ... and {len(skipped) - 5} more")


def main(args: argparse.Namespace) -> int:
    from engine.usecases.study import configuration_args, parse_grid

    grid = parse_grid(args)  # before anything is read: a bad list is one line
    sampling_settings(args)  # a sampling option without --sample: one line, before anything loads
    # Settled once from the whole --model list, before a grid splits it into configurations.
    args.max_new_tokens = max_new_tokens(args)
    if grid.is_single and args.study is None:
        # One configuration: exactly the single-experiment command it always was.
        single = configuration_args(args, grid.configurations()[0], grid)
        execute(single, single.dataset, single.model)
        return 0
    run_study(args, grid)
    return 0


def run_study(args: argparse.Namespace, grid):
    """`run` with comma lists: the StudyRequest of the grid, run and reported by engine.commands._study."""
    from dataclasses import replace

    from engine.commands._study import run_study as run_grid
    from engine.usecases.study import StudyRequest, configuration_args

    check_backend_args(args)
    first = grid.configurations()[0]
    # The options every configuration shares; --experiment and --repeat are the use case's to refuse.
    single = argparse.Namespace(**{**vars(configuration_args(args, first, grid)), "experiment": None, "repeat": False})
    base = replace(build_request(single, first["model"], None), experiment=args.experiment, repeat=args.repeat)
    study = StudyRequest(
        grid=grid, run=base, dataset=args.dataset, db=store_path(args), name=args.study,
        label_a=args.label_a, label_b=args.label_b, consideration=args.consideration, ray=ray_options(args),
        extra_labels=tuple(args.extra_label or ()),
        server=server_options(args, first["model"]),
    )
    if args.hf_token:
        print(HF_TOKEN_WARNING, file=sys.stderr)
    return run_grid(study, args)
