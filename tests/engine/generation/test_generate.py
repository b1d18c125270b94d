"""Batched generation: order restore, batch == single, raw log-probs, stop cutting, offsets."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.generation.batching import length_sorted_batches
from engine.generation.generate import (
    Cut,
    GenerationConfig,
    cut_at_stop,
    decode_with_offsets,
    generate,
    iter_batches,
)
from engine.generation.models import chat_input_ids, load_model

PROMPTS = [
    "Q",
    "Write a concise answer for the given question based on the provided search result documents, and cite "
    "them properly using [1][2][3] etc. Document [1](The Eiffel Tower was completed in 1889.) Question: when?",
    "Mount Everest is 8849 metres high [2].",
    "Who won the Nobel Prize in 1903?",
    "The river Nile flows north through eleven countries into the Mediterranean Sea, and the speed of light is fast.",
]


def forward_logprobs(loaded, prompt_ids, new_ids) -> torch.Tensor:
    """Raw log-softmax of a plain (unbatched, uncached) forward pass, one row per generated step."""
    ids = torch.tensor([list(prompt_ids) + list(new_ids)])
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits[0].float()
    start = len(prompt_ids) - 1
    return torch.log_softmax(logits[start : start + len(new_ids)], dim=-1)


def ids_of(output):
    return [t.token_id for t in output.tokens]


def test_batched_greedy_equals_one_at_a_time(tiny_llama):
    config = GenerationConfig(max_new_tokens=12, batch_size=4)
    batched = generate(tiny_llama, PROMPTS, config)
    single = [generate(tiny_llama, [p], dataclasses.replace(config, batch_size=1))[0] for p in PROMPTS]
    for b, s in zip(batched, single, strict=True):
        assert ids_of(b) == ids_of(s)
        assert b.text == s.text and b.finish_reason == s.finish_reason
        torch.testing.assert_close(
            torch.tensor([t.logprob for t in b.tokens]), torch.tensor([t.logprob for t in s.tokens]), atol=1e-4, rtol=0
        )


def test_outputs_come_back_in_prompt_order(tiny_llama):
    lengths = [len(chat_input_ids(tiny_llama, p)) for p in PROMPTS]
    assert lengths != sorted(lengths, reverse=True)  # the batches really are reordered
    outputs = generate(tiny_llama, PROMPTS, GenerationConfig(max_new_tokens=3, batch_size=2))
    assert [o.n_prompt_tokens for o in outputs] == lengths
    finished = [pair for batch in iter_batches(tiny_llama, PROMPTS, GenerationConfig(max_new_tokens=2, batch_size=2)) for pair in batch]
    indices = [i for i, _ in finished]
    assert sorted(indices) == list(range(len(PROMPTS)))
    assert [lengths[i] for i in indices] == sorted(lengths, reverse=True)  # longest first
    assert [len(b) for b in iter_batches(tiny_llama, PROMPTS, GenerationConfig(max_new_tokens=1, batch_size=2))] == [2, 2, 1]


def test_length_sorted_batches_is_stable_and_complete():
    assert length_sorted_batches([3, 9, 3, 9, 1], 2) == [[1, 3], [0, 2], [4]]
    assert length_sorted_batches([], 4) == []


def test_progress_counts_every_prompt(tiny_llama):
    seen = []
    generate(tiny_llama, PROMPTS, GenerationConfig(max_new_tokens=2, batch_size=2), progress=seen.append)
    assert seen == [2, 2, 1]


def test_greedy_is_argmax_of_raw_logits_despite_shipped_sampling_defaults(tiny_llama):
    # The tiny Llama, like the real one, ships do_sample=True, temperature=0.6, top_p=0.9.
    outputs = generate(tiny_llama, PROMPTS[:3], GenerationConfig(max_new_tokens=10, batch_size=3))
    for prompt, out in zip(PROMPTS[:3], outputs, strict=True):
        prompt_ids = chat_input_ids(tiny_llama, prompt)
        reference = forward_logprobs(tiny_llama, prompt_ids, ids_of(out))
        assert ids_of(out) == reference.argmax(-1).tolist()
        recorded = torch.tensor([t.logprob for t in out.tokens])
        torch.testing.assert_close(recorded, reference.gather(1, torch.tensor(ids_of(out))[:, None])[:, 0], atol=1e-4, rtol=0)


def test_sampled_logprobs_are_raw_not_tempered_or_truncated(tiny_llama_dir):
    loaded = load_model(str(tiny_llama_dir), quantize="none", device="cpu")
    # Processors configured on the model after loading must not reach the recorded values either:
    # suppress the tokens greedy decoding would pick, and penalise repeats.
    favourites = sorted({t for o in generate(loaded, PROMPTS[:3], GenerationConfig(max_new_tokens=4)) for t in ids_of(o)})
    loaded.model.generation_config.suppress_tokens = favourites
    loaded.model.generation_config.repetition_penalty = 1.8
    config = GenerationConfig(max_new_tokens=16, do_sample=True, temperature=0.5, top_p=0.8, top_k_sampling=20, seed=3, batch_size=3)
    outputs = generate(loaded, PROMPTS[:3], config)
    tempered_differs = False
    for prompt, out in zip(PROMPTS[:3], outputs, strict=True):
        prompt_ids = chat_input_ids(loaded, prompt)
        reference = forward_logprobs(loaded, prompt_ids, ids_of(out))
        chosen = torch.tensor(ids_of(out))[:, None]
        recorded = torch.tensor([t.logprob for t in out.tokens])
        torch.testing.assert_close(recorded, reference.gather(1, chosen)[:, 0], atol=1e-4, rtol=0)
        tempered = torch.log_softmax(reference * 2.0, dim=-1).gather(1, chosen)[:, 0]  # logits / 0.5
        tempered_differs |= bool((tempered - recorded).abs().max() > 1e-2)
    assert tempered_differs  # the check above can tell raw from tempered values


def test_sampling_is_reproducible_by_seed(tiny_llama):
    config = GenerationConfig(max_new_tokens=12, do_sample=True, temperature=1.5, seed=7, batch_size=2)
    first = generate(tiny_llama, PROMPTS, config)
    again = generate(tiny_llama, PROMPTS, config)
    other = generate(tiny_llama, PROMPTS, dataclasses.replace(config, seed=8))
    assert [ids_of(o) for o in first] == [ids_of(o) for o in again]
    assert [ids_of(o) for o in first] != [ids_of(o) for o in other]


def test_top_n_alternatives(tiny_llama):
    out = generate(tiny_llama, PROMPTS[1:3], GenerationConfig(max_new_tokens=6, top_n_logprobs=4))
    for o in out:
        for t in o.tokens:
            assert len(t.top) == 4
            values = [a.logprob for a in t.top]
            assert values == sorted(values, reverse=True)
            assert t.top[0].token_id == t.token_id and t.top[0].logprob == pytest.approx(t.logprob, abs=1e-6)
            assert torch.logsumexp(torch.tensor(values), 0) <= 1e-6
            assert all(a.token == tiny_llama.tokenizer.decode([a.token_id]) for a in t.top)
    assert all(t.top == () for o in generate(tiny_llama, PROMPTS[:1], GenerationConfig(max_new_tokens=3)) for t in o.tokens)


@pytest.mark.parametrize(
    ("ids", "stops", "expected"),
    [
        ([5, 6, 7], [9], Cut(3, "length")),
        ([5, 9, 7, 9], [9], Cut(1, "stop")),
        ([9, 5], [9, 4], Cut(0, "stop")),
        ([5, 4, 9], [9, 4], Cut(1, "stop")),
        ([], [9], Cut(0, "length")),
    ],
)
def test_cut_at_first_stop(ids, stops, expected):
    assert cut_at_stop(ids, stops) == expected


def test_generation_is_cut_at_the_first_stop_token(tiny_llama):
    free = generate(tiny_llama, PROMPTS[:2], GenerationConfig(max_new_tokens=10, batch_size=2))
    target = ids_of(free[0])
    assert all(o.finish_reason == "length" and len(o.tokens) == 10 for o in free)
    # Declare the token row 0 emits at step 3 a stop token: row 0 must end just before it.
    stop_id = target[3]
    first = target.index(stop_id)
    stopping = dataclasses.replace(tiny_llama, stop_token_ids=(stop_id,) + tiny_llama.stop_token_ids)
    try:
        cut = generate(stopping, PROMPTS[:2], GenerationConfig(max_new_tokens=10, batch_size=2))
    finally:
        generate(tiny_llama, PROMPTS[:1], GenerationConfig(max_new_tokens=1))  # restore the shared model's eos ids
    assert cut[0].finish_reason == "stop"
    assert ids_of(cut[0]) == target[:first]
    assert [t.logprob for t in cut[0].tokens] == pytest.approx([t.logprob for t in free[0].tokens[:first]], abs=1e-4)
    assert cut[0].text == tiny_llama.tokenizer.decode(target[:first], skip_special_tokens=True)
    if stop_id in ids_of(free[1]):
        assert cut[1].finish_reason == "stop"
    else:
        assert (cut[1].finish_reason, ids_of(cut[1])) == ("length", ids_of(free[1]))


@pytest.mark.parametrize("fixture", ["tiny_mistral_dir", "tiny_openchat_dir"])
def test_other_archs_generate_in_batches(request, fixture):
    loaded = load_model(str(request.getfixturevalue(fixture)), quantize="none", device="cpu")
    outputs = generate(loaded, PROMPTS, GenerationConfig(max_new_tokens=6, batch_size=3))
    single = generate(loaded, PROMPTS[1:2], GenerationConfig(max_new_tokens=6, batch_size=1))
    assert ids_of(outputs[1]) == ids_of(single[0])
    for out in outputs:
        assert not set(ids_of(out)) & set(loaded.stop_token_ids)
        assert len(out.char_offsets) == len(out.tokens)


def test_char_offsets_tile_the_text(tiny_llama):
    for out in generate(tiny_llama, PROMPTS, GenerationConfig(max_new_tokens=16, batch_size=5)):
        assert "".join(out.text[s:e] for s, e in out.char_offsets) == out.text
        ends = [e for _, e in out.char_offsets]
        assert ends == sorted(ends) and (not ends or ends[-1] == len(out.text))
        for token, (s, e) in zip(out.tokens, out.char_offsets, strict=True):
            if "\ufffd" not in token.token:
                assert out.text[s:e] == token.token


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_mistral_dir"])
def test_decode_with_offsets_handles_split_utf8_and_specials(request, fixture):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(request.getfixturevalue(fixture)))
    ids = tokenizer("Café 🙂 [12] done", add_special_tokens=True)["input_ids"] + [tokenizer.eos_token_id]
    text, offsets = decode_with_offsets(tokenizer, ids)
    assert text == "Café 🙂 [12] done"
    assert "".join(text[s:e] for s, e in offsets) == text
    assert offsets[0] == (0, 0) and offsets[-1][0] == offsets[-1][1]  # BOS and EOS: empty spans
    assert len(offsets) == len(ids)
    emoji_tokens = [i for i, (s, e) in enumerate(offsets) if s <= text.index("🙂") < e]
    assert len(emoji_tokens) == 1  # the token completing the character carries it
