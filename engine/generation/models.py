"""Loading a Hugging Face causal LM (hub id or local folder), optionally in 4-bit, with its chat quirks.

What this module settles for every model, so the generator need not know which one it has:
- one user message, never a system role (Mistral has none): the caller folds the instruction
  into the user text;
- exactly one BOS token, whether the chat template writes it or the tokenizer adds it;
- the stop tokens: every end-of-turn / end-of-text token the model may emit (Llama 3 ends turns
  with `<|eot_id|>` but names `<|end_of_text|>` as eos; OpenChat 3.6 likewise);
- a pad token (Llama 3 has none) and left padding for batched generation;
- the model's shipped generation defaults (Llama 3 ships do_sample=True, temperature=0.6,
  top_p=0.9) are removed from `model.generation_config` and recorded, so they can neither
  change greedy decoding nor alter the logits before log-probs are recorded.

The HF token is passed to `from_pretrained` only; it is never logged, printed or stored.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.errors import UserError
from engine.generation import model_check
from engine.generation.model_check import suggestion
from engine.types import QUANTIZATIONS

DTYPES = ("auto", "float32", "bfloat16", "float16")

# End-of-turn / end-of-text tokens used by the chat models we support and their relatives.
STOP_TOKEN_STRINGS = ("<|eot_id|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<|end|>", "<|endoftext|>")

# generation_config fields that only name tokens or limits we set ourselves; everything else
# a checkpoint ships (sampling, penalties, suppressed tokens...) is dropped and recorded.
_KEPT_GENERATION_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A model ready for generation, with what provenance needs to know about how it was loaded."""

    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    model_id: str
    revision: str | None  # hub commit hash when known; None for local folders
    quantization: str  # "4bit" | "8bit" | "none"
    dtype: str  # compute dtype of the non-quantized parts, e.g. "bfloat16"
    device: str  # "cpu" or "cuda:N"
    stop_token_ids: tuple[int, ...]
    # Generation defaults the checkpoint shipped and we removed, e.g. (("temperature", "0.6"),).
    dropped_generation_defaults: tuple[tuple[str, str], ...] = ()
    # Most tokens (prompt + generated) the model takes; None when neither config nor tokenizer says.
    context_length: int | None = None

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda:0' when a GPU is visible else 'cpu'; validates explicit choices."""
    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UserError(f"device {device!r} requested but no CUDA GPU is available; use --device cpu")
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise UserError(f"device {device!r} requested but only {torch.cuda.device_count()} GPU(s) are visible")
        return f"cuda:{index}"
    raise UserError(f"unknown device {device!r}: use auto, cpu or cuda:N")


def resolve_quantization(quantize: str, device: str) -> str:
    """'auto' -> 4bit on CUDA, none on CPU (4-bit on CPU works but is slow)."""
    if quantize not in QUANTIZATIONS:
        raise UserError(f"unknown quantization {quantize!r}: use {', '.join(QUANTIZATIONS)}")
    if quantize == "auto":
        return "4bit" if device.startswith("cuda") else "none"
    return quantize


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """'auto' -> bfloat16 on a GPU that supports it (else float16), float32 on CPU."""
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}: use {', '.join(DTYPES)}")
    if dtype != "auto":
        return getattr(torch, dtype)
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def _check_bitsandbytes(quantization: str, device: str) -> None:
    """Fail early, in one line, when bitsandbytes is missing or cannot quantize on `device`."""
    if importlib.util.find_spec("bitsandbytes") is None:
        raise UserError(
            f"{quantization[0]}-bit needs bitsandbytes with a GPU or its CPU backend: "
            "bitsandbytes is not installed (pip install bitsandbytes, or use --quantize none)"
        )
    try:
        import bitsandbytes.functional as bnbf

        # A real (tiny) quantization: import alone succeeds even where no backend can serve.
        probe = torch.zeros(64, dtype=torch.float32, device=device)
        if quantization == "4bit":
            bnbf.quantize_4bit(probe, quant_type="nf4")
        else:
            bnbf.int8_vectorwise_quant(probe.reshape(1, -1).half() if device != "cpu" else probe.reshape(1, -1))
    except Exception as err:  # noqa: BLE001 - any backend failure means the same thing to the user
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(
            f"{quantization[0]}-bit needs bitsandbytes with a GPU or its CPU backend: {first_line} "
            "(use --quantize none to load unquantized)"
        ) from None


def _quantization_config(quantization: str, compute_dtype: torch.dtype):
    """The BitsAndBytesConfig for 4bit/8bit, None for unquantized."""
    from transformers import BitsAndBytesConfig

    if quantization == "4bit":
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute_dtype,
        )
    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return None


def _exception_chain(err: BaseException | None):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def hub_error_to_user_error(model_id: str, err: BaseException, has_token: bool) -> UserError | None:
    """Map transformers/huggingface_hub loading errors to one-line user errors; None if not a hub error."""
    from huggingface_hub import errors as hub_errors

    chain = list(_exception_chain(err))
    text = " ".join(str(e) for e in chain).lower()
    if any(isinstance(e, hub_errors.GatedRepoError) for e in chain) or "gated repo" in text:
        if has_token:
            return UserError(
                f"model '{model_id}' is gated and the token has no access: accept its licence on "
                "huggingface.co with the account the token belongs to"
            )
        return UserError(f"model '{model_id}' is gated: set HF_TOKEN or pass --hf-token after accepting its licence")
    not_found = (
        hub_errors.RepositoryNotFoundError,
        hub_errors.LocalEntryNotFoundError,
        hub_errors.RevisionNotFoundError,
        hub_errors.HFValidationError,
    )
    if any(isinstance(e, not_found) for e in chain) or any(
        marker in text
        for marker in (
            "couldn't connect",
            "not a valid model identifier",
            "repo id must be",
            "is not a local folder",
            "repository not found",
            "does not appear to have a file named config.json",
        )
    ):
        return unknown_model(model_id)
    return None


def unknown_model(model_id: str) -> UserError:
    """The one line for a model that is neither a local folder nor on the Hub, with the nearest known name."""
    return UserError(
        f"unknown model '{model_id}': not a local folder and not reachable on the Hugging Face Hub"
        f"{suggestion(model_id)}"
    )


def _hub_revision(model_id: str, revision: str | None) -> str | None:
    """The commit hash the hub cache resolved for `model_id`, None for local folders or when unknown."""
    if Path(model_id).is_dir():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
        from transformers.utils.hub import extract_commit_hash

        cached = try_to_load_from_cache(model_id, "config.json", revision=revision)
        return extract_commit_hash(cached, None) if isinstance(cached, str) else None
    except Exception:  # noqa: BLE001 - provenance is best effort, never a reason to fail a run
        return None


def _token_id_if_present(tokenizer, token: str) -> int | None:
    """The id of `token` when it is in the tokenizer's vocabulary as a whole token, else None."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or (tokenizer.unk_token_id is not None and token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
        return None
    return int(token_id) if tokenizer.convert_ids_to_tokens(int(token_id)) == token else None


def stop_token_ids_for(tokenizer, generation_config) -> tuple[int, ...]:
    """Tokenizer eos, generation-config eos and any known end-of-turn tokens the vocab has, in that order."""
    ids: list[int] = []

    def add(value) -> None:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v is not None and int(v) not in ids:
                ids.append(int(v))

    add(tokenizer.eos_token_id)
    add(getattr(generation_config, "eos_token_id", None))
    for token in STOP_TOKEN_STRINGS:
        add(_token_id_if_present(tokenizer, token))
    return tuple(ids)


def neutralize_generation_config(model, stop_token_ids: tuple[int, ...], pad_token_id: int | None) -> tuple[tuple[str, str], ...]:
    """Replace `model.generation_config` by one that names only tokens; return the dropped defaults.

    `generate()` fills every field a call leaves unset from `model.generation_config`; fields
    such as repetition_penalty or suppress_tokens would add logits processors that run before
    our log-prob recorder, and sampling defaults would turn greedy decoding into sampling.
    """
    from transformers import GenerationConfig

    current = model.generation_config
    shipped = current.to_diff_dict() if current is not None else {}
    kept = {k: getattr(current, k, None) for k in _KEPT_GENERATION_FIELDS if getattr(current, k, None) is not None}
    kept["eos_token_id"] = list(stop_token_ids)
    if pad_token_id is not None:
        kept["pad_token_id"] = pad_token_id
    dropped = tuple(
        (k, str(v))
        for k, v in sorted(shipped.items())
        if k not in _KEPT_GENERATION_FIELDS and not k.startswith("_") and k != "transformers_version"
    )
    model.generation_config = GenerationConfig(**kept)
    return dropped


# Config fields that name the number of positions, across architectures (Llama/Mistral/Qwen,
# GPT-2, Falcon/MPT, ChatGLM).
_POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
# Tokenizers without a declared limit report this sentinel (transformers' VERY_LARGE_INTEGER).
_NO_TOKENIZER_LIMIT = 10**18


def context_length(model_config, tokenizer) -> int | None:
    """The model's context in tokens: the smaller of the config's position count and the
    tokenizer's model_max_length, each when it is actually set.

    The config's `max_position_embeddings` is what the architecture was built and trained for
    (Llama 3: 8,192; Mistral v0.3: 32,768); most chat tokenizers leave `model_max_length` at a
    1e30 sentinel, but where a maker sets it lower it is the declared limit, so the smaller wins.
    """
    config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    limits = []
    for name in _POSITION_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            limits.append(value)
            break
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < _NO_TOKENIZER_LIMIT:
        limits.append(declared)
    return min(limits) if limits else None


def load_model(
    model_id: str,
    *,
    quantize: str = "auto",
    device: str = "auto",
    hf_token: str | None = None,
    dtype: str = "auto",
    revision: str | None = None,
    environment_token: bool = True,
) -> LoadedModel:
    """Load a causal LM and its tokenizer by hub id or local path, ready for batched generation.

    Without `hf_token`, the environment's HF_TOKEN (or the Hub's saved login) is used unless
    `environment_token` is False: then no token at all is sent (token=False), which is how a
    Space keeps its operator's token from a visitor's load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # At once, in one line, where from_pretrained would retry for a minute (Hub unreachable).
    model_check.check_model_name(model_id, revision=revision)
    token: str | bool | None = hf_token or (os.environ.get("HF_TOKEN") or None if environment_token else False)
    resolved_device = resolve_device(device)
    quantization = resolve_quantization(quantize, resolved_device)
    compute_dtype = resolve_dtype(dtype, resolved_device)
    if quantization != "none":
        _check_bitsandbytes(quantization, resolved_device)

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id, token=token, revision=revision)
        model = AutoModelForCausalLM.from_pretrained(
            model_id,
            token=token,
            revision=revision,
            dtype=compute_dtype,
            quantization_config=_quantization_config(quantization, compute_dtype),
            device_map={"": resolved_device},
        )
    except (OSError, ValueError) as err:
        if Path(model_id).is_dir():
            first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UserError(f"model folder '{model_id}' is not a loadable Hugging Face model: {first_line}") from None
        mapped = hub_error_to_user_error(model_id, err, has_token=bool(token))
        if mapped is None:
            raise
        raise mapped from None
    model.eval()

    stop_ids = stop_token_ids_for(tokenizer, model.generation_config)
    if not stop_ids:
        raise UserError(f"model '{model_id}' names no end-of-sequence token; cannot tell when an answer ends")
    if tokenizer.pad_token_id is None:
        # Llama 3 has no pad token; a stop token is safe as pad because rows are cut at their first stop.
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(stop_ids[0])
    tokenizer.padding_side = "left"
    dropped = neutralize_generation_config(model, stop_ids, int(tokenizer.pad_token_id))

    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        model_id=model_id,
        revision=_hub_revision(model_id, revision),
        quantization=quantization,
        dtype=str(compute_dtype).removeprefix("torch."),
        device=resolved_device,
        stop_token_ids=stop_ids,
        dropped_generation_defaults=dropped,
        context_length=context_length(model.config, tokenizer),
    )


def chat_input_ids(loaded: LoadedModel, user_text: str) -> list[int]:
    """Token ids of one user turn plus the assistant header, with exactly one BOS.

    Control-token strings inside `user_text` (a document containing "<|eot_id|>" or "[INST]")
    are encoded as plain text, so retrieved documents cannot end the turn.
    """
    return chat_input_ids_for(loaded.tokenizer, user_text)


def chat_input_ids_for(tokenizer, user_text: str) -> list[int]:
    """`chat_input_ids` for a bare tokenizer."""
    bos = tokenizer.bos_token_id
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": user_text}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            sanitize_control_tokens=True,
        )
        # transformers 5 returns a BatchEncoding here; older versions returned a bare list.
        ids = list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)
        # The template tokenizes its text without special tokens; templates that write
        # bos_token themselves (Llama 3, Mistral, OpenChat) already hold it, others need it added
        # when the tokenizer would normally add one.
        if bos is not None and (not ids or ids[0] != bos) and tokenizer_adds_bos(tokenizer):
            ids = [bos] + ids
    else:
        ids = list(tokenizer(user_text, add_special_tokens=True)["input_ids"])
    while bos is not None and len(ids) >= 2 and ids[0] == bos and ids[1] == bos:
        ids = ids[1:]
    return ids


def tokenizer_adds_bos(tokenizer) -> bool:
    """Whether encoding with special tokens prepends BOS (Llama 3, Mistral: yes)."""
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    return bool(probe) and probe[0] == tokenizer.bos_token_id
