"""The citation propensity probe: with an answer's text held fixed, how likely the model is to
cite each shown document at each of the answer's citation marks.

For every citation site (the "[" that opens a mark) the model reads its chat-templated prompt,
exactly as generation fed it (engine.generation.models.chat_input_ids), followed by the answer up to that
"[", and every candidate "[n]", n = 1..n_shown, is scored: the full number and its closing
bracket, so that "[1]" and "[10]" are different continuations in any tokenizer.

The tokenization rule. BPE may merge "[" with what precedes it (" [" or ".["), "[1" into one
token, or a tokenizer may hold "[1]" as one added token. So each candidate is encoded as the
whole text `answer[:site] + "[n]"` (no special tokens); the shared context is the longest
common token prefix of every candidate's encoding and of `answer[:site]` itself, and each
candidate's score is the sum of the log-probs of its remaining tokens. Whatever those tokens
share (a " [" merged with the space before it, say) is the same text for every candidate, so
the probabilities normalised over the candidates are P(model writes "[n]" here | n is some
shown number).

Torch-bound core: no store here (engine.usecases.judges.propensity reads and writes).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.generation.batching import length_sorted_batches
from engine.prompting.citations import parse_citation_marks


@dataclass(frozen=True)
class SiteProbe:
    """The candidates' scores at one citation site of an answer."""

    site_index: int  # 0-based, in order of appearance
    offset: int  # char offset of the site's "[" in the answer
    logprobs: tuple[float, ...]  # log P("[n]" | context), n = 1..n_shown (raw, summed over its tokens)
    probabilities: tuple[float, ...]  # the same normalised over the candidates 1..n_shown


@dataclass(frozen=True)
class CandidateTokens:
    """The token ids of one site: the shared context and each candidate's continuation."""

    shared: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]  # candidate n = index + 1


def citation_sites(answer: str) -> tuple[int, ...]:
    """The char offset of the "[" opening each citation mark of `answer` (one per bracket, so
    "[1, 2]" is one site), in order."""
    starts = {answer.rfind("[", 0, mark.start) for mark in parse_citation_marks(answer)}
    return tuple(sorted(s for s in starts if s >= 0))


def _encode(tokenizer: Any, text: str) -> list[int]:
    # split_special_tokens: an answer holding "<|eot_id|>" is text, as the prompt's documents are.
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    n = min(len(r) for r in rows)
    for i in range(n):
        token = rows[0][i]
        if any(r[i] != token for r in rows[1:]):
            return i
    return n


def candidate_tokens(tokenizer: Any, prefix: str, n_shown: int) -> CandidateTokens:
    """The tokenization rule (module docstring) for the answer text `prefix` before a site."""
    if n_shown < 1:
        raise ValueError("n_shown must be at least 1")
    full = [_encode(tokenizer, f"{prefix}[{n}]") for n in range(1, n_shown + 1)]
    k = _common_prefix([*full, _encode(tokenizer, prefix)])
    shared = tuple(full[0][:k])
    continuations = tuple(tuple(row[k:]) for row in full)
    if any(not c for c in continuations):  # cannot happen for distinct "[n]" texts; guards the rule
        raise ValueError(f"a candidate has no tokens of its own after {prefix[-20:]!r}")
    return CandidateTokens(shared, continuations)


def _normalised(logprobs: Sequence[float]) -> tuple[float, ...]:
    top = max(logprobs)
    weights = [math.exp(v - top) for v in logprobs]
    total = sum(weights)
    return tuple(w / total for w in weights)


def score_rows(loaded: Any, rows: Sequence[tuple[Sequence[int], int]], *, batch_size: int,
               prefix: Sequence[int] = ()) -> list[float]:
    """For each (token ids, r): the summed log-prob of the row's last r tokens given `prefix`
    followed by the rest of the row.

    The prefix (the prompt every row shares) is read once and its key-value cache copied into
    each batch. Rows go longest first into left-padded batches of `batch_size` (the padding
    sits between the prefix and the row, masked), with position ids counted over real tokens
    only, so padding changes nothing; only the last positions' logits are computed
    (logits_to_keep), and only their log_softmax is gathered. Each row must hold at least one
    token before its last r (the one whose logits predict the first of them)."""
    import torch

    from engine.generation.generate import left_pad

    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if any(len(ids) <= r for ids, r in rows):
        raise ValueError("every row needs a token before its scored tail")
    scores: list[float] = [0.0] * len(rows)
    model, device = loaded.model, loaded.device
    cache, n_prefix = None, len(prefix)
    cache_name = _cache_argument(model)
    if n_prefix:
        with torch.inference_mode():
            # logits_to_keep=1: the prefix's full-vocabulary logits are never needed.
            cache = getattr(model(input_ids=torch.tensor([list(prefix)], device=device), use_cache=True,
                                  logits_to_keep=1), cache_name)
        if not hasattr(cache, "batch_repeat_interleave"):  # a cache type that cannot be copied per row
            rows = [([*prefix, *ids], r) for ids, r in rows]
            cache, n_prefix = None, 0
    for batch in length_sorted_batches([len(ids) for ids, _ in rows], batch_size):
        ids, mask = left_pad([rows[i][0] for i in batch], loaded.pad_token_id, device)
        positions = n_prefix + (mask.cumsum(dim=1) - 1).clamp(min=0)
        tails = [rows[i][1] for i in batch]
        keep = max(tails) + 1
        extra: dict[str, Any] = {"use_cache": False}
        if cache is not None:
            past = copy.deepcopy(cache)
            past.batch_repeat_interleave(len(batch))
            mask = torch.cat([torch.ones((len(batch), n_prefix), dtype=mask.dtype, device=mask.device), mask], dim=1)
            extra = {cache_name: past, "use_cache": True}
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep,
                           **extra).logits
            # logits[:, j] predicts token (width - keep + j + 1): the last `keep - 1` tokens.
            logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            targets = ids[:, ids.shape[1] - keep + 1:]
            picked = logprobs.gather(2, targets[:, :, None])[:, :, 0].cpu()
            del logits, logprobs, extra
        for row, (i, r) in enumerate(zip(batch, tails, strict=True)):
            scores[i] = float(picked[row, picked.shape[1] - r:].double().sum())
    return scores


def _cache_argument(model: Any) -> str:
    """The name of the key-value cache in the model's forward and its output: `cache` from
    transformers 5.25 (`past_key_values` is deprecated there, to go in 5.40), `past_key_values`
    before (5.23, the oldest the ranges allow)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def probe_citations(loaded: Any, prompt_text: str, answer: str, n_shown: int, *,
                    batch_size: int = 16, reuse_prompt: bool = True) -> tuple[SiteProbe, ...]:
    """Score every candidate "[n]" (n = 1..n_shown) at every citation site of `answer`, read
    after the chat-templated `prompt_text`; all sites x candidates in padded batches. With
    `reuse_prompt` the prompt is read once (its key-value cache shared by every row); without,
    every row is read whole (the same numbers, slower)."""
    from engine.generation.models import chat_input_ids

    sites = citation_sites(answer)
    if not sites:
        return ()
    prompt_ids = chat_input_ids(loaded, prompt_text)
    rows: list[tuple[list[int], int]] = []
    for offset in sites:
        tokens = candidate_tokens(loaded.tokenizer, answer[:offset], n_shown)
        context = prompt_ids + list(tokens.shared)
        rows.extend((context + list(c), len(c)) for c in tokens.continuations)
    # The prompt's last token stays in every row: its logits predict a candidate that starts the answer.
    prefix = prompt_ids[:-1] if reuse_prompt else []
    scores = score_rows(loaded, [(ids[len(prefix):], r) for ids, r in rows], batch_size=batch_size, prefix=prefix)
    probes = []
    for s, offset in enumerate(sites):
        logprobs = tuple(scores[s * n_shown:(s + 1) * n_shown])
        probes.append(SiteProbe(s, offset, logprobs, _normalised(logprobs)))
    return tuple(probes)


def relevant_mass(probabilities: Sequence[Sequence[float]], relevant: Sequence[bool]) -> float:
    """The mean over sites of the probability on relevant documents; `probabilities[s][n-1]` is
    site s's normalised probability of "[n]" and `relevant[n-1]` whether document n is."""
    if not probabilities:
        raise ValueError("no sites")
    masses = (sum(p for p, rel in zip(site, relevant, strict=True) if rel) for site in probabilities)
    return sum(masses) / len(probabilities)
