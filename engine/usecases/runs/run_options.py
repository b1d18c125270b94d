"""Every option of a run, declared once: its name, type, default, bounds, help, the app's words for
it and whether a comma list of it makes a study grid. Each face builds from this table:

- `python -m engine run` (and `quickstart`, `selfcheck`) its argparse options (engine.commands.run);
- the app its Run form's record, inputs and their order (demo.handlers.run, demo.tabs.run);
- both the words a message names a field by: `--top-k` on the command line, "the cut-off k" in
  the app (engine.commands._field_words, demo.field_words);
- the study grid its axes (engine.usecases.study.study).

An option's name is the same everywhere: the RunRequest field (engine.running.run_request), the
form's field and the API's argument, `--name-with-dashes` on the command line. One plain mapping
of these names to values becomes a request through build_run_request, checked on the way.
Torch-free: every CLI command builds the run parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import FieldError
from engine.generation.batching import BATCHINGS, INVARIANT, SORTED  # torch-free
from engine.prompting.citations import CITATION_SYNTAXES  # light: re, math and engine.types
from engine.prompting.prompts import PromptConfig, metadata_type
from engine.running.run_request import SETTING_BOUNDS, RunRequest
from engine.types import (
    FEW_SHOT_COUNTS,
    LABEL_SCOPES,
    MODES,
    ORDERS,
    QUANTIZATIONS,
    RELEVANT_ATS,
    REPETITIONS,
    XAI_VARIANTS,
)

# The groups of `run --help`, in its order.
PROMPT = "prompt"
LOADING = "model and generation"  # how the model loads: shared with `selfcheck` (add_loading_args)
GENERATION = "model and generation"
STORE = "experiment and store"
RUN = "run"  # `run`'s own, above the groups: the model, the dataset, the study
RAY = "scaling out (optional: pip install -r requirements-ray.txt)"
SERVED = "served models"  # declared by engine.commands._served_options, shared with explain and verify

SAME = object()  # a form's or the command line's default that is the option's own


@dataclass(frozen=True)
class RunOption:
    """One option of a run. `help` is `run --help`'s text without its "(default: ...)"; a `{grid}`
    in it stands where a grid option's list note goes."""

    name: str
    label: str  # how the app names it in a sentence: "the cut-off k"
    help: str = ""  # "" where another module declares the option (SERVED)
    default: Any = None  # the value when not given
    type: type = str  # int, float, bool (a flag) or str
    group: str = PROMPT
    grid: bool = False  # a comma list of it makes a study grid, one experiment per value
    choices: tuple = ()  # argparse's, where the CLI offers a closed set
    metavar: str | None = None  # a grid option's list metavar is built from it: K[,K...]
    shown_default: str | None = None  # the help's "(default: ...)", when not the default itself
    needs: str | None = None  # acts only with this flag on (sampling's settings need `sample`)
    form_default: Any = SAME  # the app form's initial value, where the app starts elsewhere
    quickstart: bool = True  # quickstart takes it too (it keeps the paper's prompt and no reruns)
    list_note: str = ""  # after the grid note, on `run` only: ", all = every document"
    repeatable: bool = False  # given once per value (--extra-label)
    required: bool = False  # the command line must name it (--dataset)
    # What the command line holds when it is not typed, where the face fills the default in later
    # (max_new_tokens: by the model) or must see whether it was typed (actors: needs --backend ray).
    cli_default: Any = SAME

    @property
    def option(self) -> str:
        """How the command line spells it."""
        return "--" + self.name.replace("_", "-")

    @property
    def least(self) -> int | None:
        return SETTING_BOUNDS.get(self.name, (None, None))[0]

    @property
    def most(self) -> int | None:
        return SETTING_BOUNDS.get(self.name, (None, None))[1]

    @property
    def initial(self) -> Any:
        """The app form's initial value."""
        return self.default if self.form_default is SAME else self.form_default


def _bounded(text: str, name: str) -> str:
    least, most = SETTING_BOUNDS[name]
    return text.format(least=least, most=most, grid="{grid}")


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("model", "the model", "Hugging Face id or local folder; 'smoke' = offline tiny model; 'auto' = "
              "Mistral-7B-Instruct-v0.3 on a GPU, Qwen2.5-0.5B-Instruct on CPU, smoke only offline; with --backend "
              "server, the name the server serves the model under; a comma list runs each", "auto", group=RUN,
              grid=True, metavar="MODEL", form_default="smoke"),
    RunOption("dataset", "the dataset", ".jsonl, .json, .parquet or a datasets.save_to_disk folder; 'sample' = the "
              "bundled sample", "sample", group=RUN, required=True),
    RunOption("metadata", "the metadata type", "label type on the documents in base and cf: hai, gender, race, "
              "publisher (three labels), or a NAME defined with --label-a/--label-b/--consideration{grid}", "hai",
              grid=True, metavar="TYPE", form_default="gender"),
    RunOption("label_a", "custom label A", "custom type: label on relevant documents in base mode", None,
              shown_default="none"),
    RunOption("label_b", "custom label B", "custom type: label on the other documents in base mode", None,
              shown_default="none"),
    RunOption("consideration", "the custom consideration sentence",
              "custom type: the sentence added as consideration 3", None, shown_default="none"),
    RunOption("extra_label", "an extra label", "custom type: one more label, repeatable; the type is then "
              "many-valued, its labels (label A, label B, extra ...) rotated over the documents", (),
              metavar="TEXT", shown_default="none", quickstart=False, repeatable=True),
    RunOption("modes", "the modes", f"comma-separated subset of {','.join(MODES)}", MODES,
              cli_default=",".join(MODES)),
    RunOption("top_k", "the cut-off k", "show only the first K ranked documents{grid}", None, int, grid=True,
              metavar="K", shown_default="all", list_note=", all = every document"),
    RunOption("order", "the document order", f"document order after the cut-off: {', '.join(ORDERS)}; random is "
              "seeded per item by --seed{grid}", "ranked", grid=True, choices=ORDERS, metavar="ORDER"),
    RunOption("few_shot", "the few-shot examples", "unlabelled demonstrations before the question: "
              f"{', '.join(map(str, FEW_SHOT_COUNTS))}{{grid}}", 0, int, grid=True, choices=FEW_SHOT_COUNTS,
              metavar="N"),
    RunOption("xai", "the XAI variant", "self-interpretation question added to the prompt: "
              f"{', '.join(XAI_VARIANTS)}{{grid}}", "none", grid=True, choices=XAI_VARIANTS, metavar="XAI"),
    # The battery (docs/method.md, "Battery").
    RunOption("relevant_at", "relevant documents at", f"move the relevant documents after --order: "
              f"{', '.join(RELEVANT_ATS)}; ranked leaves them where they are{{grid}}", "ranked", grid=True,
              choices=RELEVANT_ATS, metavar="WHERE", quickstart=False),
    RunOption("repetition", "the repetition", f"{', '.join(REPETITIONS)}; distractor shows the first non-relevant "
              "document again as the last document{grid}", "none", grid=True, choices=REPETITIONS, metavar="REP",
              quickstart=False),
    RunOption("label_scope", "labels on", f"which documents carry a label in base and cf: {', '.join(LABEL_SCOPES)}; "
              "relevant or others leaves the rest unlabelled{grid}", "all", grid=True, choices=LABEL_SCOPES,
              metavar="SCOPE", quickstart=False),
    RunOption("quantize", "the quantization", "auto = 4bit on a GPU, none on CPU", "auto", group=LOADING,
              choices=QUANTIZATIONS),
    RunOption("device", "the device", "auto | cpu | cuda:N", "auto", group=LOADING),
    RunOption("dtype", "the dtype", "auto | bfloat16 | float16 | float32", "auto", group=LOADING),
    RunOption("hf_token", "the Hugging Face token", "for gated models, never stored; visible to other users in `ps`, "
              "so prefer $HF_TOKEN or `hf auth login`", None, group=LOADING,
              shown_default="$HF_TOKEN, else the Hugging Face login cache"),
    RunOption("batch_size", "the batch size", "prompts generated together", 8, int, group=GENERATION),
    RunOption("max_new_tokens", "max new tokens", "most tokens generated per answer", 256, int, group=GENERATION,
              metavar="N", shown_default="48 with --model smoke, whose random weights never stop; else 256",
              form_default=48, cli_default=None),
    RunOption("sample", "sample (a tick in the sample box)", "sample instead of greedy decoding; --temperature, "
              "--top-p and --sample-top-k are refused without it", False, bool, group=GENERATION,
              shown_default="greedy"),
    RunOption("temperature", "the temperature", "with --sample only", 1.0, float, group=GENERATION, needs="sample"),
    RunOption("top_p", "top-p", "with --sample only: nucleus mass in (0, 1]", 1.0, float, group=GENERATION,
              needs="sample"),
    RunOption("sample_top_k", "the sampling top-k", "with --sample only: keep the K most likely tokens, 0 = off", 0,
              int, group=GENERATION, needs="sample"),
    RunOption("seed", "the seed", _bounded("sampling seed and random-order seed, {least} to {most}", "seed"), 0, int,
              group=GENERATION),
    RunOption("threads", "the threads", "torch CPU threads that generation computes with, here and on every Ray "
              "actor; recorded with the runs. Log-probs on a CPU differ in their last digits between counts", None,
              int, group=GENERATION, metavar="N",
              shown_default="torch's default here, the physical cores or $OMP_NUM_THREADS"),
    RunOption("batching", "the batching", f"how prompts are cut into batches: {SORTED} (by length: fastest, but an "
              f"answer's log-probs, and at a near-tie its tokens, may change with its batch) or {INVARIANT} (fixed "
              "shapes: an answer's tokens and log-probs do not depend on the rest of its batch; about 2x the prompt "
              "tokens at --batch-size 8 on the bundled sample, more at larger sizes); recorded with the runs, "
              "ignored by a served model", SORTED, group=GENERATION, choices=BATCHINGS),
    RunOption("top_logprobs", "top log-probs", _bounded("also record the top N alternatives per token, {least} to "
              "{most}", "top_logprobs"), 0, int, group=GENERATION),
    RunOption("experiment", "the experiment name", "create or extend the experiment NAME (or an experiment id); "
              "refused when its model, dataset or settings differ", None, group=STORE, metavar="NAME",
              shown_default="the newest experiment with the same settings"),
    RunOption("limit", "the item limit", "only the first N items; a larger N later extends the same runs", None, int,
              group=STORE, shown_default="all", form_default=10),
    RunOption("skip_invalid", "skip invalid items ticked", "leave out invalid items and prompts too long for the "
              "model's context, and record them with the run, instead of refusing", False, bool, group=STORE,
              shown_default="refuse"),
    RunOption("repeat", "repeat", "start a new experiment even if an identical one exists", False, bool, group=STORE,
              shown_default="resume or reuse it"),
    RunOption("reruns", "the reruns", _bounded("after the experiment's runs, K more runs of each mode under the same "
              "configuration, {least} to {most}, each cutting its batches another way (and, with --sample, another "
              "seed); stored as reruns of the experiment, never as experiments of their own: `bias` shows each "
              "measure beside its rerun floor", "reruns"), 0, int, group=STORE, metavar="K", quickstart=False),
    RunOption("citation_syntax", "the citation syntax", "how answers' citations are read: ours ([1], [1,2], [1-3] "
              "...; a number not shown counts against precision) or paper (the PAttriEval code's [n] only, numbers "
              "not shown ignored), to reproduce the paper's numbers", "ours", group=STORE, choices=CITATION_SYNTAXES),
    RunOption("study", "the study name", "run the cross product of the comma lists as the study NAME, one "
              "experiment per configuration; running it again completes what is missing", None, group=RUN,
              metavar="NAME", shown_default="a name made from the grid, when a list has more than one value"),
    RunOption("backend", "the backend", "local = generate in this process; ray = on a pool of Ray actors; server = "
              "on an OpenAI-compatible server (--base-url); this process always writes the store", "local",
              group=RAY, choices=("local", "ray", "server")),
    RunOption("ray_address", "the Ray address", "with --backend ray: HOST:PORT of a running cluster (`ray start "
              "--head` prints it), or auto", None, group=RAY, metavar="ADDR",
              shown_default="a Ray instance started on this machine"),
    RunOption("actors", "Ray actors", "with --backend ray: model replicas", 1, int, group=RAY, metavar="N",
              shown_default="1", cli_default=None),
    RunOption("gpus_per_actor", "GPUs per actor", "with --backend ray: GPUs each replica takes", None, float,
              group=RAY, metavar="G", shown_default="1 when the cluster has GPUs, else 0"),
    RunOption("base_url", "the server base URL", group=SERVED),
    RunOption("tokenizer", "the tokenizer", group=SERVED),
    RunOption("concurrency", "requests in flight", default=None, type=int, group=SERVED),
    RunOption("api_key_env", "the API key's environment variable", group=SERVED),
    RunOption("request_timeout", "the request timeout", default=300.0, type=float, group=SERVED),
)
OPTIONS: dict[str, RunOption] = {o.name: o for o in RUN_OPTIONS}
# The grid's axes, in the order a grid expands (outermost first).
GRID_AXES: tuple[str, ...] = tuple(o.name for o in RUN_OPTIONS if o.grid)
# The options a RunRequest takes as they are (the prompt's are gathered into its PromptConfig).
_PROMPT_FIELDS = ("top_k", "order", "few_shot", "xai", "relevant_at", "repetition", "label_scope")
_REQUEST_FIELDS = ("quantize", "device", "dtype", "max_new_tokens", "sample", "temperature", "top_p", "sample_top_k",
                   "seed", "batch_size", "top_logprobs", "repeat", "experiment", "limit", "skip_invalid",
                   "citation_syntax", "threads", "reruns", "hf_token")


def build_run_request(values: Mapping[str, Any], *, model_label: str | None = None) -> RunRequest:
    """The RunRequest of option values by their names (an option not given: its default), every
    value checked first: a FieldError (one line) naming the option, for each face to word.
    `model_label` None: the use case resolves `model` ('auto', 'smoke') and names it."""
    unknown_names = sorted(set(values) - set(OPTIONS))
    if unknown_names:
        raise TypeError(f"not a run option: {', '.join(unknown_names)}")
    v = {**{o.name: o.default for o in RUN_OPTIONS}, **values}
    for name in ("quantize", "citation_syntax", "batching"):
        if v[name] not in OPTIONS[name].choices:
            raise FieldError(name, f"{{{name}}}: unknown value '{{value}}' (choose from {{choices}})", value=v[name],
                             choices=", ".join(OPTIONS[name].choices))
    modes = tuple(m.strip() for m in v["modes"] if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise FieldError("modes", "{modes}: unknown mode(s) {unknown}; choose from {choices}",
                         unknown=", ".join(unknown) or "(none given)", choices=",".join(MODES))
    if len(set(modes)) != len(modes):
        raise FieldError("modes", "{modes} lists a mode twice")
    meta = metadata_type(v["metadata"], v["label_a"], v["label_b"], v["consideration"], tuple(v["extra_label"]))
    # Plain strings here; PromptConfig checks them against its Literals (FieldError).
    prompt = PromptConfig(mode="vanilla", metadata=meta, seed=v["seed"], **{f: v[f] for f in _PROMPT_FIELDS})
    return RunRequest(model=v["model"], model_label=model_label, modes=tuple(m for m in MODES if m in modes),
                      prompt=prompt, batch_invariant=v["batching"] == INVARIANT,
                      **{f: v[f] for f in _REQUEST_FIELDS})
