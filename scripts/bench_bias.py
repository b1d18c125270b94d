"""Benchmark: `python -m engine bias` (whole process) vs the seed library's per-item sklearn loop.

Builds a synthetic dataset (default 2,000 items x 10 documents) and answers for the three RAG
modes in a temporary folder, imports them through `python -m engine import` into a fresh
DuckDB file, then times:
- ours: `python -m engine bias --experiment ID --db FILE` as a separate process, start-up,
  store reads, CAS/CAB with t-tests and 2,000 bootstrap resamples included (median of runs);
- seed: the seed library's evaluation loop, in this process, with its structure kept
  (cas_evaluation then cab_evaluation): per pair of runs and per item, both rows are scored
  with sklearn's accuracy_score and precision_recall_fscore_support. Its imports and file
  reading are not timed, which favours it.

Run: python scripts/bench_bias.py [--items 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for engine.prompting.citations in the seed-style loop
N_DOCS = 10


def make_dataset(path: Path, n_items: int, rng: random.Random) -> list[dict]:
    """A native-layout JSONL dataset with 1-2 relevant documents per item."""
    items = []
    for i in range(n_items):
        item_id = f"q{i:05d}"
        answer = f"answer {i}"
        relevant = set(rng.sample(range(N_DOCS), rng.choice((1, 1, 2))))
        docs = [
            {"id": f"{item_id}-d{j}", "title": f"doc {j}",
             "text": f"This document mentions {answer}." if j in relevant else f"Unrelated text {j} for {item_id}.",
             "relevant": j in relevant}
            for j in range(N_DOCS)
        ]
        items.append({"id": item_id, "question": f"question {i}?", "answers": [answer, f"Answer #{i}"], "documents": docs})
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return items


def make_answers(path: Path, items: list[dict], hit_rate: float, rng: random.Random) -> None:
    """Answers citing relevant documents with probability hit_rate, plus some noise citations."""
    lines = []
    for item in items:
        relevant = [j + 1 for j, d in enumerate(item["documents"]) if d["relevant"]]
        others = [j + 1 for j, d in enumerate(item["documents"]) if not d["relevant"]]
        cited = [n for n in relevant if rng.random() < hit_rate]
        cited += rng.sample(others, rng.choice((0, 0, 1, 2)))
        if rng.random() < 0.02:
            cited.append(N_DOCS + 3)  # out of range now and then
        rng.shuffle(cited)
        marks = "".join(f"[{n}]" for n in cited) if rng.random() < 0.7 else (f"[{', '.join(map(str, cited))}]" if cited else "")
        text = item["answers"][0] if rng.random() < 0.8 else "something else"
        lines.append(json.dumps({"item_id": item["id"], "answer": f"The answer is {text} {marks}."}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def seed_style(items: list[dict], answer_files: dict[str, Path]) -> tuple[float, dict[str, float]]:
    """The seed library's evaluation loop, timed, with its structure kept.

    Like the seed's cas_evaluation(vanilla, base) followed by cab_evaluation(base, cf): for each
    pair of runs and each item, both rows are scored with sklearn's accuracy_score and
    precision_recall_fscore_support(average='binary'), so base is scored twice.
    """
    import warnings

    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    warnings.filterwarnings("ignore", category=UndefinedMetricWarning)
    answers = {mode: [json.loads(line)["answer"] for line in f.read_text().splitlines()] for mode, f in answer_files.items()}
    from engine.prompting.citations import parse_citations

    def score(item: dict, text: str) -> tuple[float, float]:
        # Our parser (the seed's knows only "[n]") and our out-of-range rule (one extra false
        # positive per number not shown), so that both sides compute the same numbers.
        cited = set(parse_citations(text))
        y_true = [int(d["relevant"]) for d in item["documents"]]
        y_pred = [1 if j + 1 in cited else 0 for j in range(len(y_true))]
        extra = sum(1 for n in cited if not 1 <= n <= len(y_true))
        y_true, y_pred = y_true + [0] * extra, y_pred + [1] * extra
        accuracy_score(y_true, y_pred)  # computed and discarded, as the seed does
        p, r, _, _ = precision_recall_fscore_support(y_true, y_pred, average="binary", zero_division=0)
        return p, r

    started = time.perf_counter()
    diffs: dict[str, list[tuple[float, float]]] = {"cas": [], "cab": []}
    for measure, (a, b) in (("cas", ("vanilla", "base")), ("cab", ("base", "cf"))):
        for item, text_a, text_b in zip(items, answers[a], answers[b], strict=True):
            pa, ra = score(item, text_a)
            pb, rb = score(item, text_b)
            diffs[measure].append((abs(pa - pb), abs(ra - rb)) if measure == "cas" else (pa - pb, ra - rb))
    values = {f"{m}_{k}": 100 * statistics.fmean(d[i] for d in diffs[m]) for m in diffs for i, k in enumerate(("precision", "recall"))}
    return time.perf_counter() - started, values


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run `python -m engine ...` from the repository root; fail loudly."""
    done = subprocess.run([sys.executable, "-m", "engine", *cmd], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"python -m engine {' '.join(cmd)} failed:\n{done.stderr}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        dataset = tmpdir / "dataset.jsonl"
        items = make_dataset(dataset, args.items, rng)
        files = {}
        for mode, hit_rate in (("vanilla", 0.75), ("base", 0.80), ("cf", 0.72)):
            files[mode] = tmpdir / f"answers_{mode}.jsonl"
            make_answers(files[mode], items, hit_rate, rng)
        db = tmpdir / "bench.duckdb"
        for mode, f in files.items():
            run(["import", "--dataset", str(dataset), "--answers", str(f), "--mode", mode,
                 "--metadata", "gender", "--experiment", "bench", "--name", "synthetic", "--db", str(db)])

        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            done = run(["bias", "--experiment", "bench", "--db", str(db), "--json"])
            times.append(time.perf_counter() - started)
        ours = statistics.median(times)
        result = {(r["measure"], r["metric"]): r["value"] for r in json.loads(done.stdout)["results"]}

        seed_time, seed_values = seed_style(items, files)

    calls = 2 * 2 * 2 * args.items  # 2 pairs x 2 rows x (accuracy + precision/recall/F1)
    print(f"items: {args.items} x 3 modes (vanilla, base, cf), imported through `python -m engine import`")
    print(f"ours: python -m engine bias (whole process): median {ours:.3f} s over {args.repeats} runs "
          f"(min {min(times):.3f} s, max {max(times):.3f} s)")
    print(f"seed: per-item sklearn loop, {calls} calls: {seed_time:.2f} s ({1000 * seed_time / calls:.2f} ms per call)")
    print(f"ratio: {seed_time / ours:.1f}x")
    print(f"check: CAB precision ours {result[('CAB', 'precision')]:.2f} vs seed-style {seed_values['cab_precision']:.2f}; "
          f"CAS recall ours {result[('CAS', 'recall')]:.2f} vs seed-style {seed_values['cas_recall']:.2f}")


if __name__ == "__main__":
    main()
