"""Batch-invariant generation: the same prompt gives the same tokens and log-probs, to the bit,
alone and in any batch of others (engine.generation.batching); and runs record how they batched."""

from __future__ import annotations

import dataclasses
import random

import pytest

from engine.generation.batching import (
    MIN_QUANTUM,
    batch_slot,
    bucket_width,
    cut_batches,
    invariant_batches,
    length_sorted_batches,
)
from engine.generation.generate import GenerationConfig, generate, generate_batch
from engine.generation.models import chat_input_ids, load_model

WORDS = "the of a paris france city river document answer question written by woman man [1] [2] 1889".split()


def _prompts(n: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(5, 120))) for _ in range(n)]


def _signature(output):
    """Everything of an answer that could move with its batch, compared exactly (floats as bits)."""
    return (output.text, output.finish_reason,
            tuple((t.token_id, t.logprob.hex(), tuple((a.token_id, a.logprob.hex()) for a in t.top))
                  for t in output.tokens))


@pytest.mark.parametrize("n", [1, 31, 32, 33, 200, 201, 1500, 4097])
def test_a_bucket_holds_the_prompt_and_pads_it_by_at_most_an_eighth(n):
    width = bucket_width(n)
    assert n < width <= max(n + MIN_QUANTUM, n + 1 + (n + 1) // 8)
    assert bucket_width(width - 1) == width  # the longest prompt of a bucket keeps one pad token


def test_bucket_widths_named_in_the_docstring():
    assert (bucket_width(201), bucket_width(1500), bucket_width(0)) == (224, 1536, MIN_QUANTUM)
    assert (bucket_width(223), bucket_width(224)) == (224, 256)


def test_a_slot_is_a_function_of_the_tokens_alone():
    assert batch_slot([1, 2, 3], 8) == batch_slot((1, 2, 3), 8)
    # Pinned: the slot must not change with the process (Python's hash() is salted for str).
    assert [batch_slot([i, i + 1], 8) for i in range(6)] == [3, 6, 7, 3, 6, 5]
    assert batch_slot([1, 2, 3], 1) == 0
    assert len({batch_slot([i], 8) for i in range(200)}) == 8  # every slot is used


def test_invariant_batches_cover_every_prompt_once_one_bucket_and_distinct_slots_each():
    rnd = random.Random(3)
    prompts = [[rnd.randrange(1000) for _ in range(rnd.randint(1, 300))] for _ in range(300)]
    batches = invariant_batches(prompts, 8)
    assert sorted(i for b in batches for i in b) == list(range(300))
    for batch in batches:
        assert 1 <= len(batch) <= 8
        assert len({bucket_width(len(prompts[i])) for i in batch}) == 1
        slots = [batch_slot(prompts[i], 8) for i in batch]
        assert slots == sorted(set(slots))
    widths = [bucket_width(len(prompts[b[0]])) for b in batches]
    assert widths == sorted(widths, reverse=True)  # widest first, as length-sorted batches go


def test_cut_batches_is_the_length_sorted_rule_when_off():
    prompts = [[1] * n for n in (3, 9, 3, 9, 1)]
    assert cut_batches(prompts, 2, False) == length_sorted_batches([3, 9, 3, 9, 1], 2)
    assert cut_batches([], 4, True) == []


@pytest.fixture(scope="module")
def tiny_llama_4bit(tiny_llama_dir):
    return load_model(str(tiny_llama_dir), quantize="4bit", device="cpu")


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_llama_4bit"])
def test_an_answer_is_the_same_to_the_bit_alone_and_in_any_batch(request, model):
    """The issue's measure: greedy, with top-5 alternatives, the first prompts alone against the
    same prompts among 40 others, in two orders (so other neighbours and other batches)."""
    loaded = request.getfixturevalue(model)
    prompts = _prompts(40)
    config = GenerationConfig(max_new_tokens=10, batch_size=8, top_n_logprobs=5, batch_invariant=True)
    together = generate(loaded, prompts, config)
    order = list(range(40))
    random.Random(1).shuffle(order)
    shuffled = generate(loaded, [prompts[i] for i in order], config)
    again = {i: shuffled[k] for k, i in enumerate(order)}
    for i in range(10):
        alone = generate(loaded, [prompts[i]], config)[0]
        assert _signature(alone) == _signature(together[i]) == _signature(again[i]), i


def test_sampling_is_invariant_too_under_one_seed(tiny_llama):
    """Each batch is seeded alike and a prompt keeps its row, so its draws are its own."""
    prompts = _prompts(24, seed=5)
    config = GenerationConfig(max_new_tokens=8, batch_size=8, do_sample=True, temperature=1.5, seed=11,
                              batch_invariant=True)
    together = generate(tiny_llama, prompts, config)
    for i in (0, 7, 19):
        assert _signature(generate(tiny_llama, [prompts[i]], config)[0]) == _signature(together[i])


def test_a_filler_never_keeps_a_batch_decoding(tiny_llama):
    """One prompt in a batch of 8 rows: the 7 fillers stop at once, so the answer ends where it
    would alone, and exactly one output comes back."""
    config = GenerationConfig(max_new_tokens=6, batch_size=8, batch_invariant=True)
    ids = chat_input_ids(tiny_llama, "Who wrote [1]?")
    outputs = generate_batch(tiny_llama, [ids], config)
    assert len(outputs) == 1 and len(outputs[0].tokens) <= 6


def test_a_batch_cut_another_way_is_refused(tiny_llama):
    config = GenerationConfig(max_new_tokens=2, batch_size=8, batch_invariant=True)
    short, long = chat_input_ids(tiny_llama, "a"), chat_input_ids(tiny_llama, " ".join(["river"] * 300))
    with pytest.raises(ValueError, match="one width bucket"):
        generate_batch(tiny_llama, [short, long], config)
    with pytest.raises(ValueError, match="distinct slots"):
        generate_batch(tiny_llama, [short, short], config)


def test_a_batch_invariant_run_stores_what_each_prompt_gives_alone_and_records_it(tiny_llama, tmp_path):
    """Through the runner (plan_batches on the driver, the local backend): each stored answer is
    what its prompt gives alone, to the bit; the runs say how they batched, the default's too."""
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.running.run_request import RunRequest
    from engine.usecases.runs.run import ExperimentRequest, run_experiment
    from tests.support.helpers import make_dataset, rows

    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 10))
    db = tmp_path / "runs.duckdb"
    request = RunRequest(model=str(tiny_llama.model_id), modes=("base", "cf"),
                         prompt=PromptConfig(metadata=METADATA_TYPES["gender"]), quantize="none", device="cpu",
                         max_new_tokens=6, batch_size=4, batch_invariant=True)
    run_experiment(ExperimentRequest(request, dataset, db), load=lambda r: tiny_llama)
    assert rows(db, "SELECT DISTINCT config_json->>'batching' FROM runs") == [("batch-invariant",)]
    stored = rows(db, "SELECT prompt, token_ids, logprobs FROM generations ORDER BY run_id, item_id")
    assert len(stored) == 20
    config = GenerationConfig(max_new_tokens=6, batch_size=4, batch_invariant=True)
    for prompt, token_ids, logprobs in stored[::3]:
        alone = generate(tiny_llama, [prompt], config)[0]
        assert [t.token_id for t in alone.tokens] == token_ids
        assert [t.logprob for t in alone.tokens] == logprobs  # DOUBLE keeps float32's bits

    default = dataclasses.replace(request, batch_invariant=RunRequest.batch_invariant, repeat=True)
    run_experiment(ExperimentRequest(default, dataset, db), load=lambda r: tiny_llama)
    assert rows(db, "SELECT config_json->>'batching', count(*) FROM runs GROUP BY ALL ORDER BY 1") == [
        ("batch-invariant", 2), ("length-sorted", 2)]


def test_a_resume_that_batches_otherwise_is_listed_beside_the_first_way(tiny_llama, tmp_path):
    """Like the thread count: a run keeps how its first start batched; a resume that batched
    otherwise is listed; a run stored before runs recorded it was length-sorted."""
    import duckdb

    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import PromptConfig
    from engine.running.run_request import RunRequest
    from engine.usecases.runs.run import ExperimentRequest, run_experiment
    from tests.support.helpers import make_dataset, rows

    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 4))
    db = tmp_path / "runs.duckdb"
    first = RunRequest(model=str(tiny_llama.model_id), modes=("vanilla",), prompt=PromptConfig(), quantize="none",
                       device="cpu", max_new_tokens=2, batch_size=2, limit=2)
    run_experiment(ExperimentRequest(first, dataset, db), load=lambda r: tiny_llama)
    with duckdb.connect(str(db)) as conn:  # as a store written before runs recorded their batching
        conn.execute("UPDATE runs SET config_json = json_merge_patch(config_json, '{\"batching\": null}')")
    sql = "SELECT config_json->>'batching', config_json->>'batching_resumed' FROM runs"
    assert rows(db, sql) == [(None, None)]
    resumed = dataclasses.replace(first, limit=4, batch_invariant=True)
    run_experiment(ExperimentRequest(resumed, dataset, db), load=lambda r: tiny_llama)
    assert rows(db, sql) == [("length-sorted", '["batch-invariant"]')]
    assert rows(db, "SELECT count(*) FROM generations") == [(4,)]
