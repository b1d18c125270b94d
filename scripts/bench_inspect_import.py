"""Time and memory of `python -m engine import --inspect LOG` on a large Inspect log.

    python scripts/bench_inspect_import.py --samples 200000 --folder /tmp/bench-inspect

1. Runs the pattrieval/gender task once through Inspect's runner (its mock model, three items
   of three documents) for a log Inspect itself wrote.
2. Writes a log of N samples from it: each sample is the template's with its own id, question,
   documents and answers (seeded), the header's sample list made to match; members deflated, as
   Inspect reads them.
3. Imports that log into a new store in a child process and prints the wall time, the child's
   peak resident memory (ru_maxrss), the runs it made and the machine's load average before and
   after (wall time on a shared machine means little without it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def template_log(folder: Path) -> Path:
    """A three-sample log of our task, written by Inspect's runner."""
    sys.path.insert(0, str(ROOT))
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    import engine.inspect_tasks.registry  # noqa: F401

    data = folder / "template.jsonl"
    rows = [{"id": f"t{i}", "question": f"question {i}", "answers": [f"answer {i}"],
             "documents": [{"id": f"t{i}-d{n}", "title": f"title {n}", "text": f"document {n} of item {i}",
                            "relevant": n == 1} for n in range(1, 4)]} for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def answer(*args: object) -> ModelOutput:
        output = ModelOutput.from_content(model="mockllm/model", content="answer [1]")
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    [log] = inspect_eval("pattrieval/gender", model=get_model("mockllm/model", custom_outputs=answer),
                         task_args={"dataset": str(data)}, log_dir=str(folder / "template"), display="none")
    assert log.status == "success", log.error
    return Path(log.location)


def write_large_log(template: Path, out: Path, n: int, seed: int = 0) -> None:
    """N samples made from the template's first one, streamed into a new .eval file."""
    rng = random.Random(seed)
    with zipfile.ZipFile(template) as src:
        import zstandard  # Inspect's own members are zstd; ours are deflated, which it reads too

        def read(name: str) -> bytes:
            info = src.getinfo(name)
            raw = src.open(info) if info.compress_type != 93 else None
            if raw is not None:
                return raw.read()
            with open(template, "rb") as f:  # zipfile cannot inflate zstd: read the member's bytes
                f.seek(info.header_offset)
                head = f.read(30)
                skip = int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
                f.seek(info.header_offset + 30 + skip)
                return zstandard.ZstdDecompressor().decompress(f.read(info.compress_size),
                                                               max_output_size=info.file_size)

        first = next(name for name in src.namelist() if name.startswith("samples/"))
        sample = json.loads(read(first))
        header = json.loads(read("header.json"))
        start = json.loads(read("_journal/start.json"))
    sample["events"], sample["attachments"], sample["store"] = [], {}, {}
    ids = [f"s{i:07d}" for i in range(n)]
    header["eval"]["dataset"]["sample_ids"] = ids
    header["eval"]["dataset"]["samples"] = n
    start["eval"]["dataset"]["sample_ids"] = ids
    start["eval"]["dataset"]["samples"] = n
    if header.get("results"):
        header["results"]["total_samples"] = header["results"]["completed_samples"] = n
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        dst.writestr("_journal/start.json", json.dumps(start))
        for i, sample_id in enumerate(ids):
            meta = sample["metadata"]
            meta["question"] = f"who wrote text number {i}"
            meta["documents"] = [{"id": f"{sample_id}-d{k}", "title": f"title {k}",
                                  "text": f"document {k} of sample {i}: " + "words " * 40,
                                  "relevant": k == 1 + i % 3} for k in range(1, 4)]
            meta["answers"] = {m: f"answer {i} [{rng.randint(1, 3)}]" for m in ("vanilla", "base", "cf")}
            meta["shown_doc_ids"] = {m: [d["id"] for d in meta["documents"]] for m in ("vanilla", "base", "cf")}
            sample["id"] = sample_id
            sample["input"] = meta["question"]
            sample["target"] = [f"answer {i}"]
            dst.writestr(f"samples/{sample_id}_epoch_1.json", json.dumps(sample))
        dst.writestr("header.json", json.dumps(header))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench-inspect"))
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    log = args.folder / f"large-{args.samples}.eval"
    db = args.folder / f"store-{args.samples}.duckdb"
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    if not log.exists():
        started = time.perf_counter()
        write_large_log(template_log(args.folder), log, args.samples)
        print(f"wrote {log} ({log.stat().st_size / 1e6:.0f} MB, {args.samples:,} samples) in "
              f"{time.perf_counter() - started:.0f} s")
    load_before = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "engine", "import", "--inspect", str(log), "--db", str(db)],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(done.stdout.strip() or done.stderr.strip())
    print(f"import --inspect: {args.samples:,} samples, {wall:.0f} s wall, peak resident memory {peak_mb:.0f} MB, "
          f"exit {done.returncode}")
    print("load average (1, 5, 15 min): before " + ", ".join(f"{x:.1f}" for x in load_before)
          + "; after " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
