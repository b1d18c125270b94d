"""`python -m engine run`: one experiment (one run per RAG mode), stored as it goes.

Everything that can fail is checked before the first write: options, the dataset, the plan
(read from the store without creating it), the model, and every prompt's length. Only then
are the experiment, its runs and the items created, in one transaction.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from dataclasses import dataclass

from engine.bounds import MAX_NAME_CHARS
from engine.errors import UserError
from engine.threads import MAX_THREADS  # torch-free at import
# engine.types, not engine.prompts: every command builds this parser, and bias should not pay
# for the prompt module (it imports random, hence hashlib).
from engine.types import FEW_SHOT_COUNTS, MODES, ORDERS, QUANTIZATIONS, XAI_VARIANTS

MAX_SEED = 2**31 - 1  # runs.seed is a 32-bit INTEGER column
MAX_TOP_LOGPROBS = 20  # as hosted APIs allow; each step keeps batch x N values per token
MAX_EXPERIMENT_NAME = MAX_NAME_CHARS  # engine.bounds: one bound for every name
HF_TOKEN_WARNING = ("warning: --hf-token is visible to other users in the process list; "
                    "set HF_TOKEN or run `hf auth login` once instead")


def add_common_run_args(p: argparse.ArgumentParser, *, lists: bool = False) -> None:
    """Options shared by `run` and `quickstart`; every help text states its default.

    `lists=True` (run): --metadata, --top-k, --order, --few-shot and --xai take comma lists,
    parsed and checked by engine.study instead of argparse.
    """
    g = p.add_argument_group("prompt")
    grid = " (a comma list runs each)" if lists else ""
    g.add_argument(
        "--metadata", default="hai", metavar="TYPE[,TYPE...]" if lists else None,
        help="label type on the documents in base and cf: hai, gender, race, or a NAME defined "
        f"with --label-a/--label-b/--consideration{grid} (default: %(default)s)",
    )
    g.add_argument("--label-a", help="custom type: label on relevant documents in base mode (default: none)")
    g.add_argument("--label-b", help="custom type: label on the other documents in base mode (default: none)")
    g.add_argument("--consideration", help="custom type: the sentence added as consideration 3 (default: none)")
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
    m = p.add_argument_group("model and generation")
    add_loading_args(m)
    m.add_argument("--batch-size", type=int, default=8, help="prompts generated together (default: %(default)s)")
    m.add_argument(
        "--max-new-tokens", type=int, default=256,
        help="most tokens generated per answer (default: %(default)s)",
    )
    m.add_argument("--sample", action="store_true", help="sample instead of greedy decoding (default: greedy)")
    m.add_argument("--temperature", type=float, default=1.0, help="with --sample (default: %(default)s)")
    m.add_argument("--top-p", type=float, default=1.0, help="with --sample: nucleus mass in (0, 1] (default: %(default)s)")
    m.add_argument(
        "--sample-top-k", type=int, default=0,
        help="with --sample: keep the K most likely tokens, 0 = off (default: %(default)s)",
    )
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
        "--top-logprobs", type=int, default=0,
        help=f"also record the top N alternatives per token, 0 to {MAX_TOP_LOGPROBS} (default: %(default)s)",
    )
    s = p.add_argument_group("experiment and store")
    s.add_argument(
        "--db", default=None,
        help="DuckDB file (default: $PATTRIEVAL_DB, /data/pattrieval.duckdb or results/pattrieval.duckdb)",
    )
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
        "a comma list runs each (default: %(default)s)",
    )
    p.add_argument("--dataset", required=True, help=".jsonl, .json, .parquet or a datasets.save_to_disk folder (required)")
    add_common_run_args(p, lists=True)
    p.add_argument(
        "--study", default=None, metavar="NAME",
        help="run the cross product of the comma lists as the study NAME, one experiment per "
        "configuration; running it again completes what is missing (default: a name made from "
        "the grid, when a list has more than one value)",
    )
    r = p.add_argument_group("scaling out (optional: pip install -r requirements-ray.txt)")
    r.add_argument(
        "--backend", default="local", choices=("local", "ray"),
        help="local = generate in this process; ray = on a pool of Ray actors, this process still "
        "writing the store (default: %(default)s)",
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
    p.set_defaults(main=main)


def check_backend_args(args: argparse.Namespace) -> None:
    """Refuse Ray options without --backend ray, and Ray settings that cannot work, in one line."""
    if getattr(args, "backend", "local") != "ray":
        given = [f"--{n.replace('_', '-')}" for n in ("ray_address", "actors", "gpus_per_actor")
                 if getattr(args, n, None) is not None]
        if given:
            raise UserError(f"{given[0]} needs --backend ray")
        return
    if args.actors is not None and args.actors < 1:
        raise UserError("--actors must be at least 1")
    if args.gpus_per_actor is not None and not (math.isfinite(args.gpus_per_actor) and args.gpus_per_actor >= 0):
        raise UserError(f"--gpus-per-actor must be 0 or more, not {args.gpus_per_actor}")
    from engine.backend_ray import check_address, check_ray_device, import_ray

    check_ray_device(args.device)
    import_ray()  # the install hint, before anything is read
    check_address(args.ray_address)  # seconds, not the minutes ray.init hangs on a dead address


def ray_backend(args: argparse.Namespace, request):
    """A started RayBackend for `request` (tokenizer loaded here, model on the workers), and the
    tokenizer stand-in that measures prompts."""
    from engine.backend_ray import RayBackend, load_driver_tokenizer

    driver = load_driver_tokenizer(request)
    backend = RayBackend(request, driver.tokenizer, address=args.ray_address, actors=args.actors or 1,
                         gpus_per_actor=args.gpus_per_actor)
    return backend, driver


def check_run_args(args: argparse.Namespace) -> None:
    """Refuse out-of-range options in one line, before anything is read or loaded."""
    for name in ("batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be at least 1")
    if not math.isfinite(args.temperature) or (args.sample and args.temperature <= 0):
        raise UserError(f"--temperature must be a finite number above 0, not {args.temperature}")
    if not 0 < args.top_p <= 1:  # also false for nan
        raise UserError(f"--top-p must be in (0, 1], not {args.top_p}")
    if args.sample_top_k < 0:
        raise UserError("--sample-top-k must be 0 or more")
    if not 0 <= args.top_logprobs <= MAX_TOP_LOGPROBS:
        raise UserError(f"--top-logprobs must be between 0 and {MAX_TOP_LOGPROBS}, not {args.top_logprobs}")
    threads = getattr(args, "threads", None)
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise UserError(f"--threads must be between 1 and {MAX_THREADS}, not {threads}")
    if not 0 <= args.seed <= MAX_SEED:
        raise UserError(f"--seed must be between 0 and {MAX_SEED}, not {args.seed}")
    if args.experiment is not None:
        name = args.experiment
        if not name.strip() or name != name.strip() or not name.isprintable() or len(name) > MAX_EXPERIMENT_NAME:
            raise UserError(
                f"--experiment must be 1 to {MAX_EXPERIMENT_NAME} printable characters without "
                "leading or trailing spaces"
            )


def build_request(args: argparse.Namespace, model: str, label: str):
    """A RunRequest from parsed arguments (validation raises UserError)."""
    from engine.prompts import PromptConfig, metadata_type
    from engine.runner import RunRequest

    check_run_args(args)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise UserError(
            f"--modes: unknown mode(s) {', '.join(unknown) or '(none given)'}; choose from {','.join(MODES)}"
        )
    if len(set(modes)) != len(modes):
        raise UserError("--modes lists a mode twice")
    meta = metadata_type(args.metadata, args.label_a, args.label_b, args.consideration)
    prompt = PromptConfig(
        mode="vanilla", metadata=meta, top_k=args.top_k, order=args.order, seed=args.seed, few_shot=args.few_shot, xai=args.xai
    )
    return RunRequest(
        model=model,
        model_label=label,
        modes=tuple(m for m in MODES if m in modes),  # display order, whatever order was typed
        prompt=prompt,
        quantize=args.quantize,
        device=args.device,
        dtype=args.dtype,
        max_new_tokens=args.max_new_tokens,
        do_sample=args.sample,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k_sampling=args.sample_top_k,
        seed=args.seed,
        batch_size=args.batch_size,
        top_n_logprobs=args.top_logprobs,
        repeat=args.repeat,
        experiment=args.experiment,
        limit=args.limit,
        skip_invalid=args.skip_invalid,
        threads=getattr(args, "threads", None),  # the app's form leaves it to the default
        # None lets from_pretrained read $HF_TOKEN or the login cache itself.
        hf_token=args.hf_token or os.environ.get("HF_TOKEN") or None,
    )


def execute(args: argparse.Namespace, dataset_path: str, model_arg: str, *, hint: bool = True):
    """Check everything, run with a progress bar, print the outcome; returns the ExperimentOutcome.

    `hint=False` leaves out the closing "see the bias with" line, for callers that print their
    own next steps (the quickstart).
    """
    from dataclasses import replace
    from pathlib import Path

    from engine.data import load_dataset
    from engine.model_check import check_model_name
    from engine.model_choice import resolve_model
    from engine.paths import default_db_path
    from engine.runner import check_prompt_lengths, execute_plan, load_model_for, plan_experiment

    # Nothing is written before the model is loaded and every prompt measured: a run that
    # cannot start leaves the database as it was (or absent).
    request = build_request(args, model_arg, model_arg)
    check_backend_args(args)
    on_ray = getattr(args, "backend", "local") == "ray"
    if args.hf_token:
        print(HF_TOKEN_WARNING, file=sys.stderr)
    # The dataset is identified by all its valid items; --limit picks the runs' prefix of them.
    # top_k: an item must have a relevant document among those the model will be shown.
    dataset = load_dataset(dataset_path, skip_invalid=args.skip_invalid, top_k=args.top_k)
    model, label = resolve_model(model_arg)
    request = replace(request, model=model, model_label=label)
    db_path = Path(args.db) if args.db else default_db_path()

    from store.run_store import RunStore

    sink = RunStore(db_path)
    plan = plan_experiment(dataset, request, sink)
    if plan.nothing_to_do:
        print("already complete, nothing to do (use --repeat for a new run)")
        outcome = execute_plan(plan, None, sink)
        _report(outcome, dataset, label, db_path, args, hint=hint)
        return outcome

    loaded = backend = None
    try:
        if plan.n_todo:
            # Before transformers and torch are imported: a typo fails in a second, not after
            # a minute of Hub retries (load_model checks too, for every other caller).
            check_model_name(model)
            # Our own bar is the one that matters; transformers' per-shard bars only add noise.
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            if on_ray:
                # The driver plans and measures with the tokenizer; the model loads on the workers.
                backend, driver = ray_backend(args, request)
                plan = check_prompt_lengths(plan, driver)
                backend.start()
            else:
                loaded = load_model_for(request)
                plan = check_prompt_lengths(plan, loaded)

        from tqdm import tqdm

        bar = tqdm(
            total=plan.n_todo, unit="item", desc=f"{label} x {len(request.modes)} mode(s)",
            file=sys.stderr, dynamic_ncols=True,
        )
        try:
            outcome = execute_plan(plan, loaded, sink, on_progress=bar.update, backend=backend)
        finally:
            bar.close()
    finally:
        if backend is not None:
            backend.close()
    _report(outcome, dataset, label, db_path, args, hint=hint)
    return outcome


def _report(outcome, dataset, label: str, db_path, args: argparse.Namespace, *, hint: bool = True) -> None:
    """The experiment, its runs, what was skipped, the metrics and the next command."""
    name = f" '{outcome.experiment_name}'" if outcome.experiment_name else ""
    n = len(dataset.items)
    items = f"first {args.limit} of {n} items" if args.limit and args.limit < n else f"{n} items"
    print(f"experiment {outcome.experiment_id}{name}  model {label}  dataset {dataset.source} ({items})  db {db_path}")
    for run in outcome.runs:
        print(
            f"  run {run.run_id}  {run.mode:<7}  {run.status:<16}  "
            f"generated {run.n_generated} of {run.n_items}, {run.n_with_citation} of them cite a document"
        )
    _print_skipped(outcome.skipped)
    _print_metrics(db_path, [r.run_id for r in outcome.runs])
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


def _print_metrics(db_path, run_ids: list[str]) -> None:
    """Citation precision/recall/F1 (x100) and exact match per run, from the run_metrics view."""
    from store.queries import run_summaries

    table = run_summaries(db_path, run_ids)
    if len(table):
        print(table.to_string(index=False))


def main(args: argparse.Namespace) -> int:
    from engine.study import configuration_args, parse_grid

    grid = parse_grid(args)  # before anything is read: a bad list is one line
    if grid.is_single and args.study is None:
        # One configuration: exactly the single-experiment command it always was.
        single = configuration_args(args, grid.configurations()[0], grid)
        execute(single, single.dataset, single.model)
        return 0
    run_study(args, grid)
    return 0


# ---------------------------------------------------------------- study grids (comma lists)
# `run` with comma lists: a study grid (engine/study.py), one experiment per configuration,
# planned in full before the first model loads. Then model by model: load it (only when it has
# work), measure its prompts, run its experiments in grid order, recording each in the study.
# The vanilla run of a model and configuration is generated by its first metadata type's
# experiment and copied into the others'.


@dataclass(frozen=True)
class _Planned:
    position: int
    configuration: dict
    label: str  # the model as stored
    plan: object  # engine.runner.ExperimentPlan


def _group_key(configuration: dict) -> tuple:
    """What a vanilla run depends on: everything but the metadata type."""
    return tuple((k, v) for k, v in configuration.items() if k != "metadata")


def run_study(args: argparse.Namespace, grid) -> list:
    from pathlib import Path

    from engine.data import load_dataset
    from engine.model_check import check_model_name
    from engine.model_choice import resolve_model
    from engine.paths import default_db_path
    from engine.runner import plan_experiment
    from engine.study import check_metadata_list, check_study_name, configuration_args, generated_study_name, plan_line

    if args.experiment is not None:
        raise UserError(
            f"--experiment names one experiment; this grid has {grid.size} configurations: name it with --study"
        )
    if args.repeat:
        raise UserError("--repeat starts one new experiment; a grid resumes its experiments (give a new --study "
                        "only to group them anew)")
    if args.study is not None:
        check_study_name(args.study)
    check_metadata_list(grid, args)
    check_run_args(args)
    check_backend_args(args)

    configurations = grid.configurations()
    # Every configuration's options are checked before the dataset or any model is touched.
    requests = [build_request(configuration_args(args, c, grid), c["model"], c["model"]) for c in configurations]
    if args.hf_token:
        print(HF_TOKEN_WARNING, file=sys.stderr)
    datasets = {}
    for c in configurations:
        if c["top_k"] not in datasets:
            # Items must have a relevant document among the first k, so validity depends on k.
            datasets[c["top_k"]] = load_dataset(args.dataset, skip_invalid=args.skip_invalid, top_k=c["top_k"])
    resolved = {m: resolve_model(m) for m in grid.model}
    seen: dict[str, str] = {}
    for typed, (_, label) in resolved.items():
        if label in seen:
            # Two names for one model would plan one experiment twice.
            raise UserError(f"--model: '{seen[label]}' and '{typed}' are the same model ({label}); list it once")
        seen[label] = typed
    db_path = Path(args.db) if args.db else default_db_path()

    from dataclasses import replace

    from store.run_store import RunStore

    sink = RunStore(db_path)
    planned: list[_Planned] = []
    for position, (c, request) in enumerate(zip(configurations, requests)):
        model, label = resolved[c["model"]]
        request = replace(request, model=model, model_label=label)
        planned.append(_Planned(position, c, label, plan_experiment(datasets[c["top_k"]], request, sink)))
    name = args.study or generated_study_name([p.plan.spec.key for p in planned])
    for model in grid.model:  # every model with work, before the first one loads
        if any(p.plan.n_todo for p in planned if p.configuration["model"] == model):
            check_model_name(resolved[model][0])

    copy_from = _shared_vanilla(planned)
    runs = [r for p in planned for r in p.plan.runs]
    n_copied = sum(len(r.todo) for p in planned for r in p.plan.runs if r.mode in copy_from.get(p.position, {}))
    n_todo = sum(len(r.todo) for r in runs) - n_copied
    n_items = max(len(r.items) for r in runs)
    varied = [a for a in _AXES_SHOWN if len(getattr(grid, a)) > 1] or ["model"]
    print(f"study {name}: {len(planned)} experiment(s) ({' x '.join(f'{len(getattr(grid, a))} {a}' for a in varied)}), "
          f"{len(copy_from)} vanilla run(s) to share")
    print(plan_line(len(runs), n_items, sum(len(r.items) for r in runs), n_todo, n_copied))
    if n_todo == 0 and n_copied == 0:
        print("already complete, nothing to do")

    outcomes = _execute_study(planned, copy_from, sink, name, grid, n_todo + n_copied, args)
    _study_report(outcomes, planned, copy_from, name, args)
    return outcomes


_AXES_SHOWN = ("model", "metadata", "top_k", "order", "few_shot", "xai")


def _shared_vanilla(planned: list[_Planned]) -> dict[int, dict[str, str]]:
    """Per grid position, {'vanilla': source run id} for the vanilla runs to copy, not generate.

    Within a model and configuration, the source is the first experiment whose vanilla run is
    already complete, else the first one; every other one with vanilla work copies from it.
    """
    groups: dict[tuple, list[_Planned]] = {}
    for p in planned:
        groups.setdefault(_group_key(p.configuration), []).append(p)
    out: dict[int, dict[str, str]] = {}
    for members in groups.values():
        vanillas = [(p, next((r for r in p.plan.runs if r.mode == "vanilla"), None)) for p in members]
        vanillas = [(p, r) for p, r in vanillas if r is not None]
        if len(vanillas) < 2:
            continue
        complete = [(p, r) for p, r in vanillas if not r.todo and r.resumes is not None]
        source_p, source = (complete or vanillas)[0]
        for p, r in vanillas:
            if p is not source_p and r.todo:
                out[p.position] = {"vanilla": source.run_id}
    return out


def _execute_study(planned, copy_from, sink, name: str, grid, total: int, args=None) -> list:
    import gc

    from tqdm import tqdm

    from engine.runner import check_prompt_lengths, execute_plan, load_model_for

    on_ray = getattr(args, "backend", "local") == "ray"
    outcomes = []
    bar = tqdm(total=total, unit="item", desc=f"study {name}", file=sys.stderr, dynamic_ncols=True, disable=total == 0)
    try:
        for model in grid.model:
            mine = [p for p in planned if p.configuration["model"] == model]
            loaded = None
            if any(p.plan.n_todo for p in mine):
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                if on_ray:
                    outcomes += _execute_on_ray(mine, copy_from, sink, name, grid, args, bar)
                    continue
                loaded = load_model_for(mine[0].plan.request)
            for p in mine:
                plan = check_prompt_lengths(p.plan, loaded) if loaded is not None and p.plan.n_todo else p.plan
                outcome = execute_plan(plan, loaded, sink, on_progress=bar.update,
                                       copy_from=copy_from.get(p.position))
                sink.record_study(name, grid.axes(), outcome.experiment_id, p.position)
                outcomes.append(outcome)
            del loaded
            gc.collect()
    finally:
        bar.close()
    return outcomes


def _execute_on_ray(mine, copy_from, sink, name: str, grid, args, bar) -> list:
    """One model's configurations on Ray: one probe and ONE pipeline for all of them, so each
    actor loads the model once for the whole grid (engine.runner.execute_plans)."""
    from engine.runner import check_prompt_lengths, execute_plans

    backend, driver = ray_backend(args, mine[0].plan.request)
    try:
        plans = [check_prompt_lengths(p.plan, driver) if p.plan.n_todo else p.plan for p in mine]
        backend.start()
        return execute_plans(
            plans, sink, backend,
            copy_from=[copy_from.get(p.position) for p in mine],
            # Recorded as soon as claimed: an interrupted grid keeps its study, and resumes.
            on_claimed=lambda i, plan: sink.record_study(name, grid.axes(), plan.experiment_id, mine[i].position),
            on_progress=bar.update,
        )
    finally:
        backend.close()


def _shown_configuration(configuration: dict) -> str:
    k = "all" if configuration["top_k"] is None else configuration["top_k"]
    return (f"{configuration['metadata']:<8} k={k:<4} {configuration['order']:<8} "
            f"few-shot {configuration['few_shot']}  xai {configuration['xai']}")


def _study_report(outcomes, planned, copy_from, name: str, args: argparse.Namespace) -> None:
    """One line per experiment, then the command that shows the study."""
    for p, outcome in zip(planned, outcomes):
        shared = copy_from.get(p.position, {})
        runs = ", ".join(
            f"{r.mode} {r.run_id} {r.status}" + (f" (copied from {shared[r.mode]})" if r.mode in shared else
                                                 f" ({r.n_generated} new)")
            for r in outcome.runs
        )
        print(f"  experiment {outcome.experiment_id}  {p.label}  {_shown_configuration(p.configuration)}  {runs}")
    db_part = f" --db {shlex.quote(args.db)}" if args.db else ""
    print(f"see the study with: python -m engine report --study {shlex.quote(name)}{db_part} "
          "(--layout xai: the cut-off x order tables)")
