"""Time a small run's writes as `run` makes them: start, one batch, and the completion that keeps
the run's derived values (store.kept_metrics), each on its own open of the store.

    python scripts/bench_finish.py                        # this tree's code
    python scripts/bench_finish.py --against HEAD~3       # side by side with a commit, rounds interleaved

A run's completion computes its metrics through the views once per kept table; for a small run
the planning of those queries, not their rows, is most of the cost, and every test store and
every small run pays it. `--against` checks the commit out in a temporary worktree and runs the
same measurement there in alternating rounds (the machine's load then falls on both alike), then
prints each side's median per phase and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(experiments: int, answers: int) -> dict[str, list[float]]:
    """Seconds per phase for `experiments` experiments of vanilla, base and cf runs of `answers`
    answers each, written to a new store in a temporary folder (the code imported is the one on
    sys.path: this tree's, or the other side's)."""
    from engine.types import Citation, Document, Generation, Item, RunSpec, TokenLogprob
    from store import RunStore

    def generation(item_id: str, position: int) -> Generation:
        shown = (f"{item_id}-d1", f"{item_id}-d2")
        return Generation(item_id=item_id, prompt="p", answer=f"An answer [{position}]", shown_doc_ids=shown,
                          finish_reason="stop", n_prompt_tokens=10, tokens=(TokenLogprob(1, "x", -0.5, ()),),
                          citations=(Citation(index=0, position=position, doc_id=shown[position - 1],
                                              relevant=position == 2, probability=0.5),))

    items = [Item(id=f"q{i:03d}", question=f"Question {i}?", answers=(f"Answer {i}",),
                  documents=(Document(id=f"q{i:03d}-d1", text="Not it.", relevant=False),
                             Document(id=f"q{i:03d}-d2", text=f"Answer {i}.", relevant=True)))
             for i in range(answers)]
    sha, dataset = "sha-bench", "/bench/data.jsonl"
    times: dict[str, list[float]] = {"start": [], "write": [], "finish": []}
    with tempfile.TemporaryDirectory() as folder:
        store = RunStore(Path(folder) / "bench.duckdb", timeout_s=30)
        store.put_items(sha, items)
        for e in range(experiments):
            for mode in ("vanilla", "base", "cf"):
                run_id = f"e{e}-{mode}"
                spec = RunSpec(run_id, f"e{e}", f"h-{run_id}", "m", None, "4bit", "bfloat16", "cpu", dataset, sha,
                               None if mode == "vanilla" else "gender", mode, 0, "v1", None, {}, {}, answers)
                cited = 1 if mode == "cf" else 2
                steps = (("start", lambda spec=spec: store.start_run(spec)),
                         ("write", lambda run_id=run_id, cited=cited: store.write_batch(
                             run_id, [generation(item.id, cited) for item in items])),
                         ("finish", lambda run_id=run_id: store.finish_run(run_id, "complete")))
                for phase, step in steps:
                    began = time.perf_counter()
                    step()
                    times[phase].append(time.perf_counter() - began)
    return times


def _side(code: Path, experiments: int, answers: int) -> dict[str, list[float]]:
    """One round of `measure` in a child process importing the code in `code`."""
    out = subprocess.run([sys.executable, __file__, "--json",
                          "--experiments", str(experiments), "--answers", str(answers)],
                         cwd=code, check=True, capture_output=True, text=True,
                         env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=4, help="experiments per round (3 runs each)")
    parser.add_argument("--answers", type=int, default=20, help="answers per run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side with --against")
    parser.add_argument("--against", metavar="REV", help="a commit to measure side by side with this tree")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.experiments, args.answers)))
        return
    if not args.against:
        times = measure(args.experiments, args.answers)
        for phase, values in times.items():
            print(f"{phase:7s} median {1000 * statistics.median(values):7.1f} ms over {len(values)} runs")
        return
    with tempfile.TemporaryDirectory() as folder:
        other = Path(folder) / "other"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), args.against],
                       check=True, capture_output=True)
        try:
            sides: dict[str, dict[str, list[float]]] = {"this tree": {}, args.against: {}}
            for _ in range(args.rounds):
                for name, code in (("this tree", ROOT), (args.against, other)):
                    for phase, values in _side(code, args.experiments, args.answers).items():
                        sides[name].setdefault(phase, []).extend(values)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=True)
    print(f"{'phase':7s} {'this tree':>12s} {args.against:>12s}  ratio (this / other)")
    for phase in sides["this tree"]:
        mine, theirs = (statistics.median(sides[n][phase]) for n in sides)
        print(f"{phase:7s} {1000 * mine:9.1f} ms {1000 * theirs:9.1f} ms  {mine / theirs:.2f}")


if __name__ == "__main__":
    main()
