"""Tiny random-weight NLI models of the real architectures (BERT, RoBERTa, DeBERTa-v2), built on the
fly and saved with save_pretrained, so that the judge loads them through from_pretrained as it
loads a Hub model. Their tokenizer is a WordPiece BertTokenizerFast built offline from a small
vocabulary (every architecture takes its ids; RoBERTa is given two token types for them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}

# Whole words of the sample's documents and claims, then single characters for anything else.
_WORDS = ("what is the number for topic passage about answer it also given in a man woman written by "
          "nothing else known").split()
_CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789.,;:()[]-'?!")


def write_tokenizer(folder: Path, max_length: int = 64):
    from transformers import BertTokenizer  # the fast (tokenizers) one in transformers 5

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *_WORDS, *_CHARS, *(f"##{c}" for c in _CHARS)]
    folder.mkdir(parents=True, exist_ok=True)
    # transformers 5 builds the WordPiece tokenizer from the vocabulary itself (a dict of ids).
    tok = BertTokenizer(vocab={w: i for i, w in enumerate(dict.fromkeys(words))}, do_lower_case=True,
                            model_max_length=max_length)
    tok.save_pretrained(folder)
    return tok


def write_nli_model(folder: Path, arch: str = "bert", labels: dict[int, str] | None = None, *,
                    max_length: int = 64, seed: int = 0) -> Path:
    """A random-weight sequence classifier of `arch` with `labels` as id2label, saved in `folder`."""
    import torch
    from transformers import AutoModelForSequenceClassification, BertConfig, DebertaV2Config, RobertaConfig

    labels = labels or NLI_LABELS
    tok = write_tokenizer(folder, max_length)
    common = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=37, id2label=labels, label2id={v: k for k, v in labels.items()},
                  pad_token_id=tok.pad_token_id, initializer_range=0.5)
    config: Any
    if arch == "bert":
        config = BertConfig(max_position_embeddings=max_length, **common)
    elif arch == "roberta":  # positions start after the padding index
        config = RobertaConfig(max_position_embeddings=max_length + 2, type_vocab_size=2, **common)
    elif arch == "deberta-v2":
        deberta = dict(relative_attention=True, position_buckets=16, pos_att_type=["p2c", "c2p"],
                       position_biased_input=False, type_vocab_size=0)  # as DeBERTa-v3's config has them
        config = DebertaV2Config(max_position_embeddings=max_length, **deberta, **common)
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    model.save_pretrained(folder)
    return folder


def write_rigged_nli_model(folder: Path, word: str = "woman", max_length: int = 64) -> Path:
    """A one-layer BERT NLI model whose verdict is set by its weights: entailment when `word` is
    among the input tokens, neutral otherwise. Attention is uniform (query and key weights 0), only
    `word` has a non-zero embedding, and the feed-forward block adds nothing, so the [CLS] vector
    after the layer is `v` when the word is present and 0 when not; the classifier reads `v`."""
    import torch
    from transformers import AutoModelForSequenceClassification, BertConfig

    tok = write_tokenizer(folder, max_length)
    h = 8
    config = BertConfig(vocab_size=len(tok), hidden_size=h, num_hidden_layers=1, num_attention_heads=1,
                        intermediate_size=4, max_position_embeddings=max_length, id2label=NLI_LABELS,
                        label2id={v: k for k, v in NLI_LABELS.items()}, pad_token_id=tok.pad_token_id)
    model = AutoModelForSequenceClassification.from_config(config)
    v = torch.tensor([1.0, -1.0] * (h // 2))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        bert = model.bert
        bert.embeddings.word_embeddings.weight[tok.convert_tokens_to_ids(word)] = v
        for ln in [bert.embeddings.LayerNorm, bert.encoder.layer[0].attention.output.LayerNorm,
                   bert.encoder.layer[0].output.LayerNorm]:
            ln.weight.fill_(1.0)
        layer = bert.encoder.layer[0]
        layer.attention.self.value.weight.copy_(torch.eye(h))
        layer.attention.output.dense.weight.copy_(torch.eye(h))
        bert.pooler.dense.weight.copy_(torch.eye(h))
        model.classifier.weight[0] = v  # entailment reads v
        model.classifier.bias.copy_(torch.tensor([-3.0, 0.0, -5.0]))
    model.save_pretrained(folder)
    return folder


# What the stored answers say once rewritten (as tests/engine/judges/test_verify.py): sentence 0 cites [1], sentence 1
# cites [2] and [3]; [9] cites no shown document. 3 pairs per answer.
ANSWER = "The number is {n} [1][9]. It is also given in [2, 3]. Nothing else is known."


def answered_store(folder: Path, model_dir: Path) -> tuple[Path, str, dict[str, str]]:
    """A gender experiment (vanilla, base, cf) of 4 items answered by the tiny generation model,
    its answers rewritten to cite: (store, experiment id, mode -> run id)."""
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.running.run_request import RunRequest
    from engine.usecases.runs.run import ExperimentRequest, run_experiment
    from store.db import connect
    from tests.support.helpers import make_ranked_dataset

    dataset = load_dataset(make_ranked_dataset(folder / "d.jsonl", 4, titles=True))
    request = RunRequest(model=str(model_dir), modes=("vanilla", "base", "cf"),
                         prompt=PromptConfig(metadata=METADATA_TYPES["gender"]),
                         quantize="none", device="cpu", max_new_tokens=4, batch_size=4)
    db = folder / "r.duckdb"
    outcome = run_experiment(ExperimentRequest(request, dataset, db))
    with connect(db) as con:
        con.execute("UPDATE generations SET answer = replace(?, '{n}', item_id)", [ANSWER])
    return db, outcome.experiment_id, {r.mode: r.run_id for r in outcome.runs}
