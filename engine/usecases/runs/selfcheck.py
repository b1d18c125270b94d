"""Self-check of one loaded model: does the real generation path do what the tiny-model tests prove?

No GPU is lent to this project's machines, so every real-model path is tested on tiny
random-weight models only. This module lets a GPU user check their own model, loaded exactly
as `run` loads it (engine.generation.models.load_model), through the same prompt builder
(engine.prompting.prompts.build_prompt), chat encoding (engine.generation.models.chat_input_ids) and generator
(engine.generation.generate.generate). It writes nothing; the caller decides what to do with the report.

Checks, each PASS or FAIL (WARN: a finding a person should look at, not a failure):
- load: the layers are quantized as asked, and every parameter sits on the device;
- bos: each prompt holds exactly one BOS, first, where the model uses one at all;
- stop tokens: the tokenizer's eos, the end-of-turn token the chat template writes after an
  assistant turn, and the model family's known stop tokens each map to a single id that
  generation stops on;
- roles: the whole prompt is one user turn; no system role is sent (Mistral has none);
- control text: stop and header strings inside a document stay text;
- generate: a few answers on the sample through the real generator;
- logprobs: the recorded raw log-probs (chosen tokens and top-n alternatives) equal those of a
  plain forward pass over prompt + answer, within a tolerance set by the compute dtype and
  the quantization (see TOLERANCE_HALF);
- greedy: each chosen token is the forward pass's most likely one (up to the same tolerance,
  for near-ties), so shipped sampling defaults (Llama 3: do_sample=True) do not leak in.
Then one batch is timed (generated tokens per second).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

import torch

from engine.generation.generate import GenerationConfig, generate
from engine.generation.models import STOP_TOKEN_STRINGS, LoadedModel, chat_input_ids, tokenizer_adds_bos
from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt
from engine.types import MODES, GenerationOutput, Item, Prompt

Status = Literal["PASS", "FAIL", "WARN"]

# Known families, told apart by their chat template, and the stop tokens DESIGN.md requires
# for each (on top of the tokenizer's eos and the template's own end-of-turn token).
FAMILY_MARKERS = (  # first match wins: OpenChat 3.6 uses Llama 3's header tokens too
    ("openchat-3.6", "GPT4 Correct"),
    ("llama-3", "<|start_header_id|>"),
    ("mistral", "[INST]"),
    ("chatml", "<|im_start|>"),
)
FAMILY_STOPS = {
    "openchat-3.6": ("<|eot_id|>",),
    "llama-3": ("<|end_of_text|>", "<|eot_id|>"),
    "mistral": ("</s>",),
    "chatml": ("<|im_end|>",),
}
# Strings a retrieved document may contain that a template treats as control tokens.
CONTROL_STRINGS = STOP_TOKEN_STRINGS + ("<|start_header_id|>", "<|end_header_id|>", "[INST]", "[/INST]", "<|im_start|>", "<s>")
_ASSISTANT_MARK = "SELFCHECKMARK"


@dataclass(frozen=True)
class Tolerance:
    """How far a recorded log-prob may be from the forward pass's, in nats."""

    per_token: float  # every compared value
    mean: float  # mean over all compared values
    tie: float  # how far a greedy choice may trail the forward pass's best (a near-tie rounding flips)
    why: str


# Both paths use the same weights (4-bit weights dequantize to the same values in both); they
# differ only in kernels and summation order: generate() runs left-padded batches with a KV
# cache, the reference one unpadded sequence without a cache. bitsandbytes picks its kernel by
# the number of rows (a fused 4-bit kernel for few rows, dequantize-then-matmul for many, on
# GPUs by architecture), and its CPU kernel (AVX512-BF16) casts the activations to bf16 even
# when the compute dtype is float32: measured here on the tiny Llama in 4-bit on CPU, batched
# generate against a forward pass differed by up to 1.7e-2 nats (mean 4e-4), where unquantized
# float32 differed by at most 2e-5. So any quantized model gets the half-precision tolerance.
# The half-precision bounds are reasoned, not measured on a 7B model on a GPU (none was lent to
# this project): the report prints the measured max and mean, so the margin is always visible.
TOLERANCE_FP32 = Tolerance(
    1e-3, 1e-4, 1e-3,
    "float32, unquantized: the two paths differ only in summation order (at most 2e-5 nats on the "
    "tiny models), far below the faults looked for",
)
TOLERANCE_HALF = Tolerance(
    1.0, 0.05, 0.25,
    "bf16/fp16 or 4-bit/8-bit (bitsandbytes computes in bf16): batched, cached generation runs "
    "other kernels than one forward pass, and bf16 rounds a logit near 20 by up to 0.06, so single "
    "values may differ by tenths of a nat; the faults looked for (a step off by one, rows swapped "
    "after the length sort, tempered values) move the mean by more",
)


def tolerance_for(quantization: str, dtype: str) -> Tolerance:
    """The tolerance for a model loaded with `quantization` computing in `dtype` (LoadedModel fields)."""
    return TOLERANCE_FP32 if quantization == "none" and dtype == "float32" else TOLERANCE_HALF


@dataclass(frozen=True)
class Check:
    """One check's outcome and a line saying what was seen."""

    name: str
    status: Status
    detail: str


@dataclass(frozen=True)
class Answer:
    """One generated answer, as the report shows it."""

    item_id: str
    mode: str
    text: str
    n_tokens: int
    finish_reason: str


@dataclass(frozen=True)
class LogprobDiff:
    """Recorded log-probs against the forward pass: how many values, the largest and mean gaps."""

    n_values: int
    max_abs: float
    mean_abs: float


@dataclass(frozen=True)
class Timing:
    """One timed batch through the generator."""

    batch_size: int
    max_new_tokens: int
    n_prompt_tokens: int
    n_new_tokens: int  # generated, stop tokens included (they were computed too)
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.n_new_tokens / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class SelfcheckReport:
    """Everything the self-check found about one model."""

    model_id: str
    revision: str | None
    quantization: str
    dtype: str
    device: str
    family: str
    stop_tokens: tuple[str, ...]
    checks: tuple[Check, ...]
    answers: tuple[Answer, ...]
    logprobs: LogprobDiff | None
    tolerance: Tolerance
    timing: Timing | None

    @property
    def passed(self) -> bool:
        return all(c.status != "FAIL" for c in self.checks)

    def to_dict(self) -> dict:
        """A JSON-ready form (for --json)."""
        out = asdict(self)
        out["passed"] = self.passed
        if self.timing is not None:
            out["timing"]["tokens_per_s"] = self.timing.tokens_per_s
        return out


# ---------------------------------------------------------------- template checks (no generation)


def model_family(tokenizer) -> str:
    """The family the chat template belongs to, or 'other'."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return next((family for family, marker in FAMILY_MARKERS if marker in template), "other")


def _render(tokenizer, messages: list[dict], **kw) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, **kw)


def _special_strings(tokenizer) -> list[str]:
    """Every special token's text, longest first (so prefix matching takes the whole token)."""
    names = set(tokenizer.all_special_tokens)
    names |= {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.special}
    return sorted(names, key=len, reverse=True)


def end_of_turn_token(tokenizer) -> str | None:
    """The special token the template writes right after an assistant's text (what the model
    was tuned to emit when it has answered), or None when it writes none or cannot say."""
    try:
        text = _render(tokenizer, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _ASSISTANT_MARK}])
    except Exception:  # noqa: BLE001 - a template that cannot render an answer tells us nothing here
        return None
    after = text.partition(_ASSISTANT_MARK)[2].lstrip()
    return next((s for s in _special_strings(tokenizer) if s and after.startswith(s)), None)


def check_bos(loaded: LoadedModel, prompts: Sequence[Prompt]) -> Check:
    """Exactly one BOS, at the start, where the template writes one or the tokenizer adds one."""
    tokenizer = loaded.tokenizer
    bos = tokenizer.bos_token_id
    if bos is None:
        return Check("bos", "PASS", "the model has no BOS token (as Qwen2.5); none expected, none added")
    writes = bool(getattr(tokenizer, "chat_template", None)) and tokenizer.bos_token in _render(
        tokenizer, [{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    adds = tokenizer_adds_bos(tokenizer)
    expected = 1 if writes or adds else 0
    for prompt in prompts:
        ids = chat_input_ids(loaded, prompt.text)
        count = ids.count(bos)
        if count != expected or (expected and ids[0] != bos):
            where = [i for i, t in enumerate(ids) if t == bos][:5]
            return Check(
                "bos", "FAIL",
                f"item {prompt.item_id}: {count} BOS token(s) {tokenizer.bos_token!r} at position(s) {where} of "
                f"{len(ids)}; expected {expected}{', first' if expected else ''}",
            )
    how = " and ".join(n for n, on in (("the template writes it", writes), ("the tokenizer adds one", adds)) if on)
    if expected == 0:
        return Check("bos", "PASS", f"neither template nor tokenizer adds {tokenizer.bos_token!r}; none in {len(prompts)} prompts")
    return Check("bos", "PASS", f"exactly one {tokenizer.bos_token!r}, first, in each of the {len(prompts)} prompts ({how})")


def expected_stop_tokens(tokenizer, family: str) -> tuple[str, ...]:
    """The tokenizer's eos, the template's end-of-turn token and the family's stop tokens, once each."""
    names = [tokenizer.eos_token, end_of_turn_token(tokenizer), *FAMILY_STOPS.get(family, ())]
    return tuple(dict.fromkeys(n for n in names if n))


def check_stop_tokens(loaded: LoadedModel, family: str) -> Check:
    """Every expected stop token is one token of the vocabulary, and generation stops on it."""
    tokenizer = loaded.tokenizer
    expected = expected_stop_tokens(tokenizer, family)
    if not expected:
        return Check("stop tokens", "FAIL", "the tokenizer names no eos and the template writes no end-of-turn token")
    problems = []
    for name in expected:
        ids = tokenizer.encode(name, add_special_tokens=False)
        if len(ids) != 1 or tokenizer.convert_ids_to_tokens(ids[0]) != name:
            problems.append(f"{name!r} is not one token of the vocabulary (encodes as {ids[:6]})")
        elif ids[0] not in loaded.stop_token_ids:
            problems.append(f"{name!r} (id {ids[0]}) is not among the stop ids {list(loaded.stop_token_ids)}")
    if problems:
        return Check("stop tokens", "FAIL", "; ".join(problems))
    shown = ", ".join(f"{n} = {tokenizer.convert_tokens_to_ids(n)}" for n in expected)
    return Check("stop tokens", "PASS", f"{family}: stops on {shown}, each a single id")


def _squashed(text: str) -> str:
    # Decoding may move spaces around special tokens (SentencePiece); whitespace is not what
    # this check is about.
    return re.sub(r"\s+", " ", text).strip()


def check_roles(loaded: LoadedModel, prompts: Sequence[Prompt]) -> Check:
    """The whole prompt is one user turn; a template without a system role gets none."""
    tokenizer = loaded.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        return Check("roles", "WARN", "the tokenizer has no chat template: the prompt is sent as plain text")
    try:
        text = _render(tokenizer, [{"role": "system", "content": "SYSTEMMARK"}, {"role": "user", "content": "hi"}])
        has_system = "SYSTEMMARK" in text
    except Exception:  # noqa: BLE001 - Mistral's template raises on a system message
        has_system = False
    default_system = "system" in _render(tokenizer, [{"role": "user", "content": "hi"}], add_generation_prompt=True).lower()
    for prompt in prompts:
        decoded = tokenizer.decode(chat_input_ids(loaded, prompt.text), skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
        if _squashed(decoded).count(_squashed(prompt.text)) != 1:
            return Check("roles", "FAIL", f"item {prompt.item_id}: the prompt is not found whole, once, in the encoded chat")
    system = "the template has a system role, not used" if has_system else "the template has no system role and gets none"
    if default_system:
        system += "; it writes its own default system turn (kept: the model was tuned with it)"
    return Check("roles", "PASS", f"one user turn holds each whole prompt; {system}")


def check_control_text(loaded: LoadedModel) -> Check:
    """Control-token strings inside a document are encoded as text and cannot end the turn."""
    tokenizer = loaded.tokenizer
    specials = {tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens} | set(loaded.stop_token_ids)
    specials |= {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if t.special}
    plain = chat_input_ids(loaded, "Document [1](Paris)")
    hostile = chat_input_ids(loaded, "Document [1](Paris " + " ".join(CONTROL_STRINGS) + ")")
    extra = sorted(t for t in specials if hostile.count(t) != plain.count(t))
    if extra:
        names = tokenizer.convert_ids_to_tokens(extra)
        return Check("control text", "FAIL", f"control strings in a document became control tokens: {names}")
    return Check("control text", "PASS", "stop and header strings inside a document stay plain text")


def check_load(loaded: LoadedModel) -> Check:
    """Layers quantized as `loaded.quantization` says, every parameter on `loaded.device`."""
    model = loaded.model
    devices = {str(p.device) for p in model.parameters()}
    if devices != {loaded.device}:
        return Check("load", "FAIL", f"parameters on {sorted(devices)}, expected all on {loaded.device}")
    output = model.get_output_embeddings()
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not output]
    kind = {"4bit": "Linear4bit", "8bit": "Linear8bitLt"}.get(loaded.quantization)
    where = f"{loaded.quantization}, compute {loaded.dtype}, on {loaded.device}"
    if kind is None:
        quantized = [n for n, m in linears if type(m).__name__ in ("Linear4bit", "Linear8bitLt")]
        if quantized:
            return Check("load", "FAIL", f"asked for no quantization, but {len(quantized)} layers are quantized ({quantized[0]}, ...)")
        return Check("load", "PASS", f"{where}: {len(linears)} linear layers unquantized")
    wrong = [n for n, m in linears if type(m).__name__ != kind]
    if kind == "Linear4bit":
        wrong += [n for n, m in linears if type(m).__name__ == kind and getattr(getattr(m.weight, "quant_state", None), "quant_type", None) != "nf4"]
    if wrong or not linears:
        return Check("load", "FAIL", f"{where}: {len(wrong)} of {len(linears)} linear layers are not {kind} nf4 ({', '.join(wrong[:3])})")
    nf4 = " nf4" if kind == "Linear4bit" else ""
    return Check("load", "PASS", f"{where}: all {len(linears)} linear layers but the output layer are {kind}{nf4}")


# ---------------------------------------------------------------- generation and log-probs


def sample_prompts(items: Sequence[Item], n: int) -> tuple[tuple[Prompt, str], ...]:
    """The first n items' prompts with their mode, cycling vanilla, base and cf (gender labels),
    so that both Prompt 1 and Prompt 2 go through the check."""
    out = []
    for i, item in enumerate(items[:n]):
        mode = MODES[i % len(MODES)]
        config = PromptConfig(mode=mode, metadata=METADATA_TYPES["gender"])
        out.append((build_prompt(item, config, i), mode))
    return tuple(out)


def forward_logprobs(loaded: LoadedModel, prompt_ids: Sequence[int], new_ids: Sequence[int]) -> torch.Tensor:
    """log_softmax (float32) of one plain, unpadded, uncached forward pass over prompt + answer:
    row t is the distribution the model gives for answer token t."""
    ids = torch.tensor([list(prompt_ids) + list(new_ids)], device=loaded.device)
    with torch.inference_mode():
        # Only the rows needed: at 128k vocabulary a full prompt's logits would take gigabytes.
        logits = loaded.model(input_ids=ids, logits_to_keep=len(new_ids) + 1).logits[0, : len(new_ids)]
    return torch.log_softmax(logits.float(), dim=-1).cpu()


def compare_logprobs(
    loaded: LoadedModel, prompts: Sequence[Prompt], outputs: Sequence[GenerationOutput], tolerance: Tolerance
) -> tuple[Check, Check, LogprobDiff]:
    """The logprobs and greedy checks: recorded values against a forward pass, answer by answer."""
    gaps: list[float] = []
    worst = (0.0, "")
    not_argmax: list[str] = []
    n_tokens = 0
    for prompt, out in zip(prompts, outputs, strict=True):
        new_ids = [t.token_id for t in out.tokens]
        if not new_ids:
            continue
        reference = forward_logprobs(loaded, chat_input_ids(loaded, prompt.text), new_ids)
        for step, token in enumerate(out.tokens):
            row = reference[step]
            pairs = [(token.logprob, float(row[token.token_id]))] + [(alt.logprob, float(row[alt.token_id])) for alt in token.top]
            for recorded, expected in pairs:
                gap = abs(recorded - expected)
                gaps.append(gap)
                if gap > worst[0]:
                    worst = (gap, f"item {prompt.item_id} token {step} ({token.token!r}): recorded {recorded:.5f}, forward {expected:.5f}")
            best = float(row.max())
            if float(row[token.token_id]) < best - tolerance.tie:
                not_argmax.append(f"item {prompt.item_id} token {step} ({token.token!r}): {float(row[token.token_id]):.4f} < best {best:.4f}")
        n_tokens += len(new_ids)
    if not gaps:
        empty = "no answer has a token to compare"
        return Check("logprobs", "FAIL", empty), Check("greedy", "FAIL", empty), LogprobDiff(0, 0.0, 0.0)
    diff = LogprobDiff(len(gaps), max(gaps), sum(gaps) / len(gaps))
    summary = (f"{diff.n_values} values ({n_tokens} chosen tokens and their top alternatives): max |diff| "
               f"{diff.max_abs:.2e}, mean {diff.mean_abs:.2e} nats (tolerance {tolerance.per_token:g} each, "
               f"{tolerance.mean:g} mean)")
    ok = diff.max_abs <= tolerance.per_token and diff.mean_abs <= tolerance.mean
    logprobs = Check("logprobs", "PASS" if ok else "FAIL", summary if ok else f"{summary}; worst: {worst[1]}")
    if not_argmax:
        greedy = Check("greedy", "FAIL", f"{len(not_argmax)} of {n_tokens} chosen tokens are not the forward pass's best: {not_argmax[0]}")
    else:
        greedy = Check("greedy", "PASS", f"all {n_tokens} chosen tokens are the forward pass's most likely (ties within {tolerance.tie:g})")
    return logprobs, greedy, diff


def check_generation(outputs: Sequence[GenerationOutput], max_new_tokens: int) -> Check:
    """Every prompt got an answer; WARN when none ended on a stop token."""
    empty = sum(1 for o in outputs if not o.tokens and o.finish_reason != "stop")
    stopped = sum(1 for o in outputs if o.finish_reason == "stop")
    seen = f"{len(outputs)} answers, {stopped} ended on a stop token, {len(outputs) - stopped} at --max-new-tokens {max_new_tokens}"
    if empty or not outputs:
        return Check("generate", "FAIL", f"{seen}; {empty} came back without a token")
    if not stopped:
        # A real instruct model ends a short cited answer well within the limit; one that
        # never stops usually emits an end-of-turn token generation does not stop on. Random
        # weights (the smoke and test models) never stop either, so this is for a person to judge.
        return Check("generate", "WARN", f"{seen}: a trained instruct model should stop; random weights never do")
    return Check("generate", "PASS", seen)


def time_batch(loaded: LoadedModel, prompts: Sequence[str], config: GenerationConfig) -> Timing:
    """Generate `prompts` as one batch and time it (the GPU is synchronised at both ends)."""
    config = replace(config, batch_size=len(prompts))
    cuda = loaded.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize(loaded.device)
    start = time.perf_counter()
    outputs = generate(loaded, prompts, config)
    if cuda:
        torch.cuda.synchronize(loaded.device)
    seconds = time.perf_counter() - start
    n_new = sum(len(o.tokens) + (o.finish_reason == "stop") for o in outputs)
    return Timing(len(prompts), config.max_new_tokens, sum(o.n_prompt_tokens for o in outputs), n_new, seconds)


def run_selfcheck(
    loaded: LoadedModel,
    items: Sequence[Item],
    *,
    n_answers: int = 3,
    max_new_tokens: int = 64,
    batch_size: int = 8,
    top_n_logprobs: int = 5,
    on_step: Callable[[str], None] | None = None,
) -> SelfcheckReport:
    """Run every check on a loaded model and time one batch of `batch_size` prompts (0: no timing)."""
    step = on_step or (lambda _message: None)
    family = model_family(loaded.tokenizer)
    with_modes = sample_prompts(items, n_answers)
    prompts = [p for p, _ in with_modes]
    checks = [
        check_load(loaded),
        check_bos(loaded, prompts),
        check_stop_tokens(loaded, family),
        check_roles(loaded, prompts),
        check_control_text(loaded),
    ]
    # Greedy, as `run` decodes by default; top-n so the alternatives are checked too; one batch
    # of prompts of different lengths, so left padding is in what the forward pass checks.
    config = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=len(prompts), top_n_logprobs=top_n_logprobs)
    step(f"generating {len(prompts)} answers")
    outputs = generate(loaded, [p.text for p in prompts], config)
    checks.append(check_generation(outputs, max_new_tokens))
    tolerance = tolerance_for(loaded.quantization, loaded.dtype)
    step("comparing log-probs with a forward pass")
    logprob_check, greedy_check, diff = compare_logprobs(loaded, prompts, outputs, tolerance)
    checks += [logprob_check, greedy_check]
    timing = None
    if batch_size:
        step(f"timing a batch of {batch_size}")
        texts = [p.text for p, _ in sample_prompts(items, batch_size)]  # repeated when items are fewer
        batch = [texts[i % len(texts)] for i in range(batch_size)]
        timing = time_batch(loaded, batch, replace(config, top_n_logprobs=0))
    answers = tuple(
        Answer(p.item_id, mode, o.text, len(o.tokens), o.finish_reason)
        for (p, mode), o in zip(with_modes, outputs, strict=True)
    )
    stops = tuple(loaded.tokenizer.convert_ids_to_tokens(list(loaded.stop_token_ids)))
    return SelfcheckReport(
        model_id=loaded.model_id, revision=loaded.revision, quantization=loaded.quantization, dtype=loaded.dtype,
        device=loaded.device, family=family, stop_tokens=stops, checks=tuple(checks), answers=answers,
        logprobs=diff, tolerance=tolerance, timing=timing,
    )
