"""Values passed between the engine's modules, the store and the app.

They are frozen dataclasses so they can be shared and hashed safely; the store persists them
column for column, so a field added here needs a migration there. The closed sets below are spelt
once, the per-answer metrics' names and words (ANSWER_METRICS) among them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

# Closed sets, each spelt once: everything else imports these names.
Mode = Literal["vanilla", "base", "cf"]
MODES: tuple[Mode, ...] = get_args(Mode)  # also the display order
RunStatus = Literal["running", "complete", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
FinishReason = Literal["stop", "length"]
Order = Literal["ranked", "reversed", "random"]  # of the shown documents
ORDERS: tuple[Order, ...] = get_args(Order)
XaiVariant = Literal["none", "direct", "counterfactual"]  # self-interpretation prompting (Garigliotti)
XAI_VARIANTS: tuple[XaiVariant, ...] = get_args(XaiVariant)
# The battery (docs/method.md, "Battery"): where the relevant documents stand, whether a
# non-relevant document is shown twice, which documents carry a label.
RelevantAt = Literal["ranked", "first", "middle", "last"]
RELEVANT_ATS: tuple[RelevantAt, ...] = get_args(RelevantAt)
Repetition = Literal["none", "distractor"]
REPETITIONS: tuple[Repetition, ...] = get_args(Repetition)
LabelScope = Literal["all", "relevant", "others"]
LABEL_SCOPES: tuple[LabelScope, ...] = get_args(LabelScope)
FewShot = Literal[0, 1, 2]  # demonstrations before the question; engine.prompting.prompts holds two
FEW_SHOT_COUNTS: tuple[FewShot, ...] = get_args(FewShot)
Quantize = Literal["auto", "4bit", "8bit", "none"]  # what a user asks for; auto resolves to one of the others
QUANTIZATIONS: tuple[Quantize, ...] = get_args(Quantize)
ExportFormat = Literal["csv", "parquet"]  # of `python -m engine export` and the app's /export
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)


@dataclass(frozen=True)
class AnswerMetric:
    """A per-answer metric as the lists outside the SQL name it: in which lists it appears and how
    the faces word it. Its value per answer is defined once, in store/views.sql (query_metrics, or
    compare_item_metrics for the two that compare derives), which no entry here can create."""

    name: str  # its column, the same in every view, table, export and record
    words: str = ""  # as compare prints it ("citation precision"); a compared metric needs them
    short: str = ""  # the app's compare table header, short enough to wrap; a compared metric needs one
    binary: bool = False  # 0/1 per answer: compare's exact McNemar and exact bounds, else permutation and bootstrap
    scale: float = 100.0  # compare shows it (and reads a margin) in these units: 100 for shares (points)
    count: bool = False  # a whole number per answer: an integer column in Parquet
    compared: bool = False  # a metric of `compare`: compare_item_metrics, compare_runs, the kept item rows
    exported: bool = False  # a column of query_metrics, so of the CSV and Parquet exports and Every Eval Ever's items
    summarised: bool = False  # in run_metric_summary: a mean and interval in run_metrics and the kept run rows

    def __post_init__(self) -> None:
        if self.compared and not (self.words and self.short):
            raise ValueError(f"the compared metric {self.name} needs its words and its short header")


_EVERYWHERE = {"compared": True, "exported": True, "summarised": True}
# Every per-answer metric, in the order every list shows them (each list takes those it names).
# tests/store/test_metric_lists.py holds views.sql's lists and the kept tables' columns to these.
ANSWER_METRICS: dict[str, AnswerMetric] = {m.name: m for m in (
    AnswerMetric("precision", "citation precision", "precision", **_EVERYWHERE),
    AnswerMetric("recall", "citation recall", "recall", **_EVERYWHERE),
    AnswerMetric("f1", "citation F1", "F1", **_EVERYWHERE),
    AnswerMetric("exact_match", "exact match (paper)", "EM", binary=True, **_EVERYWHERE),
    AnswerMetric("squad_em", "exact match (SQuAD)", "SQuAD EM", binary=True, **_EVERYWHERE),
    AnswerMetric("token_f1", exported=True, summarised=True),
    AnswerMetric("answer_recall", "answer recall", "answer recall", **_EVERYWHERE),
    AnswerMetric("n_citations", "citations per answer", "citations", scale=1.0, count=True, compared=True,
                 exported=True),
    AnswerMetric("out_of_range_citations", scale=1.0, count=True, exported=True),
    AnswerMetric("p_relevant", exported=True),
    AnswerMetric("p_nonrelevant", exported=True),
    AnswerMetric("cites_nothing", "answers citing nothing", "cites nothing", binary=True, compared=True),
    AnswerMetric("mean_probability", "mean citation probability", "mean citation p", compared=True),
)}
COMPARED_METRICS = tuple(m.name for m in ANSWER_METRICS.values() if m.compared)
EXPORTED_METRICS = tuple(m.name for m in ANSWER_METRICS.values() if m.exported)
SUMMARISED_METRICS = tuple(m.name for m in ANSWER_METRICS.values() if m.summarised)


@dataclass(frozen=True)
class Document:
    """One retrieved document; `relevant` means it contains the answer."""

    id: str
    text: str
    relevant: bool
    title: str = ""


@dataclass(frozen=True)
class Item:
    """A question, its gold answers and its retrieved documents in ranked order."""

    id: str
    question: str
    answers: tuple[str, ...]
    documents: tuple[Document, ...]


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: the user-turn text and the document ids in the order shown ([1] first)."""

    item_id: str
    text: str
    shown_doc_ids: tuple[str, ...]
    shown_relevant: tuple[bool, ...]
    # The label each shown document carried, as rendered after "written by"; None: no label.
    # Empty when unknown (answers imported without it); the store then derives it from the mode.
    shown_labels: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class TopLogprob:
    """One alternative at a generation step."""

    token_id: int
    token: str
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """The chosen token at one step, its raw log-prob, and optionally the top-n alternatives."""

    token_id: int
    token: str
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class GenerationOutput:
    """What the generator returns for one prompt, already cut at its first stop token."""

    text: str
    tokens: tuple[TokenLogprob, ...]
    finish_reason: str  # "stop" (a stop token ended it) or "length" (max_new_tokens reached)
    n_prompt_tokens: int
    # char_offsets[i] = (start, end) of token i inside `text`; used to align citations to tokens.
    char_offsets: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Citation:
    """One `[n]` in an answer: n is the 1-based position of the document as shown."""

    index: int  # order of appearance in the answer, from 0
    position: int
    doc_id: str | None  # None when n was not shown (out of range)
    relevant: bool | None
    probability: float | None  # P(model produced the number token(s) of n); None if unknown


@dataclass(frozen=True)
class Generation:
    """One stored answer: the unit the runner hands to its sink."""

    item_id: str
    prompt: str
    answer: str
    shown_doc_ids: tuple[str, ...]
    finish_reason: str
    n_prompt_tokens: int
    tokens: tuple[TokenLogprob, ...]
    citations: tuple[Citation, ...] = field(default_factory=tuple)
    shown_labels: tuple[str | None, ...] = ()  # as Prompt.shown_labels

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class SkippedItem:
    """An item left out of a run with --skip-invalid, and why (printed and stored with the run)."""

    where: str  # "line N" (JSONL) or "item N"
    item_id: str | None
    reason: str


# ---------------------------------------------------------------- runs as the store records them (engine.sink)


@dataclass(frozen=True)
class RunSpec:
    """Everything recorded about a run before its first generation (provenance included)."""

    run_id: str
    experiment_id: str
    config_hash: str  # same command line + same dataset content -> same hash -> resume
    model: str
    model_revision: str | None
    quantization: str  # "4bit" | "8bit" | "none" | "imported"
    dtype: str
    device: str
    dataset: str  # the path or name the user gave
    dataset_sha: str  # content hash of the validated items
    metadata_type: str | None  # None for vanilla-only runs without a type
    rag_mode: Mode
    seed: int
    prompt_version: str
    git_sha: str | None
    library_versions: dict[str, str]
    # The full prompt + generation configuration and what the run recorded about itself
    # (skipped items, a checkpoint's dropped generation defaults); never holds a token.
    config: dict[str, Any]
    n_items: int


@dataclass(frozen=True)
class ExperimentSpec:
    """The experiment a run command belongs to: named, or found by what its runs share."""

    key: str  # hash of model + dataset content + every setting except the mode
    name: str | None  # `run --experiment NAME`; also matches an experiment id
    new: bool  # `--repeat`: never join an existing experiment
    model: str
    dataset: str
    dataset_sha: str
    settings: dict[str, Any]  # the run configuration without its mode
    run_hashes: tuple[str, ...] = ()  # config hashes of the requested runs (finds older experiments)


@dataclass(frozen=True)
class StoredRun:
    """A run as the store holds it, with the process generating it if one still is."""

    run_id: str
    experiment_id: str
    rag_mode: Mode
    config_hash: str
    status: RunStatus
    n_items: int | None
    config: dict[str, Any]
    owner: str | None  # e.g. "process 1234 on host-a" while a live process generates it


@dataclass(frozen=True)
class StoredExperiment:
    """An experiment and its runs (at most one per mode)."""

    experiment_id: str
    name: str | None
    key: str | None  # None for experiments made before keys existed, or by `import`
    model: str | None
    dataset: str | None
    dataset_sha: str | None
    settings: dict[str, Any] | None
    runs: tuple[StoredRun, ...]

    def run_for(self, mode: str) -> StoredRun | None:
        """This experiment's run of `mode`, if it has one."""
        return next((r for r in self.runs if r.rag_mode == mode), None)

    @property
    def label(self) -> str:
        """How messages name it: its name, else its id."""
        return self.name or self.experiment_id


# ---------------------------------------------------------------- explanations (engine.judges.explain)


@dataclass(frozen=True)
class ExplainRun:
    """A stored run whose answers can be explained."""

    run_id: str
    experiment_id: str
    model: str  # the model that answered, as the store names it
    rag_mode: str
    metadata_type: str | None
    label_a: str | None
    label_b: str | None
    n_answers: int


@dataclass(frozen=True)
class ExplainSource:
    """One stored answer with what its model saw: the item, the shown order and labels."""

    run_id: str
    item: Item
    answer: str
    shown_doc_ids: tuple[str, ...]
    labels: tuple[str | None, ...]  # per shown document; all None in vanilla


@dataclass(frozen=True)
class Explanation:
    """One explanation as stored, with what it mentions."""

    run_id: str
    item_id: str
    explainer_model: str
    prompt: str
    text: str
    n_prompt_tokens: int
    finish_reason: str
    tokens: tuple[TokenLogprob, ...]
    mentioned_docs: tuple[int, ...]
    mentioned_labels: tuple[str, ...]

    @property
    def mentions_label(self) -> bool:
        return bool(self.mentioned_labels)


# ---------------------------------------------------------------- verifications (engine.judges.verify)


@dataclass(frozen=True)
class Claim:
    """One (answer sentence, cited document) pair to verify."""

    item_id: str
    sentence_index: int  # 0-based, in split_sentences order
    sentence: str  # as written, citation marks included
    position: int  # 1-based document number as shown
    doc_id: str


@dataclass(frozen=True)
class VerifySource:
    """One stored answer with what its model saw, and the claims still to verify."""

    run_id: str
    item: Item
    answer: str
    shown_doc_ids: tuple[str, ...]
    claims: tuple[Claim, ...]
    # The label shown beside each shown document, for a judge that is to see it (`verify
    # --show-label`); empty: the judge sees no label.
    labels: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class StoredAnswer:
    """One stored answer of a run as the store reads it for `verify`, with what is judged already."""

    run_id: str
    item: Item
    answer: str
    shown_doc_ids: tuple[str, ...]
    judged: frozenset[tuple[int, int]]  # (sentence_index, position) pairs the judge model has verified


@dataclass(frozen=True)
class Verification:
    """One judged pair as stored."""

    run_id: str
    item_id: str
    sentence_index: int
    position: int
    doc_id: str
    judge_model: str
    prompt: str
    raw_output: str
    label: str  # one of CLASSES or UNPARSED
    p_attributable: float | None
    p_extrapolatory: float | None
    p_contradictory: float | None


@dataclass(frozen=True)
class LabelVerdict:
    """A judge's verdict on a base run's pair with the document's label as base or cf showed it,
    or with none (`label` None): the rows of the judge's own label bias (judge_label_verdicts)."""

    verification: Verification  # run_id: the base run; judge_model: as `verify --show-label` names it
    cf_run: str
    label_from: str  # base | cf: whose label the prompt shows, or, hidden, whose pass judged it
    label: str | None  # shown after "written by"; None: hidden
