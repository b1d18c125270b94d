"""Stores of several models' base and cf runs with chosen citations, written through the RunStore as
a real run writes them (no model needed): the leaderboard's and the Every Eval Ever export's tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engine.types import Citation, Document, Generation, Item, RunSpec, TokenLogprob
from store import Database, RunStore

SHA = "sha-board"
DATASET = "/somewhere/data/board.jsonl"


def items(n: int) -> list[Item]:
    """n items of two documents each, the second relevant."""
    return [
        Item(id=f"q{i:03d}", question=f"Who wrote book {i}?", answers=(f"Author {i}",),
             documents=(Document(id=f"q{i:03d}-d1", text="A poet wrote poems.", relevant=False),
                        Document(id=f"q{i:03d}-d2", text=f"Author {i} wrote it.", relevant=True)))
        for i in range(n)
    ]


def generation(item_id: str, cites: tuple[int, ...], answer: str | None = None) -> Generation:
    """An answer citing positions `cites` (1: the non-relevant document, 2: the relevant one)."""
    shown = (f"{item_id}-d1", f"{item_id}-d2")
    text = answer if answer is not None else "Author " + (item_id[1:].lstrip("0") or "0") + "".join(f" [{p}]" for p in cites)
    return Generation(
        item_id=item_id, prompt=f"Prompt of {item_id}", answer=text, shown_doc_ids=shown, finish_reason="stop",
        n_prompt_tokens=10, tokens=(TokenLogprob(1, "x", -0.5, ()),),
        citations=tuple(Citation(index=k, position=p, doc_id=shown[p - 1], relevant=p == 2, probability=0.5)
                        for k, p in enumerate(cites)),
    )


def add_run(db: Path, run_id: str, experiment: str, mode: str, model: str, cites: Sequence[tuple[int, ...]], *,
            metadata: str = "gender", rerun_of: str | None = None, n_items: int | None = None) -> None:
    """One complete run answering item i with citations cites[i]."""
    store = RunStore(db, timeout_s=10)
    n = len(cites)
    config = {"rerun": {"of": rerun_of, "k": 1}} if rerun_of else {}
    with store.database.session():  # four writes, one open of the file
        store.put_items(SHA, items(n_items or n))
        store.start_run(RunSpec(run_id, experiment, f"h-{run_id}", model, None, "4bit", "bfloat16", "cpu", DATASET,
                                SHA, None if mode == "vanilla" else metadata, mode, 0, "v1", None, {"torch": "2"},
                                config, n))
        store.write_batch(run_id, [generation(f"q{i:03d}", c) for i, c in enumerate(cites)])
        store.finish_run(run_id, "complete")


def add_experiment(db: Path, experiment: str, model: str, base: Sequence[tuple[int, ...]],
                   cf: Sequence[tuple[int, ...]], *, vanilla: Sequence[tuple[int, ...]] | None = None,
                   metadata: str = "gender", rerun_of: str | None = None) -> None:
    """An experiment's runs: vanilla where given, base and cf."""
    with Database(db, 10).session():  # every run's writes on one open of the file
        if vanilla is not None:
            add_run(db, f"{experiment}-vanilla", experiment, "vanilla", model, vanilla, metadata=metadata,
                    rerun_of=rerun_of)
        add_run(db, f"{experiment}-base", experiment, "base", model, base, metadata=metadata, rerun_of=rerun_of)
        add_run(db, f"{experiment}-cf", experiment, "cf", model, cf, metadata=metadata, rerun_of=rerun_of)


def biased(n: int, k: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(base, cf) citations of n items where base cites the relevant document on every item and cf
    on all but the first k: CAB precision = 100 k / n."""
    base = [(2,)] * n
    cf = [(1,)] * k + [(2,)] * (n - k)
    return base, cf
