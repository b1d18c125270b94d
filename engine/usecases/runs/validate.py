"""Check a dataset as `run` would read it and describe its shape, writing nothing:
`python -m engine validate`. Imports neither torch nor the store.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.datasets.data import describe_skipped, load_dataset


@dataclass(frozen=True)
class DatasetShape:
    """What a run would get from a dataset: per valid item, the documents shown (the first
    `top_k`, or all) and how many of them hold the answer; the skipped items, described."""

    source: str
    layout: str
    n_items: int
    sha: str
    documents: tuple[int, ...]  # per item, the documents shown
    relevant: tuple[int, ...]  # per item, the relevant documents among them
    skipped: tuple[str, ...]  # one line per invalid item (only with skip_invalid)


def validate(dataset: str, *, skip_invalid: bool = False, top_k: int | None = None) -> DatasetShape:
    """Load `dataset` as `run` would (the loader's one-line UserError when it would not run) and
    describe it; `top_k` counts only each item's first K documents."""
    ds = load_dataset(dataset, skip_invalid=skip_invalid, top_k=top_k)
    shown = [item.documents[:top_k] if top_k else item.documents for item in ds.items]
    return DatasetShape(
        source=ds.source, layout=ds.layout, n_items=len(ds.items), sha=ds.sha,
        documents=tuple(len(docs) for docs in shown), relevant=tuple(sum(d.relevant for d in docs) for docs in shown),
        skipped=tuple(describe_skipped(ds.source, s) for s in ds.skipped),
    )
