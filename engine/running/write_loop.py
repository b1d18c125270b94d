"""The one write loop: store each finished batch as it arrives, whichever backend made it.

It runs on the driver, the only process that touches the store. It
- drops item ids a run already holds: Ray may run a batch again after its actor died, and the
  first copy to arrive is the one kept;
- marks a run complete once it holds all its items (after the cancel check of its last batch,
  so a run cancelled there ends failed and resumable, as it always did);
- refuses a result whose worker loaded the model differently from what the run recorded;
- and, on any error (Ctrl-C included), marks every run still open failed, so none looks
  complete or stays claimed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from engine.errors import RunCancelled, UserError
from engine.prompting.citations import DEFAULT_CITATION_SYNTAX, citation_probabilities, parse_citation_marks
from engine.prompting.prompts import PromptConfig
from engine.running.backends import BatchResult, PlannedBatch
from engine.sink import Sink
from engine.types import Citation, Generation, GenerationOutput, Item, Prompt, RunStatus


@dataclass(frozen=True)
class Unplanned:
    """An item's prompt before it is built: its run's prompt settings and its 0-based place in
    the dataset (a many-valued label rotation is keyed by it). engine.running.runner builds
    every prompt once, just before planning the batches, and puts the Prompt in its place."""

    config: PromptConfig
    index: int


@dataclass
class OpenRun:
    """A claimed run while the loop writes it: what it still lacks and what it wrote."""

    run_id: str
    mode: str
    n_items: int
    todo: dict[str, tuple[Item, Prompt | Unplanned]]  # item id -> the item and its prompt, not yet stored
    n_generated: int = 0
    n_cited: int = 0
    finished: bool = field(default=False)
    citation_syntax: str = DEFAULT_CITATION_SYNTAX  # how its answers' citations are read (engine.prompting.citations)


def write_loop(
    runs: Sequence[OpenRun],
    batches: Sequence[PlannedBatch],
    results: Iterable[BatchResult],
    sink: Sink,
    *,
    on_progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    fingerprint: tuple | None = None,
) -> None:
    """Write `results` of `batches` into `runs`; completes each run as it fills up."""
    by_id = {b.batch_id: b for b in batches}
    state = {r.run_id: r for r in runs}
    try:
        for run in runs:
            if not run.todo:
                _finish(sink, run, "complete")
        for result in results:
            if fingerprint is not None and result.fingerprint != fingerprint:
                raise UserError(
                    "a Ray worker loaded the model differently from the one the run recorded "
                    f"({_difference(fingerprint, result.fingerprint)}): the cluster's nodes differ; "
                    "give them the same image"
                )
            batch = by_id[result.batch_id]
            run = state[batch.run_id]
            if len(result.outputs) != len(batch.item_ids):
                raise RuntimeError(f"batch {batch.batch_id}: {len(result.outputs)} outputs for {len(batch.item_ids)} items")
            generations = []
            for item_id, output in zip(batch.item_ids, result.outputs, strict=True):
                pending = run.todo.pop(item_id, None)
                if pending is None:  # already written (a batch run twice)
                    continue
                item, prompt = pending
                if isinstance(prompt, Unplanned):
                    raise RuntimeError(f"run {run.run_id}: item {item_id} was generated before its prompt was built")
                generations.append(make_generation(item, prompt, output, run.citation_syntax))
            if generations:
                sink.write_batch(run.run_id, generations)
                run.n_generated += len(generations)
                run.n_cited += sum(1 for g in generations if g.citations)
                if on_progress:
                    on_progress(len(generations))
            if should_stop is not None and should_stop():
                raise RunCancelled(f"cancelled after {run.n_generated} answers of the {run.mode} run")
            if not run.todo and not run.finished:
                _finish(sink, run, "complete")
        missing = [r for r in runs if r.todo]
        if missing:
            raise RuntimeError(
                f"the backend ended with {sum(len(r.todo) for r in missing)} answers of the "
                f"{missing[0].mode} run not generated"
            )
    except BaseException:
        fail_open_runs(sink, runs)
        raise
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()  # stops a backend's pipeline when the loop ends early


def fail_open_runs(sink: Sink, runs: Sequence[OpenRun]) -> None:
    """Mark every run not yet finished failed: on any error, KeyboardInterrupt included, no
    claimed run may look complete or stay claimed. Called while an exception propagates.

    All in one transaction (Sink.fail_runs): on a full disk, failing them one by one left the
    first failed and the others 'running' (claimed by a process now gone)."""
    open_runs = [run for run in runs if not run.finished]
    if not open_runs:
        return
    try:
        sink.fail_runs([run.run_id for run in open_runs])
    except Exception:  # noqa: BLE001 - keep the first error; unreleased runs stay resumable
        return
    for run in open_runs:
        run.finished = True


def _finish(sink: Sink, run: OpenRun, status: RunStatus) -> None:
    sink.finish_run(run.run_id, status)
    run.finished = True


def _difference(expected: tuple, got: tuple | None) -> str:
    """The first field that differs, as 'dtype float32 here, bfloat16 there'."""
    if got is None:
        return "no report"
    # A worker of another version may report other fields: the common ones are compared.
    for (name, want), (_, have) in zip(expected, got, strict=False):
        if want != have:
            return f"{name} {want} recorded, {have} on a worker"
    return "fields differ"


def make_generation(item: Item, prompt: Prompt, output: GenerationOutput,
                    citation_syntax: str = DEFAULT_CITATION_SYNTAX) -> Generation:
    """A stored generation: the output plus its citations (read in `citation_syntax`) resolved
    against the shown order."""
    marks = parse_citation_marks(output.text, citation_syntax)
    probabilities = citation_probabilities(output, citation_syntax) if output.tokens else [None] * len(marks)
    relevant = {d.id: d.relevant for d in item.documents}
    citations = []
    for index, (mark, probability) in enumerate(zip(marks, probabilities, strict=True)):
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
        shown_labels=prompt.shown_labels,
    )
