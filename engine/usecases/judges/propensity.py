"""Propensity CAB: the label bias measured on the probabilities of citing, with the answer text
held fixed. The one loop behind `python -m engine propensity` and engine.api.

For an experiment with vanilla, base and cf runs, each item's vanilla answer is read under the
base and under the cf prompt (engine.judges.propensity.probe_citations): at every citation site, the
probability the model gives each shown document's number. Per item and mode, the mass is the
mean over sites of the probability on relevant documents; propensity CAB is the mean over items
of (mass_base - mass_cf) x 100, with engine.statistics.stats.paired_test's bootstrap interval and paired
t-test. No new text is generated: one forward pass per (site, candidate), batched.

Items are skipped, and counted by reason, when the vanilla answer cites nothing, when base or cf
has no answer or no stored prompt, or when the modes showed different documents (or a different
order): the relevant numbers would then differ between the prompts.

Rows are stored as they go (store.propensity_store, migration 015): an item's rows of both
modes in the transaction of its batch of items, so a kill loses at most that batch, and the
same request again probes only the items still missing. The figures are always computed from
the stored rows. Progress and cancel come in as arguments: `progress(n)` after each committed
batch of n items, `stage(line)` before loading and before probing, `stop()` between batches
(then engine.errors.RunCancelled).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.judges.judging import choose_model
from engine.judges.plan import check_stop
from engine.judges.propensity import citation_sites, probe_citations, relevant_mass
from engine.paths import require_store
from engine.usecases.experiments import unknown_experiment
from engine.usecases.judges.judge_runs import load_judge

Progress = Callable[[int], None]
Stage = Callable[[str], None]
Stop = Callable[[], bool]
Load = Callable[[str], Any]

PROBED_MODES = ("base", "cf")
ITEMS_PER_COMMIT = 4  # items whose rows one transaction writes

NO_CITATION = "the vanilla answer cites nothing"
NOT_ANSWERED = "no base or cf answer"
NO_PROMPT = "no stored prompt (imported answers)"
SHOWN_DIFFER = "the modes showed different documents or orders"
NOTHING_SHOWN = "no documents shown"
TOO_LONG = "the prompt and answer exceed the model's context"


@dataclass(frozen=True)
class PropensityRequest:
    """Which experiment to probe, and how to load the model that reads it."""

    db: Path
    experiment: str  # id or name
    model: str | None = None  # Hugging Face id or local folder; None: the model that answered
    device: str = "auto"
    quantize: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16  # (site, candidate) rows per forward pass
    limit: int | None = None  # only the vanilla run's first N answers


@dataclass(frozen=True)
class ItemPropensity:
    """One probed item: its sites, and the mean probability mass on relevant documents per mode."""

    item_id: str
    n_sites: int
    mass_base: float
    mass_cf: float


@dataclass(frozen=True)
class PropensityResult:
    """Propensity CAB (x100) over the probed items, the mean mass per mode, and what was skipped."""

    experiment_id: str
    probe_model: str  # as the store names it
    cab: Any  # engine.statistics.stats.PairedTest of 100 x (mass_base - mass_cf); None when no item was probed
    mean_mass: dict[str, float]  # base, cf: mean over items (nan when none)
    items: tuple[ItemPropensity, ...]
    n_probed_now: int  # items probed in this invocation (the others were stored already)
    skipped: tuple[tuple[str, str], ...]  # (item_id, reason)

    @property
    def skipped_by_reason(self) -> dict[str, int]:
        return dict(Counter(reason for _, reason in self.skipped))


@dataclass(frozen=True)
class _Todo:
    item: Any  # store.queries.ProbeItem
    n_shown: int


def check_request(request: PropensityRequest) -> None:
    """One line for a bad number or an empty model name (the CLI's option names)."""
    if request.batch_size < 1:
        raise UserError("--batch-size must be at least 1")
    if request.limit is not None and request.limit < 1:
        raise UserError("--limit must be at least 1")
    if request.model is not None and not request.model.strip():
        raise UserError("--model must not be empty")


def _runs(request: PropensityRequest) -> tuple[str, dict[str, Any]]:
    """The experiment id and its newest run per mode; one line when any is missing or served."""
    from store.queries import probe_runs

    found = probe_runs(require_store(request.db), request.experiment)
    if found is None:
        raise UserError(unknown_experiment(Path(request.db), request.experiment))
    experiment_id, runs = found
    by_mode: dict[str, Any] = {}
    for run in runs:
        by_mode.setdefault(run.rag_mode, run)
    missing = [m for m in ("vanilla", *PROBED_MODES) if m not in by_mode]
    if missing:
        raise UserError(f"experiment '{request.experiment}' has no {' or '.join(missing)} run: propensity reads the "
                        "vanilla answers under the base and cf prompts (run it with --modes vanilla,base,cf)")
    chosen = {m: by_mode[m] for m in ("vanilla", *PROBED_MODES)}
    if request.model is None and any(r.served for r in chosen.values()):
        raise UserError(f"experiment '{request.experiment}' was answered by a served model: propensity needs the "
                        "log-probs of a given text under the prompt, which a server does not give; pass the "
                        "model's weights with --model PATH")
    return experiment_id, chosen


def _classify(item: Any) -> str | None:
    """Why an item cannot be probed, or None."""
    if item.base_shown is None or item.cf_shown is None:
        return NOT_ANSWERED
    if item.base_prompt is None or item.cf_prompt is None:
        return NO_PROMPT
    if not item.shown:
        return NOTHING_SHOWN
    if item.base_shown != item.shown or item.cf_shown != item.shown:
        return SHOWN_DIFFER
    if not citation_sites(item.answer):
        return NO_CITATION
    return None


def _fits(loaded: Any, prompt: str, answer: str) -> bool:
    """Whether the prompt, the answer and a candidate fit the model's context (a --model with a
    shorter context than the one that answered)."""
    from engine.generation.models import chat_input_ids

    context = getattr(loaded, "context_length", None)
    if context is None:
        return True
    n_answer = len(loaded.tokenizer(answer, add_special_tokens=False)["input_ids"])
    return len(chat_input_ids(loaded, prompt)) + n_answer + 8 <= context


def _probe_rows(loaded: Any, todo: _Todo, batch_size: int) -> list[tuple[str, str, int, int, float, float]] | None:
    """The store rows of one item: both modes, every site, every candidate; None when it does not fit."""
    item = todo.item
    rows: list[tuple[str, str, int, int, float, float]] = []
    prompts = {"base": item.base_prompt, "cf": item.cf_prompt}
    if not all(_fits(loaded, prompts[m], item.answer) for m in PROBED_MODES):
        return None
    for mode in PROBED_MODES:
        prompt = prompts[mode]
        for site in probe_citations(loaded, prompt, item.answer, todo.n_shown, batch_size=batch_size):
            rows.extend((mode, item.item_id, site.site_index, n, lp, p)
                        for n, (lp, p) in enumerate(zip(site.logprobs, site.probabilities, strict=True), start=1))
    return rows


def item_masses(stored: tuple[tuple, ...], relevant: dict[str, tuple[bool, ...]]) -> tuple[ItemPropensity, ...]:
    """Per item of `relevant` with rows in both modes: the mean over sites of the probability on
    relevant documents, from stored rows (rag_mode, item_id, site_index, position, logprob,
    probability); in the order of `relevant`."""
    sites: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    for mode, item_id, site_index, position, _logprob, probability in stored:
        sites.setdefault((item_id, mode), {}).setdefault(site_index, {})[position] = probability
    out = []
    for item_id, rel in relevant.items():
        per_mode = [s for m in PROBED_MODES if (s := sites.get((item_id, m)))]
        if len(per_mode) < len(PROBED_MODES):
            continue
        masses = [relevant_mass([[s[i][n] for n in sorted(s[i])] for i in sorted(s)], rel) for s in per_mode]
        out.append(ItemPropensity(item_id, len(per_mode[0]), masses[0], masses[1]))
    return tuple(out)


def propensity(request: PropensityRequest, *, load: Load | None = None, progress: Progress | None = None,
               stop: Stop | None = None, stage: Stage | None = None) -> PropensityResult:
    """Probe what is missing of the experiment, store it, and compute propensity CAB from the store."""
    from engine.statistics.stats import paired_test
    from store.propensity_store import PropensityStore
    from store.queries import probe_items, stored_propensities

    check_request(request)
    experiment_id, runs = _runs(request)
    model, label = choose_model(request.model, list(runs.values()))
    items = probe_items(request.db, runs["vanilla"].run_id, runs["base"].run_id, runs["cf"].run_id)
    if request.limit is not None:
        items = items[: request.limit]
    skipped: list[tuple[str, str]] = []
    eligible: list[_Todo] = []
    for item in items:
        reason = _classify(item)
        if reason is None:
            eligible.append(_Todo(item, len(item.shown)))
        else:
            skipped.append((item.item_id, reason))

    stored = stored_propensities(request.db, experiment_id, label)
    stored_keys = {(r[0], r[1]) for r in stored}
    done = {i for _, i in stored_keys if all((m, i) in stored_keys for m in PROBED_MODES)}
    todo = [t for t in eligible if t.item.item_id not in done]
    n_now = 0
    if todo:
        check_stop(stop, "cancelled before probing")
        if stage is not None:
            stage(f"loading {label}")
        loaded = (load or load_judge(request))(model)
        check_stop(stop, "cancelled before probing")
        if stage is not None:
            stage("probing")
        store = PropensityStore(request.db)
        for start in range(0, len(todo), ITEMS_PER_COMMIT):
            chunk = todo[start: start + ITEMS_PER_COMMIT]
            rows: list[tuple[str, str, int, int, float, float]] = []
            for t in chunk:
                item_rows = _probe_rows(loaded, t, request.batch_size)
                if item_rows is None:
                    skipped.append((t.item.item_id, TOO_LONG))
                else:
                    rows.extend(item_rows)
                    n_now += 1
            store.write_items(experiment_id, label, rows)
            if progress is not None:
                progress(len(chunk))
            if start + ITEMS_PER_COMMIT < len(todo):
                check_stop(stop, f"stopped after {n_now} item{'s' if n_now != 1 else ''}")
        stored = stored_propensities(request.db, experiment_id, label)

    probed = item_masses(stored, {t.item.item_id: t.item.relevant for t in eligible})
    cab = None
    mean_mass = {m: math.nan for m in PROBED_MODES}
    if probed:
        cab = paired_test([100 * p.mass_base for p in probed], [100 * p.mass_cf for p in probed])
        mean_mass = {"base": sum(p.mass_base for p in probed) / len(probed),
                     "cf": sum(p.mass_cf for p in probed) / len(probed)}
    return PropensityResult(experiment_id, label, cab, mean_mass, probed, n_now, tuple(skipped))
