"""How prompts are cut into batches: length-sorted, or in fixed shapes that make an answer
independent of its batch.

Length-sorted (the fastest): prompts longest first, `batch_size` at a time, each batch left-padded
to its longest prompt. A prompt's padding, its row and its batch's size then depend on its
neighbours, and matrix kernels accumulate in an order that depends on shapes and rows, so its
logits move in their last bits with the batch; at a near-tie, greedy decoding picks another token.

Batch-invariant (fixed shapes): every batch has exactly `batch_size` rows (empty rows are filled),
a prompt is padded to a width that depends on its own length alone (`bucket_width`), and it sits
in a row chosen by its own tokens (`batch_slot`). Its computation then has the same shapes at
the same place whatever else is in the batch: the same tokens and log-probs to the bit, on a
given machine, thread count, library versions and batch size. Measured on a CPU, fixing the
width and the batch size is not enough: with two torch threads, a prompt in rows 0-3 of a batch
of 8 got other log-probs than in rows 4-7 (with one thread, every row gave the same), hence the
slot. The cost is the filled rows and the padding (docs/figures.md), which is why length-sorted
batches stay the default. `scripts/batch_noise.py` measures both ways.

No torch here: the driver plans batches with a tokenizer alone (engine.running.backends).
"""

from __future__ import annotations

import hashlib
import random
from array import array
from collections.abc import Sequence

# How a run's batches were cut, as its configuration records it.
SORTED = "length-sorted"
INVARIANT = "batch-invariant"
BATCHINGS = (SORTED, INVARIANT)  # the first is the default: invariance costs time
# The padded width is a multiple of a quantum that grows with the prompt (at most an eighth of
# its length, so padding costs at most ~12.5%), and is never below this many tokens.
MIN_QUANTUM = 32


def length_sorted_batches(lengths: Sequence[int], batch_size: int, offset: int = 0) -> list[list[int]]:
    """Indices sorted longest first (ties keep input order), cut into batches; with `offset`, the
    first batch holds that many and every later cut moves with it."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    head = [order[:offset]] if 0 < offset < len(order) else []
    rest = order[len(head[0]):] if head else order
    return head + [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]


def bucket_width(n_tokens: int) -> int:
    """The width a prompt of `n_tokens` is padded to in a batch-invariant batch: a function of
    its own length alone (e.g. 201 -> 224, 1,500 -> 1,536), and always above it. The one pad
    token at least keeps every batch's attention mask from being all ones: transformers drops an
    all-ones mask and takes its unmasked attention kernel, which rounds otherwise, so a prompt
    that filled its width exactly gave other log-probs beside a padded neighbour."""
    padded = max(n_tokens, 0) + 1
    quantum = max(MIN_QUANTUM, 1 << max(0, padded.bit_length() - 4))
    return -(-padded // quantum) * quantum


def batch_slot(token_ids: Sequence[int], batch_size: int) -> int:
    """The row a prompt takes in a batch-invariant batch: a stable hash of its tokens (the same
    in every process and on every machine), modulo the batch size."""
    digest = hashlib.blake2b(array("q", token_ids).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % batch_size


def invariant_batches(prompts: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Indices of `prompts` (token ids) cut into batch-invariant batches: widest bucket first, each
    batch holding prompts of one bucket in distinct slots, listed by slot. A batch may hold fewer
    than `batch_size` prompts (two prompts of a bucket that share a slot go to different batches);
    the generator fills the empty rows."""
    by_bucket: dict[int, list[list[int]]] = {}
    for i, ids in enumerate(prompts):
        queues = by_bucket.setdefault(bucket_width(len(ids)), [[] for _ in range(batch_size)])
        queues[batch_slot(ids, batch_size)].append(i)
    batches = []
    for width in sorted(by_bucket, reverse=True):
        queues = by_bucket[width]
        for depth in range(max(len(q) for q in queues)):
            batches.append([q[depth] for q in queues if len(q) > depth])
    return batches


def cut_batches(prompts: Sequence[Sequence[int]], batch_size: int, invariant: bool, rerun: int = 0) -> list[list[int]]:
    """The batches a run's prompts (token ids) are generated in, as index lists: the one rule
    that the generator (engine.generation.generate.iter_batches) and the driver's planner
    (engine.running.backends.plan_batches) both follow.

    `rerun` k > 0 (the k-th rerun of a run) cuts them another way, seeded by k, so that a rerun
    measures what another batch does to an answer: the prompts in a shuffled order (other
    neighbours among equal lengths, other slot queues), and length-sorted cuts moved by an
    offset (every batch boundary shifts). Batch-invariant answers do not change with it."""
    if rerun:
        order = list(range(len(prompts)))
        random.Random(rerun).shuffle(order)
        shuffled = [prompts[i] for i in order]
        if invariant:
            cut = invariant_batches(shuffled, batch_size)
        else:
            offset = 1 + (rerun - 1) % (batch_size - 1) if batch_size > 1 else 0
            cut = length_sorted_batches([len(p) for p in shuffled], batch_size, offset)
        return [[order[i] for i in batch] for batch in cut]
    if invariant:
        return invariant_batches(prompts, batch_size)
    return length_sorted_batches([len(p) for p in prompts], batch_size)


def batching_name(invariant: bool) -> str:
    """How a run's batches were cut, as its configuration records it."""
    return INVARIANT if invariant else SORTED
