"""Citation probabilities: aligning cited numbers to the tokens that produced them."""

from __future__ import annotations

import math

import pytest

from engine.prompting.citations import citation_probabilities, parse_citation_marks
from engine.types import GenerationOutput, TokenLogprob


def output_from_pieces(pieces: list[tuple[str, float]]) -> GenerationOutput:
    """A GenerationOutput whose tokens are the given (text, logprob) pieces, back to back."""
    offsets, pos = [], 0
    for text, _ in pieces:
        offsets.append((pos, pos + len(text)))
        pos += len(text)
    return GenerationOutput(
        text="".join(t for t, _ in pieces),
        tokens=tuple(TokenLogprob(token_id=i, token=t, logprob=lp) for i, (t, lp) in enumerate(pieces)),
        finish_reason="stop",
        n_prompt_tokens=1,
        char_offsets=tuple(offsets),
    )


@pytest.mark.parametrize(
    ("pieces", "expected_logprobs"),
    [
        # merged: "[1]" and "[2]" are single tokens -> their own probabilities
        ([("Paris", -0.1), (" ", -0.2), ("[1]", -0.5), ("[2]", -1.0), (".", -0.3)], [-0.5, -1.0]),
        # split: "[", "1", "][", "2", "]" -> the digit tokens
        ([("Paris", -0.1), (" [", -0.2), ("1", -0.7), ("][", -0.05), ("2", -1.5), ("]", -0.01)], [-0.7, -1.5]),
        # multi-digit split into one token per digit -> product
        ([("See", -0.1), (" [", -0.2), ("1", -0.4), ("0", -0.6), ("]", -0.01)], [-1.0]),
        # multi-digit in one token
        ([("See", -0.1), (" [", -0.2), ("10", -0.9), ("]", -0.01)], [-0.9]),
        # a token holding the bracket and the first digit, the second digit apart
        ([("See", -0.1), (" [1", -0.3), ("2", -0.4), ("]", -0.01)], [-0.7]),
        # list inside one bracket
        ([("[", -0.1), ("1", -0.2), (",", -0.3), (" ", -0.4), ("3", -0.5), ("]", -0.6)], [-0.2, -0.5]),
        # a range cites each number, all with the range's digits (1, -, 3)
        ([("[", -0.1), ("1", -0.2), ("-", -0.3), ("3", -0.5), ("]", -0.6)], [-1.0, -1.0, -1.0]),
        # repeated citation: each occurrence its own tokens
        ([("[1]", -0.2), (" and ", -0.1), ("[1]", -2.0)], [-0.2, -2.0]),
        # no citation at all
        ([("No", -0.1), (" citations", -0.2)], []),
    ],
)
def test_probability_of_each_cited_number(pieces, expected_logprobs):
    out = output_from_pieces(pieces)
    assert citation_probabilities(out) == pytest.approx([math.exp(lp) for lp in expected_logprobs], rel=1e-12)


def test_empty_spans_never_count_and_missing_offsets_give_none():
    out = output_from_pieces([("[", -0.1), ("", -5.0), ("2", -0.3), ("]", -0.1)])
    assert citation_probabilities(out) == pytest.approx([math.exp(-0.3)])
    no_offsets = GenerationOutput(text="see [1]", tokens=(), finish_reason="length", n_prompt_tokens=1)
    assert citation_probabilities(no_offsets) == [None]


@pytest.mark.parametrize(
    ("fixture", "answer", "number_pieces"),
    [
        ("tiny_llama_merged_dir", "The tower [1][2] was built [10] and [12].", [["[1]"], ["[2]"], ["[10]"], ["[12]"]]),
        ("tiny_llama_dir", "The tower [1][2] was built [10] and [12].", [["1"], ["2"], ["10"], ["12"]]),
        ("tiny_mistral_dir", "The tower [1][2] was built [10] and [12].", [["1"], ["2"], ["1", "0"], ["1", "2"]]),
    ],
)
def test_alignment_with_real_tokenizers(request, fixture, answer, number_pieces):
    from transformers import AutoTokenizer

    from engine.generation.generate import decode_with_offsets

    tokenizer = AutoTokenizer.from_pretrained(str(request.getfixturevalue(fixture)))
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    text, offsets = decode_with_offsets(tokenizer, ids)
    assert text == answer
    logprobs = [-0.05 * (i + 1) for i in range(len(ids))]
    out = GenerationOutput(
        text=text,
        tokens=tuple(TokenLogprob(t, tokenizer.decode([t]), lp) for t, lp in zip(ids, logprobs, strict=True)),
        finish_reason="stop",
        n_prompt_tokens=1,
        char_offsets=offsets,
    )
    # Expected: walk the tokens, matching each citation's number pieces in order.
    pieces = [text[s:e] for s, e in offsets]
    expected, cursor = [], 0
    for wanted in number_pieces:
        cursor = next(i for i in range(cursor, len(pieces)) if pieces[i : i + len(wanted)] == wanted)
        expected.append(math.exp(sum(logprobs[cursor : cursor + len(wanted)])))
        cursor += len(wanted)
    assert citation_probabilities(out) == pytest.approx(expected, rel=1e-9)


def test_end_to_end_probabilities_match_a_plain_forward_pass(tiny_llama_merged_dir):
    import torch

    from engine.generation.generate import GenerationConfig, generate
    from engine.generation.models import chat_input_ids, load_model

    loaded = load_model(str(tiny_llama_merged_dir), quantize="none", device="cpu")
    # Near-uniform sampling makes the merged "[n]" tokens (20 of ~700) show up within a few dozen steps.
    config = GenerationConfig(max_new_tokens=48, do_sample=True, temperature=8.0, seed=1, batch_size=4)
    prompts = ["Cite the documents [1][2].", "Answer with citations.", "Question: when? [3]", "Document [1](x)"]
    outputs = generate(loaded, prompts, config)
    checked = 0
    for prompt, out in zip(prompts, outputs, strict=True):
        probabilities = citation_probabilities(out)
        if not probabilities:
            continue
        ids = [t.token_id for t in out.tokens]
        prompt_ids = chat_input_ids(loaded, prompt)
        with torch.no_grad():
            logits = loaded.model(input_ids=torch.tensor([prompt_ids + ids])).logits[0]
        raw = torch.log_softmax(logits[len(prompt_ids) - 1 : -1].float(), dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        for mark, probability in zip(parse_citation_marks(out.text), probabilities, strict=True):
            overlapping = [i for i, (s, e) in enumerate(out.char_offsets) if s < mark.end and e > mark.start]
            assert probability == pytest.approx(math.exp(float(raw[overlapping].sum())), rel=1e-3)
            checked += 1
    assert checked >= 1
