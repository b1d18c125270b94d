"""An NLI model as a judge of citations: does the cited document entail the sentence citing it?

A sequence-classification model (`AutoModelForSequenceClassification`: DeBERTa, RoBERTa, BERT
fine-tuned on MNLI and the like) reads the pair (premise, hypothesis):

- premise: the cited document as shown (title and text, as engine.judges.verify builds the
  reference), with the label line the answering model saw put first when the judge is to see it
  (`--show-label`: first, so that truncating a long document never cuts the label);
- hypothesis: AttrScore's claim, the question followed by the sentence (engine.judges.verify.claim_text).

Its own labels, read from `config.id2label`, map to the verify classes: entailment ->
attributable, contradiction -> contradictory, anything else (neutral, not_entailment) ->
extrapolatory. A model whose labels name no entailment class ("LABEL_0", ...) is refused: its
verdicts could not be read. The class stored is the mapped class of the model's most probable
label; p_<class> is the softmax probability summed over the labels mapped to that class.

A premise longer than the model's context is cut from its end (`truncation="only_first"`, the
hypothesis is kept whole) and counted, so a face can say how many pairs were judged on a cut
document. torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import UserError
from engine.judges.nli_config import config_path, read_config
from engine.judges.verify import claim_text, reference_text, shown_label
from engine.types import Document, Verification, VerifySource

NLI_PREFIX = "nli:"
# What an NLI judge's premise gets first when it is to see the label, in the generator's words
# (engine.prompting.prompts writes "(written by X)" after each labelled document).
LABEL_LINE = "(written by {label})"


@dataclass(frozen=True)
class NliJudge:
    """A loaded NLI model: `mapping` is its own label -> verify class, in id order."""

    model: Any
    tokenizer: Any
    labels: tuple[str, ...]  # config.id2label in id order
    mapping: tuple[tuple[str, str], ...]
    max_length: int  # tokens of premise + hypothesis + specials


def nli_mapping(id2label: Mapping[int, str], model: str) -> tuple[tuple[str, str], ...]:
    """Each of the model's labels (in id order) with its verify class; one line when none of them
    names entailment ("LABEL_0", "LABEL_1", ... name nothing)."""
    labels = [str(id2label[i]) for i in sorted(id2label)]
    pairs = []
    for label in labels:
        name = label.strip().lower().replace("-", "_").replace(" ", "_")
        if name.startswith("entail"):
            pairs.append((label, "attributable"))
        elif name.startswith("contradict"):
            pairs.append((label, "contradictory"))
        else:  # neutral, not_entailment, non_entailment
            pairs.append((label, "extrapolatory"))
    if not any(cls == "attributable" for _, cls in pairs):
        raise UserError(f"model {model}'s labels ({', '.join(labels)}) name no entailment class")
    return tuple(pairs)


def max_pair_length(config: Any, tokenizer: Any) -> int:
    """The longest input the model takes: the tokenizer's model_max_length when it sets one, and
    never more than the positions the model has (RoBERTa's first two are the padding offset)."""
    limit = int(getattr(config, "max_position_embeddings", 0) or 0)
    if limit and "roberta" in str(getattr(config, "model_type", "")):
        limit -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    told = getattr(tokenizer, "model_max_length", None)
    if told is not None and told < 1_000_000:  # transformers' "no limit" is a huge number
        limit = min(limit, int(told)) if limit else int(told)
    return limit or 512


def check_nli(model: str) -> tuple[tuple[tuple[str, str], ...], Any]:
    """(label mapping, tokenizer) of an NLI judge, its weights not loaded: what `verify` reads of
    every judge before any judge writes, so that one that cannot load, or whose config.json is past
    engine.judges.nli_config's bounds, is refused in one line first."""
    try:
        token = os.environ.get("HF_TOKEN") or None
        # Bounded as plain JSON first: transformers builds one entry per label of num_labels.
        read_config(model, config_path(model, token))
        from transformers import AutoConfig, AutoTokenizer

        config = AutoConfig.from_pretrained(model, token=token)
        mapping = nli_mapping(dict(config.id2label or {}), model)
        return mapping, AutoTokenizer.from_pretrained(model, token=token)
    except UserError:
        raise
    except Exception as error:  # OSError, ValueError, KeyError (unknown model type), ...
        raise UserError(f"cannot load NLI judge {model}: {_first_line(error)}") from None


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_nli(model: str, device: str = "auto") -> NliJudge:
    """The model and its tokenizer (a local folder or a Hub id, $HF_TOKEN when set), in eval mode;
    one line when it cannot load or its labels name no entailment class. Nothing is written."""
    try:
        from transformers import AutoModelForSequenceClassification

        mapping, tokenizer = check_nli(model)  # refused before the weights load
        loaded = AutoModelForSequenceClassification.from_pretrained(model, token=os.environ.get("HF_TOKEN") or None)
    except UserError:
        raise
    except Exception as error:  # OSError, ValueError, KeyError (unknown model type), ...
        raise UserError(f"cannot load NLI judge {model}: {_first_line(error)}") from None
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    loaded.to(device).eval()
    return NliJudge(loaded, tokenizer, tuple(label for label, _ in mapping), mapping,
                    max_pair_length(loaded.config, tokenizer))


def premise(document: Document, label: str | None = None) -> str:
    """The cited document as the judge reads it; the label line first when it is shown."""
    text = reference_text(document)
    return f"{LABEL_LINE.format(label=label)} {text}" if label is not None else text


@dataclass(frozen=True)
class NliPair:
    """One (sentence, cited document) pair as the NLI judge gets it."""

    source: VerifySource
    claim: Any  # engine.types.Claim
    premise: str
    hypothesis: str


def nli_pairs(sources: Sequence[VerifySource]) -> list[NliPair]:
    """Every claim of `sources` as a pair, with the label shown when the source carries labels."""
    pairs = []
    for s in sources:
        docs = {d.id: d for d in s.item.documents}
        for c in s.claims:
            pairs.append(NliPair(s, c, premise(docs[c.doc_id], shown_label(s, c.position)),
                                 claim_text(s.item.question, c.sentence)))
    return pairs


def count_truncated(judge: NliJudge, pairs: Sequence[NliPair], where: Callable[[NliPair], str]) -> int:
    """How many pairs are longer than the model takes (their premise will be cut); one line for
    a pair whose hypothesis alone leaves no room for the premise."""
    tok = judge.tokenizer
    n = 0
    for pair in pairs:
        full = len(tok(pair.premise, pair.hypothesis, truncation=False)["input_ids"])
        if full <= judge.max_length:
            continue
        alone = len(tok("", pair.hypothesis, truncation=False)["input_ids"])
        if alone >= judge.max_length:
            raise UserError(f"{where(pair)}: its claim takes {alone} tokens, more than NLI judge's "
                            f"{judge.max_length}-token input")
        n += 1
    return n


def label_probabilities(judge: NliJudge, pairs: Sequence[NliPair]) -> list[list[float]]:
    """Each pair's softmax over the model's labels (id order): one forward pass, premise cut to fit."""
    import torch

    tok = judge.tokenizer
    batch = tok([p.premise for p in pairs], [p.hypothesis for p in pairs], padding=True,
                truncation="only_first", max_length=judge.max_length, return_tensors="pt")
    accepted = set(getattr(tok, "model_input_names", ()) or batch.keys())
    inputs = {k: v.to(judge.model.device) for k, v in batch.items() if k in accepted}
    with torch.inference_mode():
        logits = judge.model(**inputs).logits.float()
    return torch.softmax(logits, dim=-1).cpu().tolist()


def verification(pair: NliPair, judge: NliJudge, judge_name: str, probs: Sequence[float]) -> Verification:
    """One stored row: the mapped class of the most probable label, summed class probabilities,
    the model's own label probabilities as raw output and the pair as prompt."""
    sums = {"attributable": 0.0, "extrapolatory": 0.0, "contradictory": 0.0}
    for (_, cls), p in zip(judge.mapping, probs, strict=True):
        sums[cls] += p
    best = max(range(len(probs)), key=lambda i: probs[i])
    c = pair.claim
    return Verification(
        run_id=pair.source.run_id, item_id=c.item_id, sentence_index=c.sentence_index, position=c.position,
        doc_id=c.doc_id, judge_model=judge_name,
        prompt=json.dumps({"premise": pair.premise, "hypothesis": pair.hypothesis}, ensure_ascii=False),
        raw_output=json.dumps(dict(zip(judge.labels, probs, strict=True))),
        label=judge.mapping[best][1], p_attributable=sums["attributable"],
        p_extrapolatory=sums["extrapolatory"], p_contradictory=sums["contradictory"],
    )


def nli_batches(judge: NliJudge, pairs: Sequence[NliPair], judge_name: str, batch_size: int,
                write: Callable[[Sequence[Verification]], object]) -> Iterable[int]:
    """Judge `pairs` batch by batch, hand each finished batch to `write` (which commits it), and
    yield how many pairs each batch held."""
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        rows = [verification(p, judge, judge_name, probs) for p, probs in zip(chunk, label_probabilities(judge, chunk),
                                                                              strict=True)]
        write(rows)
        yield len(rows)


def mapping_json(judge: NliJudge) -> str:
    """The `judges.mapping` of an NLI judge: its labels -> classes, in id order."""
    return json.dumps(dict(judge.mapping))
