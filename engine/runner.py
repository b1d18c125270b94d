"""One experiment: a dataset x a prompt configuration x RAG modes -> runs streamed to a sink.

Each mode is one run; the runs share an experiment id. Every finished batch goes to the sink
at once, so a crash loses at most the batch in flight. A run is identified by a hash of
everything that determines its output (model, dataset content, prompt and generation
settings), so re-running the same command finds the unfinished run and generates only the
items it lacks.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import uuid
from dataclasses import dataclass, field, replace
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Callable

from engine.citations import citation_probabilities, parse_citation_marks
from engine.data import Dataset
from engine.prompts import PROMPT_VERSION, PromptConfig, build_prompt
from engine.sink import RunSpec, Sink
from engine.types import Citation, GenerationOutput, Generation, Item, Prompt


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for; `hf_token` is used to load the model and never recorded."""

    model: str  # what to load: a Hub id or a local folder
    modes: tuple[str, ...]
    prompt: PromptConfig  # its mode is replaced per run
    quantize: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    max_new_tokens: int = 256
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k_sampling: int = 0
    seed: int = 0
    batch_size: int = 8
    top_n_logprobs: int = 0
    repeat: bool = False  # start new runs even when identical complete ones exist
    model_label: str | None = None  # how the store names the model, when not `model` itself
    hf_token: str | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        return self.model_label or self.model


@dataclass(frozen=True)
class RunOutcome:
    """How one mode's run ended in this invocation."""

    run_id: str
    mode: str
    status: str  # complete | failed | already complete
    n_items: int
    n_generated: int  # generated in this invocation (resume skips stored items)
    n_with_citation: int


@dataclass(frozen=True)
class ExperimentOutcome:
    experiment_id: str
    runs: tuple[RunOutcome, ...]
    model: str
    quantization: str | None


def config_hash(model: str, dataset_sha: str, config: dict) -> str:
    """Identity of a run's output: same inputs -> same hash -> resume instead of restart."""
    blob = json.dumps({"model": model, "dataset": dataset_sha, "config": config}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def run_config(request: RunRequest, mode: str) -> dict:
    """The stored configuration of one mode's run (no token, no batch size or device)."""
    return {
        "prompt": replace(request.prompt, mode=mode).to_dict(),
        "prompt_version": PROMPT_VERSION,
        "generation": {
            "max_new_tokens": request.max_new_tokens,
            "do_sample": request.do_sample,
            "temperature": request.temperature if request.do_sample else None,
            "top_p": request.top_p if request.do_sample else None,
            "top_k": request.top_k_sampling if request.do_sample else None,
            "seed": request.seed,
            "top_n_logprobs": request.top_n_logprobs,
        },
        "quantize": request.quantize,
    }


def make_generation(item: Item, prompt: Prompt, output: GenerationOutput) -> Generation:
    """A stored generation: the output plus its citations resolved against the shown order."""
    marks = parse_citation_marks(output.text)
    probabilities = citation_probabilities(output) if output.tokens else [None] * len(marks)
    relevant = {d.id: d.relevant for d in item.documents}
    citations = []
    for index, (mark, probability) in enumerate(zip(marks, probabilities)):
        shown = 1 <= mark.number <= len(prompt.shown_doc_ids)
        doc_id = prompt.shown_doc_ids[mark.number - 1] if shown else None
        citations.append(
            Citation(index, mark.number, doc_id, relevant[doc_id] if doc_id else None, probability)
        )
    return Generation(
        item_id=item.id,
        prompt=prompt.text,
        answer=output.text,
        shown_doc_ids=prompt.shown_doc_ids,
        finish_reason=output.finish_reason,
        n_prompt_tokens=output.n_prompt_tokens,
        tokens=output.tokens,
        citations=tuple(citations),
    )


def library_versions() -> dict[str, str]:
    """Versions of what shapes the numbers, for provenance."""
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "bitsandbytes", "tokenizers", "duckdb"):
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            pass
    return versions


def git_sha() -> str | None:
    """The commit of this checkout, when it is one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


@dataclass(frozen=True)
class _Planned:
    mode: str
    run_id: str
    experiment_id: str
    config_hash: str
    config: dict
    existing_status: str | None


def _plan(dataset: Dataset, request: RunRequest, sink: Sink) -> list[_Planned]:
    found = []
    for mode in request.modes:
        config = run_config(request, mode)
        h = config_hash(request.label, dataset.sha, config)
        existing = None if request.repeat else sink.find_resumable(h)
        found.append((mode, config, h, existing))
    # Runs resumed or already finished keep their experiment; new modes join it.
    experiment_id = next((e[1] for *_, e in found if e is not None), None) or uuid.uuid4().hex[:12]
    return [
        _Planned(mode, e[0] if e else uuid.uuid4().hex[:12], e[1] if e else experiment_id, h, config, e[2] if e else None)
        for mode, config, h, e in found
    ]


def run_experiment(
    dataset: Dataset,
    request: RunRequest,
    sink: Sink,
    *,
    on_progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> ExperimentOutcome:
    """Run (or resume) one run per mode; each finished batch is written to the sink at once."""
    from engine.generate import GenerationConfig, iter_batches
    from engine.models import load_model

    plans = _plan(dataset, request, sink)
    sink.put_items(dataset.sha, dataset.items)
    todo: dict[str, list[Item]] = {}
    for plan in plans:
        if plan.existing_status == "complete":
            todo[plan.run_id] = []
            continue
        done = sink.done_item_ids(plan.run_id) if plan.existing_status else set()
        todo[plan.run_id] = [it for it in dataset.items if it.id not in done]
    if on_total:
        on_total(sum(len(v) for v in todo.values()))

    loaded = None
    if any(todo.values()):
        loaded = load_model(
            request.model,
            quantize=request.quantize,
            device=request.device,
            hf_token=request.hf_token,
            dtype=request.dtype,
        )
    gen_config = GenerationConfig(
        max_new_tokens=request.max_new_tokens,
        do_sample=request.do_sample,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k_sampling=request.top_k_sampling,
        seed=request.seed,
        batch_size=request.batch_size,
        top_n_logprobs=request.top_n_logprobs,
    )

    outcomes = []
    for plan in plans:
        items = todo[plan.run_id]
        if plan.existing_status == "complete":
            outcomes.append(RunOutcome(plan.run_id, plan.mode, "already complete", len(dataset.items), 0, 0))
            continue
        spec = RunSpec(
            run_id=plan.run_id,
            experiment_id=plan.experiment_id,
            config_hash=plan.config_hash,
            model=request.label,
            model_revision=getattr(loaded, "revision", None),
            quantization=getattr(loaded, "quantization", request.quantize),
            dtype=getattr(loaded, "dtype", request.dtype),
            device=getattr(loaded, "device", request.device),
            dataset=dataset.source,
            dataset_sha=dataset.sha,
            metadata_type=request.prompt.metadata.name if request.prompt.metadata else None,
            rag_mode=plan.mode,
            seed=request.seed,
            prompt_version=PROMPT_VERSION,
            git_sha=git_sha(),
            library_versions=library_versions(),
            config=plan.config,
            n_items=len(dataset.items),
        )
        sink.start_run(spec)
        n_generated = n_cited = 0
        try:
            if items:
                mode_config = replace(request.prompt, mode=plan.mode)
                prompts = [build_prompt(item, mode_config) for item in items]
                for batch in iter_batches(loaded, [p.text for p in prompts], gen_config):
                    generations = [make_generation(items[i], prompts[i], out) for i, out in batch]
                    sink.write_batch(plan.run_id, generations)
                    n_generated += len(generations)
                    n_cited += sum(1 for g in generations if g.citations)
                    if on_progress:
                        on_progress(len(generations))
        except BaseException:
            # KeyboardInterrupt included: the run must never look complete when it is not.
            sink.finish_run(plan.run_id, "failed")
            raise
        sink.finish_run(plan.run_id, "complete")
        outcomes.append(RunOutcome(plan.run_id, plan.mode, "complete", len(dataset.items), n_generated, n_cited))
    return ExperimentOutcome(
        plans[0].experiment_id if plans else "",
        tuple(outcomes),
        request.label,
        getattr(loaded, "quantization", None),
    )
