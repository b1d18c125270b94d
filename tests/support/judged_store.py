"""A store whose answers cite documents, judged by two model judges (verifications rows written
directly: the real judges are tested in tests/engine/judges/test_verify.py), for the import-labels and
agreement tests. Built once per module (under a second), copied per test."""

from __future__ import annotations

import random
from pathlib import Path

RUN_ITEMS = 12
CITED = (1, 2, 3, 4, 5)  # answer i cites [1], [2] and [3 + i % 3]
LLM, NLI = "judge/llm", "judge/nli"


def cited(i: int) -> tuple[int, ...]:
    return (1, 2, 3 + i % 3)


def build(db: Path) -> dict:
    """The store at `db`: experiment 'exp' (named 'pilot') with a vanilla run of RUN_ITEMS answers,
    and the verdicts of LLM (two of them unparsed) and NLI on every cited document. Returns
    {'run': run id, 'items': item ids, 'llm': {(item, position): class}, 'nli': {...}}."""
    from engine import api
    from engine.types import Verification
    from store.db import connect, utc_now
    from store.verification_store import VerificationStore

    data = api.load_dataset("sample")
    items = [it.id for it in data.items[:RUN_ITEMS]]
    answers = tuple({"item_id": item, "answer": "It is so " + "".join(f"[{p}]" for p in cited(i)) + "."}
                    for i, item in enumerate(items))
    run = api.import_answers(api.ImportRequest(data, answers, db, experiment="exp")).run_id
    with connect(db) as conn:
        conn.execute("UPDATE experiments SET name = 'pilot' WHERE experiment_id = 'exp'")
        conn.execute("INSERT INTO judges VALUES (?, 'nli', 'tiny/nli', '{}', '{}', ?)", [NLI, utc_now()])
    rng = random.Random(7)
    verdicts: dict[str, dict[tuple[str, int], str]] = {LLM: {}, NLI: {}}
    rows = []
    for i, item in enumerate(items):
        for p in cited(i):
            llm = rng.choice(("attributable", "attributable", "extrapolatory", "contradictory"))
            if (i, p) in ((0, 1), (5, 2)):
                llm = "unparsed"
            # NLI agrees with the LLM judge most of the time
            nli = llm if llm != "unparsed" and rng.random() < 0.7 else rng.choice(("attributable", "extrapolatory"))
            for judge, label in ((LLM, llm), (NLI, nli)):
                verdicts[judge][(item, p)] = label
                rows.append(Verification(run, item, 0, p, f"{item}-d{p}", judge, "claim", label, label,
                                         None, None, None))
    VerificationStore(db, timeout_s=10).write_batch(rows)
    return {"run": run, "items": items, "llm": verdicts[LLM], "nli": verdicts[NLI]}


def dump(db: Path) -> list:
    """Every row of the tables an import or a merge may write, for before/after comparisons."""
    from store.db import connect

    with connect(db, read_only=True) as conn:
        return [conn.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("judges", "judge_labels", "verifications", "runs", "generations", "citations")]
