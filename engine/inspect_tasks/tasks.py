"""PAttriEval's Inspect tasks: each sample is one dataset item, answered in vanilla, base and cf
with our prompts (engine.prompting.prompts, Prompts 1 and 2), scored by engine.inspect_tasks.scoring.

    inspect eval pattrieval/gender --model hf/path/to/model -T dataset=data/sample_nq.jsonl
    inspect eval pattrieval/custom --model openai/served -T label_a="a nurse" -T label_b="a doctor"

Each sample's metadata carries what an import needs to store it as runs of ours
(`python -m engine import --inspect LOG`): the question, the documents in ranked order with their
ids and relevance, the label type, and, once answered, each mode's answer and the ids of the
documents it was shown, in the order shown.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageUser, GenerateConfig, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver

from engine.datasets.data import load_dataset  # engine.api.load_dataset; the API sits above the use cases
from engine.inspect_tasks.scoring import ANSWERS_KEY, SHOWN_KEY, citation_scorer
from engine.prompting.citations import check_citation_syntax
from engine.prompting.prompts import METADATA_TYPES, MetadataType, PromptConfig, build_prompt, metadata_type
from engine.types import MODES, Document, Item

# The provider's own sampling settings stand (Inspect's HF provider refuses temperature 0, and
# greedy is its default); a user's --max-tokens overrides this cap.
DEFAULT_CONFIG = GenerateConfig(max_tokens=256)


def item_sample(item: Item, index: int, metadata_type: Any) -> Sample:
    """One dataset item as an Inspect sample: the question as input, the gold answers as target."""
    return Sample(
        id=item.id,
        input=item.question,
        target=list(item.answers),
        metadata={
            "question": item.question,
            "documents": [{"id": d.id, "title": d.title, "text": d.text, "relevant": d.relevant}
                          for d in item.documents],
            "metadata_type": asdict(metadata_type),
            "index": index,
        },
    )


def sample_item(sample_id: Any, metadata: dict[str, Any], gold: Any) -> Item:
    """The item back from a sample this module made."""
    docs = tuple(Document(d["id"], d["text"], bool(d["relevant"]), d.get("title") or "") for d in metadata["documents"])
    answers = tuple(gold) if isinstance(gold, list) else (gold,)
    return Item(str(sample_id), metadata["question"], answers, docs)


@solver
def three_modes(top_k: int | None = None) -> Solver:
    """Answers the sample's item in vanilla, base and cf, one generation each, with our prompts;
    the vanilla answer is the sample's output, all three go in its metadata."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        meta = state.metadata["metadata_type"]
        labels = MetadataType(**{**meta, "extra_labels": tuple(meta.get("extra_labels") or ())})
        item = sample_item(state.sample_id, state.metadata, state.target.target)
        model = get_model()
        answers: dict[str, str] = {}
        shown: dict[str, list[str]] = {}
        for mode in MODES:
            config = PromptConfig(mode=mode, metadata=None if mode == "vanilla" else labels, top_k=top_k)
            prompt = build_prompt(item, config, state.metadata["index"])
            output = await model.generate([ChatMessageUser(content=prompt.text)])
            answers[mode] = output.completion
            shown[mode] = list(prompt.shown_doc_ids)
            if mode == "vanilla":  # the transcript Inspect shows: Prompt 1 in place of the bare question
                state.messages = [ChatMessageUser(content=prompt.text), output.message]
                state.output = output
        state.metadata[ANSWERS_KEY] = answers
        state.metadata[SHOWN_KEY] = shown
        return state

    return solve


def pattrieval_task(metadata_type: Any, dataset: str, limit: int | None, top_k: int | None,
                    citation_syntax: str, skip_invalid: bool = False) -> Task:
    """The task for one label type over a dataset of ours (a path, or "sample": the bundled one);
    `skip_invalid` leaves out items that `run --skip-invalid` would (none relevant in the top k, say)."""
    check_citation_syntax(citation_syntax)
    data = load_dataset(dataset, limit=limit, top_k=top_k, skip_invalid=skip_invalid)
    samples = [item_sample(item, index, metadata_type) for index, item in enumerate(data.items)]
    return Task(
        dataset=MemoryDataset(samples, name=data.source.rsplit("/", 1)[-1]),
        solver=three_modes(top_k),
        scorer=citation_scorer(citation_syntax),
        config=DEFAULT_CONFIG,
        metadata={"pattrieval": {"dataset": data.source, "dataset_sha": data.sha, "top_k": top_k,
                                 "citation_syntax": citation_syntax}},
    )


def _built_in(name: str, dataset: str, limit: int | None, top_k: int | None, citation_syntax: str,
              skip_invalid: bool) -> Task:
    return pattrieval_task(METADATA_TYPES[name], dataset, limit, top_k, citation_syntax, skip_invalid)


@task
def hai(dataset: str = "sample", limit: int | None = None, top_k: int | None = None,
        citation_syntax: str = "ours", skip_invalid: bool = False) -> Task:
    """Labels 'written by a human' (relevant documents in base) and 'written by an LLM'."""
    return _built_in("hai", dataset, limit, top_k, citation_syntax, skip_invalid)


@task
def gender(dataset: str = "sample", limit: int | None = None, top_k: int | None = None,
           citation_syntax: str = "ours", skip_invalid: bool = False) -> Task:
    """Labels 'written by a woman' (relevant documents in base) and 'written by a man'."""
    return _built_in("gender", dataset, limit, top_k, citation_syntax, skip_invalid)


@task
def race(dataset: str = "sample", limit: int | None = None, top_k: int | None = None,
         citation_syntax: str = "ours", skip_invalid: bool = False) -> Task:
    """Labels 'written by a white person' (relevant documents in base) and 'written by a Black person'."""
    return _built_in("race", dataset, limit, top_k, citation_syntax, skip_invalid)


@task
def custom(label_a: str, label_b: str, consideration: str, name: str = "custom", dataset: str = "sample",
           limit: int | None = None, top_k: int | None = None, citation_syntax: str = "ours",
           skip_invalid: bool = False) -> Task:
    """A label pair of your own: label A on relevant documents in base (the side CAB > 0 favours),
    label B in cf, and the consideration sentence added to the instruction."""
    return pattrieval_task(metadata_type(name, label_a, label_b, consideration), dataset, limit, top_k,
                           citation_syntax, skip_invalid)


TASKS = {"hai": hai, "gender": gender, "race": race, "custom": custom}
