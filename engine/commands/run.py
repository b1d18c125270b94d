"""`python -m engine run`: one experiment (one run per RAG mode), stored as it goes, or with
comma lists a study grid, one experiment per configuration.

Thin: parse the options, build the typed request, call the use case (engine.usecases.runs.run,
engine.usecases.study.study) with a tqdm bar as its progress, print the outcome.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import replace
from typing import Any

from engine.bounds import MAX_NAME_CHARS
from engine.commands._options import RunBar, add_db_arg, store_path
from engine.commands._served_options import add_server_args, server_options
from engine.errors import UserError
from engine.types import MODES
from engine.usecases.runs.run import ExperimentRequest, RayOptions, default_max_new_tokens, run_experiment, run_metrics
from engine.usecases.runs.run_options import (
    GENERATION,
    OPTIONS,
    PROMPT,
    RAY,
    RUN_OPTIONS,
    SAME,
    STORE,
    RunOption,
    build_run_request,
)
from engine.usecases.study.study import StudyRequest, configuration_values, grid_of

MAX_EXPERIMENT_NAME = MAX_NAME_CHARS  # engine.bounds: one bound for every name
HF_TOKEN_WARNING = ("warning: --hf-token is visible to other users in the process list; "
                    "set HF_TOKEN or run `hf auth login` once instead")
# How the quickstart's help states a default of its own (its answers are concise on a CPU).
QUICKSTART_DEFAULTS = {"max_new_tokens": "48 with --model smoke, whose random weights never stop; else 256 on a GPU, "
                       "128 on a CPU"}


def add_option(group, option: RunOption, *, lists: bool = False, shown: str | None = None) -> None:
    """One run option as argparse declares it, from its row of the table (engine.usecases.runs.run_options).

    `lists`: a grid option takes a comma list, parsed and checked by engine.prompting.study instead
    of argparse. A sampling setting's parsed default is None, so that one typed without --sample is
    seen and refused (sampling_settings); the help states the value it then takes."""
    listed = lists and option.grid
    text = option.help.format(grid=" (a comma list runs each)" if listed else "") + (option.list_note if listed else "")
    parsed = None if option.needs else option.default if option.cli_default is SAME else option.cli_default
    shown = shown or option.shown_default or ("%(default)s" if parsed is not None else str(option.default))
    kwargs: dict = {"help": f"{text} (required)" if option.required else f"{text} (default: {shown})"}
    if option.type is bool:
        kwargs["action"] = "store_true"
    elif option.repeatable:
        kwargs.update(action="append", default=None, metavar=option.metavar)
    elif option.required:
        kwargs["required"] = True
    else:
        kwargs["default"] = parsed
        if option.type is not str and not listed:
            kwargs["type"] = option.type
        if option.choices and not listed:
            kwargs["choices"] = option.choices
        if option.metavar and (listed or not option.grid):
            kwargs["metavar"] = f"{option.metavar}[,{option.metavar}...]" if listed else option.metavar
    group.add_argument(option.option, **kwargs)


def add_common_run_args(p: argparse.ArgumentParser, *, lists: bool = False) -> None:
    """Options shared by `run` and `quickstart`, in the table's order; every help text states its
    default. `lists=True` (run): the grid options take comma lists, and the options the quickstart
    leaves out (the battery, the reruns) are there."""
    groups = {name: p.add_argument_group(name) for name in (PROMPT, GENERATION, STORE)}
    store_named = False
    for option in RUN_OPTIONS:
        if option.group in groups and (lists or option.quickstart):
            if option.group == STORE and not store_named:  # the store first, then what the run is in it
                add_db_arg(groups[STORE])
                store_named = True
            shown = None if lists else QUICKSTART_DEFAULTS.get(option.name)
            add_option(groups[option.group], option, lists=lists, shown=shown)


def add_loading_args(group) -> None:
    """How the model is loaded (--quantize, --device, --dtype, --hf-token), shared with `selfcheck`
    so that it loads a model exactly as `run` does."""
    for name in ("quantize", "device", "dtype", "hf_token"):
        add_option(group, OPTIONS[name])


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="generate cited answers for a dataset, one run per RAG mode",
        description="Generate cited answers for a dataset, one run per RAG mode, stored as they go.",
    )
    add_option(p, OPTIONS["model"], lists=True)
    add_option(p, OPTIONS["dataset"])
    add_common_run_args(p, lists=True)
    add_option(p, OPTIONS["study"])
    r = p.add_argument_group(RAY)
    for name in ("backend", "ray_address", "actors", "gpus_per_actor"):
        add_option(r, OPTIONS[name])
    add_server_args(p)
    p.set_defaults(main=main)


def check_backend_args(args: argparse.Namespace) -> None:
    """Refuse Ray options without --backend ray (the use case checks the rest: engine.usecases.runs.run.check_ray)."""
    if getattr(args, "backend", "local") != "ray":
        given = [f"--{n.replace('_', '-')}" for n in ("ray_address", "actors", "gpus_per_actor")
                 if getattr(args, n, None) is not None]
        if given:
            raise UserError(f"{given[0]} needs --backend ray")


def ray_options(args: argparse.Namespace):
    """The RayOptions of --backend ray, or None for a local run."""
    if getattr(args, "backend", "local") != "ray":
        return None

    return RayOptions(args.ray_address, 1 if args.actors is None else args.actors, args.gpus_per_actor)


def max_new_tokens(args: argparse.Namespace) -> int:
    """--max-new-tokens, or run's default: short for the smoke model (every model of a grid
    smoke), the real models' 256 otherwise. The quickstart sets its own before this is asked."""
    if args.max_new_tokens is not None:
        return args.max_new_tokens
    return default_max_new_tokens({m.strip() for m in str(args.model).split(",") if m.strip()})


def sampling_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that act only with --sample (--temperature, --top-p, --sample-top-k), defaults
    filled in. One typed without --sample is refused: greedy decoding would ignore it, and sampling
    for the user would make the stored configuration something not asked for."""
    needing = [o for o in RUN_OPTIONS if o.needs == "sample"]
    typed = {o.name: getattr(args, o.name, None) for o in needing}
    given = [o for o in needing if typed[o.name] is not None]
    if given and not getattr(args, "sample", False):
        option = given[0].option
        raise UserError(f"{option} {typed[given[0].name]:g} needs --sample: decoding is greedy without it and would "
                        f"ignore {option}")
    return {o.name: o.default if typed[o.name] is None else typed[o.name] for o in needing}


def option_values(args: argparse.Namespace, model: str) -> dict:
    """The run options of parsed arguments by their names, run's defaults filled in (max_new_tokens,
    sampling, $HF_TOKEN); an option a command lacks (the quickstart's battery) is left to its default."""
    values = {o.name: getattr(args, o.name) for o in RUN_OPTIONS if hasattr(args, o.name)}
    return {**values, **sampling_settings(args), "model": model, "modes": tuple(args.modes.split(",")),
            "extra_label": tuple(getattr(args, "extra_label", None) or ()), "max_new_tokens": max_new_tokens(args),
            # None lets from_pretrained read $HF_TOKEN or the login cache itself.
            "hf_token": args.hf_token or os.environ.get("HF_TOKEN") or None}


def build_request(args: argparse.Namespace, model: str, label: str | None):
    """A RunRequest from parsed arguments, built and checked by the use case's one builder
    (engine.usecases.runs.run_options; FieldError, worded as options by engine.commands._field_words).
    `label` None: the use case resolves `model` and names it."""
    return build_run_request(option_values(args, model), model_label=label)


def execute(args: argparse.Namespace, dataset_path: str, model_arg: str, *, hint: bool = True):
    """Check everything, run with a progress bar, print the outcome; returns the ExperimentOutcome.

    `hint=False` leaves out the closing "see the bias with" line, for callers that print their
    own next steps (the quickstart).
    """
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
    grid = grid_of(vars(args))  # before anything is read: a bad list is one line
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


def configuration_args(args: argparse.Namespace, configuration: dict, grid) -> argparse.Namespace:
    """A copy of `args` with one value per list option: what a single `run` would get."""
    return argparse.Namespace(**configuration_values(vars(args), configuration, grid))


def run_study(args: argparse.Namespace, grid):
    """`run` with comma lists: the StudyRequest of the grid, run and reported by engine.commands._study."""
    from engine.commands._study import run_study as run_grid

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
