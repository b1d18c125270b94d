"""`python -m engine import`: store answers made by another system as a run, for evaluation.

The answers file is JSONL, one object per answer: {"item_id", "answer", "shown_doc_ids"?}.
`shown_doc_ids` is the order the documents were shown in ([1] is the first); without it the
dataset's ranked order is assumed. Every row is validated before anything is written: the
first bad row stops the import with one line naming the file, the line and the problem.

Imported runs have quantization 'imported', no prompt, no tokens and no citation
probabilities. Three imports with one --experiment and modes vanilla, base and cf form an
experiment that `python -m engine bias` reads. The import is engine.usecases.storage.import_answers';
here, the options and the line printed.

`--inspect LOG` reads an Inspect AI log instead (engine.usecases.storage.import_inspect): the samples
carry the documents and the answers, so --dataset and --answers are not given, and one import
stores every mode the samples answer (docs/inspect.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.bounds import MAX_MODEL_CHARS, check_name
from engine.commands._options import add_db_arg
from engine.errors import UserError
from engine.paths import default_db_path
from engine.types import MODES
from engine.usecases.runs.run_options import OPTIONS
from engine.usecases.storage.import_answers import ImportRequest, import_answers, import_metadata
from engine.usecases.storage.import_inspect import InspectImportRequest, import_inspect


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="store answers from another system as a run, to evaluate")
    p.add_argument("--dataset", default=None, help="the dataset the answers are for (same formats as `run`; 'sample' = the bundled sample)")
    p.add_argument("--answers", default=None, help="JSONL of {item_id, answer, shown_doc_ids?}")
    p.add_argument("--inspect", default=None, metavar="LOG",
                   help="an Inspect AI log (.eval or .json) whose samples carry the documents and the answers, "
                   "instead of --dataset and --answers: one run per mode answered (needs pattrieval[inspect])")
    p.add_argument("--name", default=None, help="the model name to store (default: imported; with --inspect, the log's model)")
    p.add_argument("--mode", choices=MODES, default="vanilla",
                   help="RAG mode the answers were made in (with --inspect: of samples that carry one answer)")
    p.add_argument("--experiment", default=None, help="experiment id to join (default: a new one)")
    p.add_argument("--metadata", default=None, help="metadata type: hai, gender, race or a custom name")
    p.add_argument("--label-a", default=None, help="custom type: label on relevant documents in base (the side CAB > 0 favours)")
    p.add_argument("--label-b", default=None, help="custom type: label on relevant documents in cf")
    p.add_argument("--consideration", default=None, help="custom type, optional: the consideration sentence, stored for reference (import renders no prompt)")
    p.add_argument(
        "--citation-syntax", choices=OPTIONS["citation_syntax"].choices, default=None,
        help="how the answers' citations are read: ours ([1], [1,2], [1-3] ...; a number not shown "
        "counts against precision) or paper (the PAttriEval code's [n] only, numbers not shown "
        "ignored), to reproduce the paper's numbers (default: ours; with --inspect, the log's task argument, else ours)",
    )
    add_db_arg(p)
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.api import load_dataset

    meta = None
    if args.metadata or args.label_a or args.label_b or args.consideration:
        if not args.metadata:
            raise UserError("--label-a, --label-b and --consideration need --metadata NAME")
        meta = import_metadata(args.metadata, args.label_a, args.label_b, args.consideration)
    if args.inspect is not None:
        return _main_inspect(args, meta)
    missing = [option for option, value in (("--dataset", args.dataset), ("--answers", args.answers)) if value is None]
    if missing:
        raise UserError(f"import needs {' and '.join(missing)} (or --inspect LOG)")
    if args.mode != "vanilla" and meta is None:
        raise UserError(f"--mode {args.mode} needs --metadata (hai, gender, race or a custom type)")

    name = check_name((args.name if args.name is not None else "imported").strip(), "--name", MAX_MODEL_CHARS)
    if not name:
        raise UserError("--name must not be empty")
    if args.experiment is not None:
        check_name(args.experiment, "--experiment")

    dataset = load_dataset(args.dataset)
    path = Path(args.db) if args.db else default_db_path()
    result = import_answers(ImportRequest(dataset, Path(args.answers), path, name, args.mode, args.experiment, meta,
                                          citation_syntax=args.citation_syntax or "ours"))
    if result.already:
        print(f"already imported: run {result.run_id} (experiment {result.experiment_id}) in {path}")
        return 0
    note = f"; {result.n_missing} dataset items have no answer" if result.n_missing else ""
    print(
        f"imported {result.n_answers} answers ({result.n_cited} with a citation{note}) as run {result.run_id}, "
        f"experiment {result.experiment_id}, mode {args.mode}, model {name}, into {path}"
    )
    return 0


def _main_inspect(args: argparse.Namespace, meta: object) -> int:
    given = [option for option, value in (("--dataset", args.dataset), ("--answers", args.answers)) if value is not None]
    if given:
        raise UserError(f"--inspect reads the documents and the answers from the log; leave out {' and '.join(given)}")
    if args.experiment is not None:
        check_name(args.experiment, "--experiment")
    path = Path(args.db) if args.db else default_db_path()
    result = import_inspect(InspectImportRequest(Path(args.inspect), path, args.name, args.experiment, args.mode, meta,
                                                 args.citation_syntax))
    runs = ", ".join(f"{mode} {run_id}" for mode, run_id in result.run_ids.items())
    if result.already:
        print(f"already imported: runs {runs} (experiment {result.experiment_id}) in {path}")
        return 0
    cited = ", ".join(f"{n} in {mode}" for mode, n in result.n_cited.items())
    print(f"imported {result.n_samples} samples of task {result.task} (answers with a citation: {cited}) as runs "
          f"{runs}, experiment {result.experiment_id}, model {result.model}, into {path}")
    return 0
