"""Batched generation with per-token raw log-probs, without keeping full-vocabulary scores.

Prompts are cut into batches (engine.generation.batching: length-sorted, or batch-invariant
fixed shapes), padded on the left, generated together, cut at each row's first stop token, and
handed back in the caller's order.

Raw log-probs. Each recorded value is log_softmax(logits)[chosen] of the model's next-token
logits as `generate()` hands them to logits processors (the model's output in its compute
dtype, e.g. bf16 for 4-bit on a GPU, upcast to float32), computed in float32 as
logit[chosen] - logsumexp(logits), before anything reshapes the distribution. In transformers 5
`generate()` builds its processor list as: the processors implied by the generation config
(repetition penalty, no-repeat-n-gram, bad words, min length, suppressed tokens, forced
BOS/EOS, ...), then the caller's processors, then the sampling warpers (temperature, top-k,
top-p, min-p, typical, ...). Our recorder is the caller's processor, so it always runs before
temperature/top-k/top-p; and because `load_model` (and `iter_batches` again, idempotently)
strips the checkpoint's generation config down to token ids and every call sets the penalties
to their neutral values, the config-implied part of the list is empty: the recorder sees the
logits exactly as the model produced them. So a sampled token's log-prob is its probability
under the model, not under the tempered or truncated sampling distribution. Top-n alternatives
are the n highest raw log-probs, whatever sampling then allowed.

A LoadedModel with no stop tokens generates exactly max_new_tokens per row (benchmarks use it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from engine.errors import RunCancelled
from engine.generation.batching import batch_slot, bucket_width, cut_batches
from engine.generation.models import LoadedModel, chat_input_ids, neutralize_generation_config
from engine.generation.threads import use_threads
from engine.types import GenerationOutput, TokenLogprob, TopLogprob


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode: greedy by default; sampling parameters apply only with do_sample."""

    max_new_tokens: int = 256
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k_sampling: int = 0  # 0 = off
    seed: int = 0
    batch_size: int = 8
    top_n_logprobs: int = 0
    # Fixed shapes (engine.generation.batching): an answer's tokens and log-probs do not depend on
    # the rest of its batch, at a cost in time; `run --batching batch-invariant` asks for it.
    batch_invariant: bool = False
    # torch intra-op threads to compute with (engine.generation.threads); None leaves the process's setting.
    # Not a decoding choice, but it moves log-probs in their last digits on a CPU.
    threads: int | None = None


class Cut(NamedTuple):
    """Where a generated row ends: how many tokens to keep, and why it ended."""

    n_kept: int
    finish_reason: str  # "stop" | "length"


def cut_at_stop(token_ids: Sequence[int], stop_token_ids: Sequence[int]) -> Cut:
    """Keep the tokens before the first stop token (the stop token itself is dropped)."""
    stops = set(stop_token_ids)
    for i, token_id in enumerate(token_ids):
        if token_id in stops:
            return Cut(i, "stop")
    return Cut(len(token_ids), "length")


class TextWithOffsets(NamedTuple):
    """Decoded text and the (start, end) char span of each token inside it."""

    text: str
    offsets: tuple[tuple[int, int], ...]


def decode_with_offsets(tokenizer, token_ids: Sequence[int]) -> TextWithOffsets:
    """Decode `token_ids` (specials skipped) and give each token its char span in the text.

    Spans come from decoding growing prefixes: a token's span runs from the end of the previous
    prefix to the end of its own. Where a prefix is not a prefix of the full text (a byte-level
    token holding half a UTF-8 character decodes to U+FFFD until the next token completes it,
    or SentencePiece drops a leading space) only the part shared with the text counts, so spans
    are monotone, never overlap, and always index into `text`. Special tokens get empty spans.
    """
    ids = [int(t) for t in token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    prefixes = tokenizer.batch_decode([ids[: i + 1] for i in range(len(ids))], skip_special_tokens=True)
    offsets: list[tuple[int, int]] = []
    start = 0
    for prefix in prefixes:
        end = max(start, len(os.path.commonprefix([prefix, text])))
        offsets.append((start, end))
        start = end
    return TextWithOffsets(text, tuple(offsets))


class _LogprobRecorder(LogitsProcessor):
    """Records the raw log-prob of each chosen token, keeping only one step of full-vocab values.

    The token chosen at step t is known only at call t+1 (it is then the last column of
    `input_ids`), so the recorder keeps step t's logits and their logsumexp until then and
    records logit[chosen] - logsumexp, which is log_softmax(logits)[chosen]; `finish` records
    the last step once `generate` has returned. Top-n alternatives are taken at each step.
    All buffers are allocated once, at the first step: small tensors allocated at every step
    and kept would sit between the big per-step temporaries and stop the allocator from
    returning their memory (measured: ~100 MB extra at 128k vocab, batch 16, 256 steps).
    """

    def __init__(self, top_n: int, max_steps: int) -> None:
        self.top_n = top_n
        self.max_steps = max_steps
        self.n_calls = 0
        self._logits: torch.Tensor | None = None  # (batch, vocab): the last step's logits
        self._lse: torch.Tensor | None = None  # (batch,): their logsumexp
        self.chosen: torch.Tensor | None = None  # (batch, max_steps)
        self.top_values: torch.Tensor | None = None  # (batch, max_steps, top_n)
        self.top_ids: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = self.n_calls
        if step >= self.max_steps:
            raise RuntimeError(f"generate() asked for step {step + 1} of at most {self.max_steps}")
        if step == 0:
            self._allocate(scores)
        else:
            self._record_chosen(step - 1, input_ids[:, -1])
        logits, lse = self._step_buffers()
        # A copy, not a reference: processors after this one may modify `scores` in place.
        logits.copy_(scores)
        torch.logsumexp(logits, dim=-1, out=lse)
        if self.top_n:
            _, top_values, top_ids = self.recorded()
            values, ids = logits.topk(self.top_n, dim=-1)
            top_values[:, step] = values - lse[:, None]
            top_ids[:, step] = ids
        self.n_calls += 1
        return scores  # unchanged: recording must not alter decoding

    def _allocate(self, scores: torch.Tensor) -> None:
        batch, vocab = scores.shape
        device = scores.device
        self._logits = torch.empty((batch, vocab), dtype=torch.float32, device=device)
        self._lse = torch.empty((batch,), dtype=torch.float32, device=device)
        self.chosen = torch.zeros((batch, self.max_steps), dtype=torch.float32, device=device)
        self.top_values = torch.zeros((batch, self.max_steps, self.top_n), dtype=torch.float32, device=device)
        self.top_ids = torch.zeros((batch, self.max_steps, self.top_n), dtype=torch.long, device=device)

    def _step_buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The last step's logits and their logsumexp: there from the first step until `finish`."""
        if self._logits is None or self._lse is None:
            raise RuntimeError(f"log-prob recorder: no step buffers at call {self.n_calls + 1} (before the first step, or after finish)")
        return self._logits, self._lse

    def recorded(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Chosen log-probs (batch, steps), top-n values and ids (batch, steps, top_n)."""
        if self.chosen is None or self.top_values is None or self.top_ids is None:
            raise RuntimeError("log-prob recorder: nothing recorded (generate() made no step)")
        return self.chosen, self.top_values, self.top_ids

    def _record_chosen(self, step: int, tokens: torch.Tensor) -> None:
        logits, lse = self._step_buffers()
        chosen, _, _ = self.recorded()
        chosen[:, step] = logits.gather(1, tokens[:, None]).squeeze(1) - lse

    def finish(self, new_tokens: torch.LongTensor) -> None:
        """Record the last step's chosen tokens and drop steps `generate` undid; free the logits."""
        n_steps = new_tokens.shape[1]
        # generate() may run a step past the end and undo it (deferred stop checks): n_calls > n_steps.
        if n_steps > self.n_calls or (n_steps and self._logits is None):
            raise RuntimeError(f"recorded {self.n_calls} log-prob steps for {n_steps} generated tokens")
        if n_steps == self.n_calls and n_steps:
            self._record_chosen(n_steps - 1, new_tokens[:, n_steps - 1])
        self._logits = self._lse = None
        if self.chosen is not None:
            chosen, top_values, top_ids = self.recorded()
            self.chosen, self.top_values, self.top_ids = chosen[:, :n_steps], top_values[:, :n_steps], top_ids[:, :n_steps]

    def keep_rows(self, rows: Sequence[int]) -> None:
        """Keep only these rows' records, in this order (a fixed-shape batch's prompts, without its fillers)."""
        if self.chosen is not None:
            chosen, top_values, top_ids = self.recorded()
            index = list(rows)
            self.chosen, self.top_values, self.top_ids = chosen[index], top_values[index], top_ids[index]


def hf_generation_config(loaded: LoadedModel, config: GenerationConfig):
    """A transformers GenerationConfig with every field that could reshape logits set explicitly."""
    from transformers import GenerationConfig as HFGenerationConfig

    # Sampling fields only with do_sample (set with greedy, transformers warns they are unused);
    # top_k always when sampling, because unset it would default to 50.
    sampling = (
        dict(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k_sampling)
        if config.do_sample
        else {}
    )
    return HFGenerationConfig(
        max_new_tokens=config.max_new_tokens,
        min_length=0,
        do_sample=config.do_sample,  # explicit: Llama 3 ships do_sample=True
        num_beams=1,
        num_return_sequences=1,
        repetition_penalty=1.0,
        encoder_repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        encoder_no_repeat_ngram_size=0,
        renormalize_logits=False,
        remove_invalid_values=False,
        eos_token_id=list(loaded.stop_token_ids),
        pad_token_id=loaded.pad_token_id,
        output_scores=False,
        output_logits=False,
        return_dict_in_generate=False,
        use_cache=True,
        **sampling,
    )


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: str, width: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows padded on the left to `width` (default: the longest row), with their attention mask."""
    width = max(len(r) for r in rows) if width is None else width
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


def _token_strings(tokenizer, ids: set[int]) -> dict[int, str]:
    """Each id decoded on its own (specials included), e.g. ' Paris' or '<|eot_id|>'."""
    ordered = sorted(ids)
    texts = tokenizer.batch_decode([[i] for i in ordered], skip_special_tokens=False)
    return dict(zip(ordered, texts, strict=True))


class _Interrupt(StoppingCriteria):
    """Ends a batch's decoding at the next step once `interrupted()` says so (a cancel)."""

    def __init__(self, interrupted: Callable[[], bool]):
        self.interrupted = interrupted

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), bool(self.interrupted()), dtype=torch.bool, device=input_ids.device)


class _Fillers(StoppingCriteria):
    """Marks a fixed-shape batch's filler rows finished from the first step, so that a filler never
    keeps a batch decoding after its prompts have stopped (their own rows compute as before)."""

    def __init__(self, fillers: tuple[int, ...]):
        self.fillers = list(fillers)

    def __call__(self, input_ids, scores, **kwargs):
        done = torch.zeros((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device)
        done[self.fillers] = True
        return done


@dataclass(frozen=True)
class _FixedShape:
    """Where a batch-invariant batch puts its prompts: `batch_size` rows of `width` tokens, each
    prompt in its own slot (engine.generation.batching), the other rows filled."""

    width: int
    size: int
    slots: tuple[int, ...]  # the row of each prompt, in the batch's order

    @classmethod
    def of(cls, batch: Sequence[Sequence[int]], batch_size: int) -> _FixedShape:
        widths = {bucket_width(len(row)) for row in batch}
        slots = tuple(batch_slot(row, batch_size) for row in batch)
        # engine.generation.batching.invariant_batches never makes such a batch: a caller's mistake.
        if len(widths) != 1 or len(set(slots)) != len(slots) or len(batch) > batch_size:
            raise ValueError("a batch-invariant batch needs prompts of one width bucket in distinct slots "
                             "(cut it with engine.generation.batching.invariant_batches)")
        return cls(widths.pop(), batch_size, slots)

    @property
    def fillers(self) -> tuple[int, ...]:
        return tuple(r for r in range(self.size) if r not in self.slots)

    def rows(self, batch: Sequence[Sequence[int]]) -> list[Sequence[int]]:
        """`size` rows: each prompt at its slot, a copy of the first prompt in every other row (its
        content cannot reach the prompts' rows; only its shape matters)."""
        rows: list[Sequence[int]] = [batch[0]] * self.size
        for row, slot in zip(batch, self.slots, strict=True):
            rows[slot] = row
        return rows


def generate_batch(
    loaded: LoadedModel, batch: Sequence[Sequence[int]], config: GenerationConfig,
    interrupted: Callable[[], bool] | None = None,
) -> list[GenerationOutput]:
    """Generate for one batch of prompt ids (any lengths) and build the outputs in batch order.

    `interrupted` is asked at every decoding step: when it says yes the batch stops at once and
    RunCancelled is raised, since its cut rows are not the answers and must not be written."""
    model, tokenizer = loaded.model, loaded.tokenizer
    if config.threads is not None:
        use_threads(config.threads)
    shape = _FixedShape.of(batch, config.batch_size) if config.batch_invariant else None
    rows = shape.rows(batch) if shape else batch
    width = shape.width if shape else None
    input_ids, attention_mask = left_pad(rows, loaded.pad_token_id, loaded.device, width)
    recorder = _LogprobRecorder(config.top_n_logprobs, config.max_new_tokens)
    criteria = ([_Interrupt(interrupted)] if interrupted else []) + ([_Fillers(shape.fillers)] if shape else [])
    if config.do_sample:
        torch.manual_seed(config.seed)  # per batch, so a resumed run samples the same batch the same way
    with torch.inference_mode():
        sequences = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=hf_generation_config(loaded, config),
            logits_processor=LogitsProcessorList([recorder]),
            stopping_criteria=StoppingCriteriaList(criteria) if criteria else None,
        )
        if interrupted is not None and interrupted():
            raise RunCancelled("cancelled during a batch (its answers were not written)")
        new_tokens = sequences[:, input_ids.shape[1] :]
        recorder.finish(new_tokens)  # inside: its buffers are inference tensors
        if shape is not None:  # the prompts' own rows, in the batch's order; the fillers dropped
            recorder.keep_rows(shape.slots)
            new_tokens = new_tokens[list(shape.slots)]

    n_steps = new_tokens.shape[1]
    new_rows = new_tokens.cpu().tolist()
    chosen = recorder.recorded()[0].cpu().tolist() if n_steps else [[] for _ in batch]
    if config.top_n_logprobs and n_steps:
        _, recorded_values, recorded_ids = recorder.recorded()
        top_values = recorded_values.cpu().tolist()  # (batch, steps, n)
        top_ids = recorded_ids.cpu().tolist()
    cuts = [cut_at_stop(row, loaded.stop_token_ids) for row in new_rows]

    needed = {t for row, cut in zip(new_rows, cuts, strict=True) for t in row[: cut.n_kept]}
    if config.top_n_logprobs and n_steps:
        needed |= {t for r, cut in enumerate(cuts) for step in top_ids[r][: cut.n_kept] for t in step}
    strings = _token_strings(tokenizer, needed)

    outputs = []
    for r, (prompt, row, cut) in enumerate(zip(batch, new_rows, cuts, strict=True)):
        kept = row[: cut.n_kept]
        decoded = decode_with_offsets(tokenizer, kept)
        tokens = []
        for step, token_id in enumerate(kept):
            top: tuple[TopLogprob, ...] = ()
            if config.top_n_logprobs:
                top = tuple(
                    TopLogprob(token_id=t, token=strings[t], logprob=v)
                    for t, v in zip(top_ids[r][step], top_values[r][step], strict=True)
                )
            tokens.append(TokenLogprob(token_id=token_id, token=strings[token_id], logprob=chosen[r][step], top=top))
        outputs.append(
            GenerationOutput(
                text=decoded.text,
                tokens=tuple(tokens),
                finish_reason=cut.finish_reason,
                n_prompt_tokens=len(prompt),
                char_offsets=decoded.offsets,
            )
        )
    return outputs


def check_config(config: GenerationConfig) -> None:
    problems = [
        (config.batch_size < 1, "batch_size must be at least 1"),
        (config.max_new_tokens < 1, "max_new_tokens must be at least 1"),
        (config.top_n_logprobs < 0, "top_n_logprobs must be 0 or more"),
        (config.do_sample and config.temperature <= 0, "temperature must be above 0 when sampling"),
        (config.do_sample and not 0 < config.top_p <= 1, "top_p must be in (0, 1]"),
        (config.top_k_sampling < 0, "top_k_sampling must be 0 (off) or more"),
        (config.threads is not None and config.threads < 1, "threads must be at least 1"),
    ]
    for failed, message in problems:
        if failed:
            raise ValueError(message)


def iter_batches(
    loaded: LoadedModel, prompts: Sequence[str], config: GenerationConfig
) -> Iterator[list[tuple[int, GenerationOutput]]]:
    """Yield each finished batch as (index into `prompts`, output) pairs, widest batches first.
    A model that generates elsewhere (engine.running.backend_server.ServedModel) brings its own."""
    own = getattr(loaded, "iter_batches", None)
    if own is not None:
        yield from own(prompts, config)
        return
    check_config(config)
    # Idempotent; guards models whose generation_config was set after load_model.
    neutralize_generation_config(loaded.model, loaded.stop_token_ids, loaded.pad_token_id)
    encoded = [chat_input_ids(loaded, p) for p in prompts]
    for indices in cut_batches(encoded, config.batch_size, config.batch_invariant):
        outputs = generate_batch(loaded, [encoded[i] for i in indices], config)
        yield list(zip(indices, outputs, strict=True))


def generate(
    loaded: LoadedModel,
    prompts: Sequence[str],
    config: GenerationConfig = GenerationConfig(),
    progress: Callable[[int], None] | None = None,
) -> list[GenerationOutput]:
    """Generate one answer per user-turn text, in the order of `prompts`.

    `progress` is called after each batch with the number of prompts it finished (tqdm's
    `update` fits).
    """
    results: list[GenerationOutput | None] = [None] * len(prompts)
    for finished in iter_batches(loaded, prompts, config):
        for index, output in finished:
            results[index] = output
        if progress is not None:
            progress(len(finished))
    return results  # type: ignore[return-value]  # every index is filled exactly once
