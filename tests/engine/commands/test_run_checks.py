"""`run` checks everything before it writes: bad options, unknown models, a missing GPU and prompts
too long for the model leave the database absent or byte-for-byte unchanged."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine.__main__ import main as cli
from engine.commands import run as run_command
from engine.datasets.data import load_dataset
from engine.generation.models import context_length
from engine.running.experiment import config_hash
from engine.running.run_request import run_config
from engine.usecases.runs.run import ExperimentRequest, run_experiment
from tests.support.helpers import digest

LONG_TEXT = " ".join(f"alpha{i % 97} beta gamma" for i in range(4000))  # far past 8,192 tokens


def make_dataset(path: Path, n: int, *, long_ids: tuple[str, ...] = ()) -> Path:
    rows = []
    for i in range(n):
        item_id = f"q{i}"
        docs = [{"text": f"Topic {i}, passage {j}.", "relevant": j == 0} for j in range(3)]
        if item_id in long_ids:
            docs[2]["text"] = LONG_TEXT  # the third document: --top-k 2 leaves it out
        rows.append({"id": item_id, "question": f"what is topic {i}", "answers": [str(i)], "documents": docs})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def args_for(model_dir, dataset: Path, db: Path, *extra: str) -> list[str]:
    return ["run", "--model", str(model_dir), "--dataset", str(dataset), "--db", str(db), "--modes", "vanilla,base",
            "--max-new-tokens", "2", "--batch-size", "4", "--quantize", "none", "--device", "cpu", *extra]


def stored(db: Path, sql: str):
    from store import connect

    with connect(db, read_only=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture(scope="module")
def existing_db(tmp_path_factory, tiny_llama_dir):
    """A database holding one finished experiment, made by `run` itself."""
    folder = tmp_path_factory.mktemp("existing")
    data = make_dataset(folder / "d.jsonl", 2)
    db = folder / "runs.duckdb"
    assert cli(args_for(tiny_llama_dir, data, db)) == 0
    return db


FAILURES = {
    "unknown local model": (["--model", "{tmp}/no-such-model"], "unknown model"),
    "unknown hub model": (["--model", "nobody-here/no-such-model-xyz"], "unknown model 'nobody-here/no-such-model-xyz'"),
    "seed too large": (["--seed", str(2**31)], "--seed must be between 0 and 2147483647, not 2147483648"),
    "negative seed": (["--seed", "-1"], "--seed must be between 0 and 2147483647"),
    "temperature nan": (["--sample", "--temperature", "nan"], "--temperature must be a finite number above 0, not nan"),
    "temperature inf": (["--sample", "--temperature", "inf"], "--temperature must be a finite number above 0, not inf"),
    "top-p nan": (["--sample", "--top-p", "nan"], "--top-p must be in (0, 1], not nan"),
    # Greedy decoding would ignore them, and the run would be stored as greedy.
    "temperature without --sample": (["--temperature", "0.7"], "--temperature 0.7 needs --sample"),
    "top-p without --sample": (["--top-p", "0.9"], "--top-p 0.9 needs --sample"),
    "sample-top-k without --sample": (["--sample-top-k", "5"], "--sample-top-k 5 needs --sample"),
    "temperature without --sample, a grid": (["--top-k", "1,2", "--temperature", "0.7"], "--temperature 0.7 needs --sample"),
    "metadata typo": (["--metadata", "gendr"], "is not built in (hai, gender, race, publisher); define it with "
                      "--label-a, --label-b and --consideration; did you mean gender?"),
    "metadata typo in a list": (["--metadata", "race,gendr"], "did you mean gender?"),
    "custom type without --label-b": (["--metadata", "expertise", "--label-a", "an expert", "--consideration", "c"],
                                      "metadata type 'expertise': --label-b is missing"),
    "custom type with one label": (["--metadata", "expertise", "--label-a", "an expert"],
                                   "metadata type 'expertise': --label-b and --consideration are missing"),
    "threads zero": (["--threads", "0"], "--threads must be between 1 and 1024, not 0"),
    "top-logprobs huge": (["--top-logprobs", "1000000000"], "--top-logprobs must be between 0 and 20, not 1000000000"),
    "empty experiment name": (["--experiment", " "], "--experiment must be 1 to 100 printable characters"),
    "unknown mode": (["--modes", "vanilla,fancy"], "--modes: unknown mode(s) fancy"),
    "prompt too long": (["--dataset", "{long}"], "item 'q1': prompt of "),
    # Refused by the prompt-length check here, or by the dataset loader if it bounds questions.
    "10 MB question": (["--dataset", "{huge}"], "item 'huge'"),
    "other experiment model": (["--experiment", "{named}", "--model", "{tmp}/no-such-model"], "uses model"),
}
if not torch.cuda.is_available():
    FAILURES["no GPU"] = (["--device", "cuda:0"], "no CUDA GPU is available")


@pytest.mark.parametrize(
    ("case", "db_state"),
    [(case, state) for case in sorted(FAILURES) for state in ("absent", "existing")
     if state == "existing" or "{named}" not in " ".join(FAILURES[case][0])],
)
def test_a_run_that_cannot_start_writes_nothing(case, db_state, tmp_path, tiny_llama_dir, existing_db, capsys):
    extra, expected = FAILURES[case]
    data = make_dataset(tmp_path / "d.jsonl", 3)  # not the stored experiment's items: there is work to do
    long = make_dataset(tmp_path / "long.jsonl", 3, long_ids=("q1", "q2"))
    huge = tmp_path / "huge.jsonl"
    if case == "10 MB question":
        question = "why " * 2_500_000  # counted without tokenizing it: see check_prompt_lengths
        huge.write_text(json.dumps({"id": "huge", "question": question, "answers": ["x"],
                                    "documents": [{"text": "t", "relevant": True}]}) + "\n")
    db = tmp_path / "runs.duckdb"
    named = "never-made"
    if db_state == "existing":
        shutil.copyfile(existing_db, db)
        named = stored(db, "SELECT experiment_id FROM experiments")[0][0]
        before = digest(db)
    argv = args_for(tiny_llama_dir, data, db) + [
        a.format(tmp=tmp_path, long=long, huge=huge, named=named) for a in extra
    ]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert expected in lines[0]
    if db_state == "absent":
        assert not db.exists()
    else:
        assert digest(db) == before


def test_a_prompt_too_long_is_refused_with_a_count_or_skipped_and_recorded(tmp_path, tiny_llama_dir, capsys):
    data = make_dataset(tmp_path / "d.jsonl", 3, long_ids=("q1", "q2"))
    db = tmp_path / "runs.duckdb"
    assert cli(args_for(tiny_llama_dir, data, db)) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(
        r"error: item 'q1': prompt of \d{2},\d{3} tokens \+ 2 new tokens exceeds the model's context of 8,192; "
        r"2 items affected; use --top-k or --skip-invalid", err), err
    assert not db.exists()

    outcome = run_experiment(ExperimentRequest(dataclasses.replace(request_for(tiny_llama_dir, data, db), skip_invalid=True), load_dataset(data), db))
    assert [(s.where, s.item_id) for s in outcome.skipped] == [("item 2", "q1"), ("item 3", "q2")]
    assert stored(db, "SELECT DISTINCT n_items FROM runs") == [(1,)]
    assert stored(db, "SELECT DISTINCT item_id FROM generations") == [("q0",)]
    for (config,) in stored(db, "SELECT config_json FROM runs"):  # vanilla and base skip the same items
        skipped = json.loads(config)["skipped_prompts"]
        assert [(s["where"], s["item_id"]) for s in skipped] == [("item 2", "q1"), ("item 3", "q2")]
        assert "exceeds the model's context of 8,192" in skipped[0]["reason"]

    # The verdict is part of the run: a second command has nothing to do, flag or not.
    before = digest(db)
    assert cli(args_for(tiny_llama_dir, data, db)) == 0
    assert capsys.readouterr().out.startswith("already complete, nothing to do")
    assert digest(db) == before
    # The advice works: with the cut-off, every prompt fits (another experiment).
    assert cli(args_for(tiny_llama_dir, data, db, "--top-k", "2")) == 0
    assert stored(db, "SELECT count(*) FROM generations g JOIN runs r USING (run_id) WHERE r.n_items = 3") == [(6,)]


def test_skip_invalid_on_the_command_line_prints_what_it_skipped(tmp_path, tiny_llama_dir, capsys):
    data = make_dataset(tmp_path / "d.jsonl", 3, long_ids=("q1", "q2"))
    db = tmp_path / "runs.duckdb"
    assert cli(args_for(tiny_llama_dir, data, db, "--skip-invalid")) == 0
    out = capsys.readouterr().out
    assert "skipped 2 items (stored with the runs in config_json):\n  item 2: item 'q1': prompt of " in out
    assert stored(db, "SELECT DISTINCT n_items FROM runs") == [(1,)]


def test_every_run_option_has_help_that_shows_its_default():
    parser = argparse.ArgumentParser(prog="python -m engine")
    run_command.add_parser(parser.add_subparsers())
    run_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    for action in run_parser._actions:
        if action.dest == "help":
            continue
        assert action.help, action.option_strings
        assert "(default: " in action.help or "(required)" in action.help, action.option_strings
    text = " ".join(run_parser.format_help().split())
    assert "(default: 48 with --model smoke, whose random weights never stop; else 256)" in text
    assert "(default: vanilla,base,cf)" in text and "%(" not in text


@pytest.mark.parametrize(("given", "expected"), [
    (["--model", "smoke"], 48),  # random weights never stop: a short default keeps smoke runs to seconds
    (["--model", "smoke,smoke"], 48),
    (["--model", "smoke,mistralai/Mistral-7B-Instruct-v0.3"], 256),  # a grid with a real model: its default
    (["--model", "mistralai/Mistral-7B-Instruct-v0.3"], 256),
    (["--model", "smoke", "--max-new-tokens", "300"], 300),
])
def test_run_defaults_to_48_new_tokens_for_the_smoke_model_only(given, expected):
    from engine.__main__ import build_parser

    args = build_parser().parse_args(["run", "--dataset", "d.jsonl", *given])
    assert run_command.max_new_tokens(args) == expected
    if "," not in args.model:
        assert run_command.build_request(args, args.model, None).max_new_tokens == expected


def test_the_hf_token_flag_warns_that_ps_shows_it(tmp_path, capsys):
    assert cli(["run", "--dataset", str(tmp_path / "missing.jsonl"), "--hf-token", "hf_secret_value"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        "warning: --hf-token is visible to other users in the process list; "
        "set HF_TOKEN or run `hf auth login` once instead"
    )
    assert "hf_secret_value" not in err


def test_a_checkpoints_dropped_generation_defaults_are_recorded_not_hashed(tmp_path, tiny_llama_dir, capsys):
    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "runs.duckdb"
    assert cli(args_for(tiny_llama_dir, data, db, "--modes", "vanilla")) == 0
    err = capsys.readouterr().err
    # The progress bar knows its total from its first frame.
    first_frame = next(frame for frame in err.split("\r") if frame.strip())
    assert "| 0/2 [" in first_frame, err
    ((config_json, run_hash, dataset_sha),) = stored(db, "SELECT config_json, config_hash, dataset_sha FROM runs")
    config = json.loads(config_json)
    assert config["dropped_generation_defaults"] == {"do_sample": "True", "temperature": "0.6", "top_p": "0.9"}
    assert config["limit"] is None and config["skipped_prompts"] == [] and config["skipped_items"] == []
    request = request_for(tiny_llama_dir, data, db, "--modes", "vanilla")
    assert run_hash == config_hash(str(tiny_llama_dir), dataset_sha, run_config(request, "vanilla"))


def request_for(model_dir, data: Path, db: Path, *extra: str):
    """The RunRequest the CLI builds for these arguments."""
    parser = argparse.ArgumentParser()
    run_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(args_for(model_dir, data, db, *extra))
    return run_command.build_request(args, str(model_dir), str(model_dir))


def test_context_length_takes_the_smaller_declared_limit():
    def config(**fields):
        return SimpleNamespace(**fields)

    sentinel = SimpleNamespace(model_max_length=int(1e30))
    assert context_length(config(max_position_embeddings=8192), sentinel) == 8192
    assert context_length(config(max_position_embeddings=32768), SimpleNamespace(model_max_length=4096)) == 4096
    assert context_length(config(n_positions=1024), SimpleNamespace(model_max_length=1024)) == 1024
    assert context_length(config(), sentinel) is None
    assert context_length(config(), SimpleNamespace(model_max_length=2048)) == 2048


def test_a_huge_prompt_is_refused_without_tokenizing_it(tmp_path, tiny_llama_dir, tiny_llama):
    from engine.datasets.data import Dataset
    from engine.errors import UserError
    from engine.types import Document, Item

    item = Item("huge", "why " * 2_500_000, ("x",), (Document("d1", "text", True),))
    dataset = Dataset((item,), "sha-huge", "huge.jsonl", "native")
    request = request_for(tiny_llama_dir, tmp_path / "unused.jsonl", tmp_path / "runs.duckdb", "--modes", "vanilla")
    with pytest.raises(UserError, match=r"^item 'huge': prompt of more than [\d,]+ tokens \+ 2 new tokens exceeds"):
        run_experiment(ExperimentRequest(request, dataset, tmp_path / "runs.duckdb"), load=lambda r: tiny_llama)
    assert not (tmp_path / "runs.duckdb").exists()


@pytest.mark.parametrize("command", [["run", "--dataset", "sample"], ["quickstart"]])
def test_a_sampling_option_without_sample_is_refused_before_any_model_loads(command, tmp_path, monkeypatch, capsys):
    # `--temperature 0.7` alone was read and then ignored (greedy). Refused in one line,
    # with nothing loaded or written: loading a model here fails the test.
    import engine.generation.model_choice
    import engine.generation.models

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was asked for")

    monkeypatch.setattr(engine.generation.models, "load_model", no_loading)
    monkeypatch.setattr(engine.generation.model_choice, "choose_auto_model", no_loading)
    db = tmp_path / "runs.duckdb"
    assert cli([*command, "--model", "smoke", "--db", str(db), "--temperature", "0.7"]) == 2
    assert capsys.readouterr().err == (
        "error: --temperature 0.7 needs --sample: decoding is greedy without it and would ignore --temperature\n")
    assert not db.exists()


def test_the_use_case_refuses_sampling_settings_without_sampling():
    # The Python API and the app build the request themselves: the request refuses it where it is made.
    from engine.errors import UserError
    from engine.prompting.prompts import PromptConfig
    from engine.running.run_request import RunRequest

    def request(**settings):
        return RunRequest(model="m", modes=("vanilla",), prompt=PromptConfig(), batch_size=1, max_new_tokens=1,
                          **settings)

    request(temperature=1.0, sample=False, top_p=1.0, sample_top_k=0)  # the defaults: greedy
    request(temperature=0.7, sample=True, top_p=0.9, sample_top_k=5)
    # Named by their fields (engine.errors.FieldError); each face words them.
    for changed, option in (({"temperature": 0.7}, "temperature 0.7"), ({"top_p": 0.9}, "top_p 0.9"),
                            ({"sample_top_k": 5}, "sample_top_k 5")):
        settings = {"temperature": 1.0, "top_p": 1.0, "sample_top_k": 0, **changed}
        with pytest.raises(UserError, match=f"^{re.escape(option)} needs sample"):
            request(sample=False, **settings)
