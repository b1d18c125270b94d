"""How the app names a request's fields in its messages: by the Run tab's labels.

The use cases raise engine.errors.FieldError naming fields plainly (engine.usecases.run_values:
top_k); the CLI words them as its options (--top-k), which mean nothing to a visitor of a web
page. Here each field is named as the form shows it, so that no message the app shows speaks
of options or commands.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import FieldError, UserError

# The Run tab's labels (demo.tabs.run), as a sentence names them.
FIELD_LABELS: dict[str, str] = {
    "model": "the model",
    "modes": "the modes",
    "metadata": "the metadata type",
    "label_a": "custom label A",
    "label_b": "custom label B",
    "consideration": "the custom consideration sentence",
    "extra_label": "an extra label",
    "top_k": "the cut-off k",
    "order": "the document order",
    "few_shot": "the few-shot examples",
    "xai": "the XAI variant",
    "relevant_at": "relevant documents at",
    "repetition": "the repetition",
    "label_scope": "labels on",
    "quantize": "the quantization",
    "max_new_tokens": "max new tokens",
    "sample": "sample (a tick in the sample box)",
    "temperature": "the temperature",
    "top_p": "top-p",
    "sample_top_k": "the sampling top-k",
    "seed": "the seed",
    "batch_size": "the batch size",
    "top_logprobs": "top log-probs",
    "threads": "the threads",
    "batching": "the batching",
    "reruns": "the reruns",
    "experiment": "the experiment name",
    "limit": "the item limit",
    "study": "the study name",
    "actors": "Ray actors",
    "gpus_per_actor": "GPUs per actor",
    "skip_invalid": "skip invalid items ticked",
    "backend": "the backend",
    "base_url": "the server base URL",
    "tokenizer": "the tokenizer",
    "concurrency": "requests in flight",
    "api_key_env": "the API key's environment variable",
    "request_timeout": "the request timeout",
    # Not a visitor's choice: the operator names the app's store where it starts (docs/operations.md).
    "db": "PATTRIEVAL_DB where the app starts",
}


def field_label(field: str) -> str:
    """How the app names `field` (a field it has no label for: its name in words)."""
    return FIELD_LABELS.get(field, field.replace("_", " "))


def app_message(err: object) -> str:
    """An error's line as the app shows it."""
    return err.worded(field_label) if isinstance(err, FieldError) else str(err)


@contextmanager
def app_worded() -> Iterator[None]:
    """Within it, a FieldError becomes a UserError worded with the form's labels: what a handler
    raises then reads the same to the Run tab, to an API caller and to a script."""
    try:
        yield
    except FieldError as err:
        raise UserError(app_message(err)) from None
