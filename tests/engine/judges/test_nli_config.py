"""A hostile NLI model folder: its config.json is read as plain JSON and bounded before transformers
reads it (engine.judges.nli_config). A config with num_labels 10^8 took gigabytes and minutes
inside AutoConfig; long label names went into every verdict. Tiny real models (tests/support/nli_models.py)
with their config.json rewritten, loaded through the same check `verify` runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.judges.nli import check_nli
from engine.judges.nli_config import MAX_LABEL_CHARS, MAX_LABELS, MAX_PARAMETERS, parameters
from tests.support.helpers import cli, copy_store, rows
from tests.support.nli_models import answered_store, write_nli_model

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_nli_model(tmp_path_factory.mktemp("nli-config") / "base", "bert")


def rewritten(model: Path, folder: Path, **changes) -> Path:
    """A copy of `model` whose config.json has `changes` (a None value removes the field)."""
    import shutil

    shutil.copytree(model, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def refusal(folder: Path) -> str:
    with pytest.raises(UserError) as caught:
        check_nli(str(folder))
    return str(caught.value)


@pytest.mark.parametrize("arch", ["roberta", "deberta-v2"])  # bert: the module's model
def test_the_real_architectures_configs_pass(arch, tmp_path):
    # DeBERTa-v2 writes max_relative_positions -1 (as many as the positions).
    assert check_nli(str(write_nli_model(tmp_path / arch, arch)))[0][0] == ("entailment", "attributable")


def test_a_real_config_passes_and_the_bounds_hold_at_their_limit(model, tmp_path):
    assert check_nli(str(model))[0][0] == ("entailment", "attributable")
    labels = {i: f"entailment-{i}".ljust(MAX_LABEL_CHARS, "x") for i in range(MAX_LABELS)}
    at_limit = rewritten(model, tmp_path / "at-limit", num_labels=MAX_LABELS, id2label=labels,
                         label2id={v: k for k, v in labels.items()})
    assert len(check_nli(str(at_limit))[0]) == MAX_LABELS


@pytest.mark.parametrize("changes, field", [
    (dict(num_labels=100_000, id2label=None, label2id=None), "sets num_labels to 100,000 (at most 16)"),
    (dict(num_labels=0, id2label=None, label2id=None), "sets num_labels to 0 (at most 16)"),
    (dict(num_labels="3"), "sets num_labels to 3 (at most 16)"),
    (dict(id2label={str(i): "entailment" if i == 0 else f"other-{i}" for i in range(17)}, label2id=None,
          num_labels=None), "holds 17 labels in id2label (at most 16)"),
    (dict(label2id={f"l{i}": i for i in range(17)}), "holds 17 labels in label2id (at most 16)"),
    (dict(id2label={"0": "entailment" + "x" * 100_000, "1": "neutral", "2": "contradiction"}, label2id=None),
     "holds a label of 100,010 characters in id2label (at most 64): entailmentxxx"),
    (dict(hidden_size=1_000_000, vocab_size=1_000_000), "sizes give about"),
    (dict(num_hidden_layers=-1), "sets num_hidden_layers to -1, not a whole number from 0"),
    (dict(max_relative_positions=-2), "sets max_relative_positions to -2, not a whole number from -1"),
    (dict(intermediate_size=37.5), "sets intermediate_size to 37.5, not a whole number from 0"),
])
def test_a_config_past_a_bound_is_refused_in_one_line_naming_the_folder_and_the_field(model, tmp_path, changes,
                                                                                        field):
    folder = rewritten(model, tmp_path / "hostile", **changes)
    line = refusal(folder)
    assert line.startswith(f"NLI judge {folder}: config.json {field}"), line
    assert "\n" not in line and len(line) < 400


def test_a_config_file_past_its_size_is_refused_unread(model, tmp_path):
    folder = rewritten(model, tmp_path / "big", padding="x" * 1_100_000)
    assert refusal(folder) == f"NLI judge {folder}: config.json is 1,100,xxx bytes (at most 1,000,000)".replace(
        "1,100,xxx", f"{(folder / 'config.json').stat().st_size:,}")


def test_the_parameter_estimate_is_that_of_a_real_model():
    # roberta-large-mnli's config: 355 million parameters.
    large = dict(vocab_size=50265, hidden_size=1024, num_hidden_layers=24, intermediate_size=4096,
                 max_position_embeddings=514, type_vocab_size=1)
    assert 350e6 < parameters(large) < 362e6 < MAX_PARAMETERS
    # deberta-v2-xxlarge-mnli's: 1.5 billion, within the bound.
    xxlarge = dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=48, intermediate_size=6144,
                   max_position_embeddings=512, type_vocab_size=0, position_buckets=256, max_relative_positions=-1)
    assert 1.3e9 < parameters(xxlarge) < 1.6e9 < MAX_PARAMETERS


def test_num_labels_of_a_hundred_million_is_refused_in_a_moment_and_little_memory(model, tmp_path):
    """The red team's folder, in a child capped at 1 GB of address space: before the bound,
    AutoConfig built 10^8 labels (9 GB, still going after 120 s on a 2-core machine)."""
    folder = rewritten(model, tmp_path / "hundred-million", num_labels=10**8, id2label=None, label2id=None)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
            "from engine.judges.nli import check_nli; from engine.errors import UserError\n"
            "try:\n    check_nli(sys.argv[1])\nexcept UserError as e:\n    print(e)")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == f"NLI judge {folder}: config.json sets num_labels to 100,000,000 (at most 16)", \
        done.stderr[-2000:]
    assert time.monotonic() - started < 30


@pytest.mark.slow  # a tiny model answers an experiment first: 14 s
def test_verify_refuses_a_hostile_judge_in_one_line_and_writes_nothing(model, tmp_path, tiny_llama_dir, capsys):
    (tmp_path / "built").mkdir()
    db, experiment_id, _ = answered_store(tmp_path / "built", tiny_llama_dir)
    db = copy_store(db, tmp_path / "s.duckdb")
    folder = rewritten(model, tmp_path / "long-labels", label2id=None,
                       id2label={"0": "entailment" + "\x1b[2J" * 50, "1": "neutral", "2": "contradiction"})
    before = db.read_bytes()
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{folder}", "--device", "cpu",
               "--db", str(db)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: NLI judge {folder}: config.json holds a label of 210 characters in id2label "
                          "(at most 64): entailment\\x1b[2J"), err
    assert "\n" not in err and "\x1b" not in err
    assert db.read_bytes() == before
    assert rows(db, "SELECT count(*) FROM verifications")[0][0] == 0
