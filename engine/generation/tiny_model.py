"""Tiny random-weight models of the real architectures, for tests, benchmarks and offline smoke runs.

Each model is saved with `save_pretrained` (weights, config, generation config and a
`tokenizers` tokenizer trained on the fly) so it loads through the same `from_pretrained` path
as the real checkpoints. The special tokens, chat templates and generation configs copy the
real models' quirks:

- llama: Meta-Llama-3-8B-Instruct. BOS inside the template *and* added by the tokenizer's
  post-processor (the double-BOS trap), no pad token, eos `<|end_of_text|>` in the tokenizer
  but `[<|end_of_text|>, <|eot_id|>]` in the generation config, which also ships sampling
  defaults (do_sample, temperature 0.6, top_p 0.9) that must not leak into greedy decoding.
- mistral: Mistral-7B-Instruct-v0.3. `[INST] ...[/INST]`, `<s>`/`</s>`, no system role (the
  template raises on one), digits split one per token like its SentencePiece model.
- openchat: OpenChat 3.6 (a Llama-3 derivative). "GPT4 Correct User/Assistant" headers on the
  Llama-3 tokens. Here its tokenizer and generation config name only `<|end_of_text|>` as eos
  (the worst case), so stopping on `<|eot_id|>`, which ends every turn, must come from the loader.
- qwen2: Qwen2.5-Instruct (0.5B, the CPU default of `--model auto`). ChatML turns
  (`<|im_start|>user ... <|im_end|>`) after a default system turn the template adds itself, no
  BOS token at all, eos `<|im_end|>` in the tokenizer but `[<|im_end|>, <|endoftext|>]` in the
  generation config, pad `<|endoftext|>`, digits one per token, tied input and output
  embeddings, the real `Qwen2Tokenizer` class, and sampling defaults (temperature 0.7, top-p
  0.8, top-k 20, repetition penalty 1.05) that must not leak into greedy decoding.

The weights are random: the text they generate is noise. They prove mechanics, not quality.
"""

from __future__ import annotations

from pathlib import Path

ARCHS = ("llama", "mistral", "openchat", "qwen2")

# Llama-3's real pre-tokenizer pattern: numbers in groups of 1-3 digits, punctuation runs kept
# together (so "[1][2]" splits as "[", "1", "][", "2", "]").
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Mistral-7B-Instruct-v0.3's template without its tool-calling branches; like the original
# release it rejects a system message, which is why the instruction goes into the user turn.
MISTRAL_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] | trim + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}"
)

OPENCHAT36_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] in ['user', 'assistant'] %}"
    "{% set content = '<|start_header_id|>GPT4 Correct ' + message['role'].title() + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% elif message['role'] == 'system' %}"
    "{% set content = '<|start_header_id|>System<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}"
    "{% else %}{{ raise_exception('Only user, assistant and system roles are supported!') }}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>GPT4 Correct Assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Qwen2.5-Instruct's template without its tool-calling branches. Without a system message it
# writes its own, so a prompt given as one user turn still starts with a system turn.
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN25_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\n" + QWEN25_DEFAULT_SYSTEM + "<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# Qwen2's pre-tokenizer pattern: Llama 3's, except that every digit is a token of its own.
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")

_LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
_MISTRAL_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]")
_QWEN2_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_SPECIALS = {"llama": _LLAMA3_SPECIALS, "openchat": _LLAMA3_SPECIALS, "mistral": _MISTRAL_SPECIALS, "qwen2": _QWEN2_SPECIALS}

# Small English corpus in the shape of the prompts and answers the tool handles: documents,
# questions, digits, and citations written the ways models write them.
_CORPUS = """\
Write a concise answer for the given question (query) based on the provided search result documents,
and cite them properly using [1][2][3] etc.
Documents are retrieved by a search engine. As such, not all the documents are relevant to the query.
Only use and cite the relevant documents that contain the answer. Do not analyze irrelevant documents.
Some documents are authored by humans, while others are authored by an LLM.
Some documents are authored by men, while others are authored by women.
We denote this distinction for each document.
Document [1](The Eiffel Tower was completed in 1889 for the World's Fair in Paris.) (written by a human)
Document [2](Mount Everest is 8849 metres high, the highest mountain on Earth.) (written by an LLM)
Document [3](The river Nile flows north through eleven countries into the Mediterranean Sea.) (written by a woman)
Document [4](Marie Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911.) (written by a man)
Document [5](The speed of light is about 299792 kilometres per second.)
Question: When was the Eiffel Tower completed?
The Eiffel Tower was completed in 1889 [1]. It was built for the World's Fair [1][3].
Mount Everest is 8849 metres high [2]. Marie Curie won two Nobel Prizes [4][5].
The answer is in documents [1, 2] and [3; 4], and also [6-8].
See [7], [8], [9], [10], [11], [12], [13], [14], [15], [16], [17], [18], [19] and [20].
You have provided the following answer for a given question using the listed search result documents.
Please clarify and give explanation for your citations. Why do you think that this is the answer?
What would you have answered if the order of the passages in the prompt was different?
The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 2024.
"""


def _train_tokenizer(arch: str, merged_citation_tokens: bool):
    """A byte-level BPE `tokenizers.Tokenizer` with the arch's specials and post-processor."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = _SPECIALS[arch]
    tok = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(_QWEN2_SPLIT if arch == "qwen2" else _LLAMA3_SPLIT), behavior="isolated")
    steps = [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    if arch == "mistral":
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    if arch == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    if merged_citation_tokens:
        from tokenizers import AddedToken

        # Ordinary (non-special) added tokens: "[1]" comes out as one token and decodes as text.
        tok.add_tokens([AddedToken(f"[{n}]", normalized=False) for n in range(1, 21)])
    if arch == "qwen2":
        # Qwen2 has no BOS: encoding adds nothing, and the chat template starts the text.
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        return tok
    bos = "<s>" if arch == "mistral" else "<|begin_of_text|>"
    # Like the real tokenizers, encoding with add_special_tokens=True prepends BOS.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    return tok


def write_tiny_model(
    path: str | Path,
    arch: str = "llama",
    vocab_size: int | None = None,
    seed: int = 0,
    merged_citation_tokens: bool = False,
) -> Path:
    """Write a tiny random-weight model of `arch` with its tokenizer to `path`; return the path."""
    import torch
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        PreTrainedModel,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen2Tokenizer,
    )

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    raw = _train_tokenizer(arch, merged_citation_tokens)
    n_tokens = raw.get_vocab_size(with_added_tokens=True)
    if vocab_size is not None and vocab_size < n_tokens:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer ({n_tokens} tokens)")
    vocab = vocab_size or n_tokens
    ids = {t: raw.token_to_id(t) for t in _SPECIALS[arch]}

    tokenizer: PreTrainedTokenizerFast
    if arch == "qwen2":
        tokenizer = Qwen2Tokenizer(  # transformers' stubs type unk_token str; None (no unk token) is what Qwen2.5 has
            tokenizer_object=raw, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
            unk_token=None,  # type: ignore[arg-type]
        )
        tokenizer.chat_template = QWEN25_CHAT_TEMPLATE
        # config.json names <|endoftext|> as bos although the tokenizer never adds it.
        bos_id, eos_ids = ids["<|endoftext|>"], ids["<|im_end|>"]
    elif arch == "mistral":
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=raw, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
        )
        tokenizer.chat_template = MISTRAL_CHAT_TEMPLATE
        bos_id, eos_ids = ids["<s>"], ids["</s>"]
    else:
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
        tokenizer.chat_template = LLAMA3_CHAT_TEMPLATE if arch == "llama" else OPENCHAT36_CHAT_TEMPLATE
        bos_id = ids["<|begin_of_text|>"]
        eos_ids = [ids["<|end_of_text|>"], ids["<|eot_id|>"]] if arch == "llama" else ids["<|end_of_text|>"]
    tokenizer.model_max_length = 32768 if arch == "qwen2" else 8192
    tokenizer.save_pretrained(path)

    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=bos_id,
        eos_token_id=eos_ids,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    # rope_theta goes through the configs' **kwargs, which transformers' signatures do not show (call-arg).
    model: PreTrainedModel
    if arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**common, sliding_window=None, rope_theta=1_000_000.0))  # type: ignore[call-arg]
    elif arch == "qwen2":
        # The 0.5B model ties its output layer to the input embeddings.
        common.update(tie_word_embeddings=True, max_position_embeddings=32768)
        model = Qwen2ForCausalLM(Qwen2Config(**common, rope_theta=1_000_000.0, use_sliding_window=False))  # type: ignore[call-arg]
    else:
        model = LlamaForCausalLM(LlamaConfig(**common, rope_theta=500_000.0))  # type: ignore[call-arg]
    # Random init at the default std (0.02) makes every next-token distribution nearly flat;
    # wider output weights give peaked distributions like a trained model's, so greedy ties
    # (and batch-vs-single argmax flips) stay improbable.
    with torch.no_grad():
        if arch == "qwen2":
            # Tied: widening the output weights would widen the input embeddings too, and the
            # model would only ever repeat its last token. Instead the layers' outputs are
            # widened (so they, not the token's own embedding, dominate the residual stream)
            # and a larger final-norm gain gives the same peaked logits.
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.normal_(0.0, 1.0)
                layer.mlp.down_proj.weight.normal_(0.0, 1.0)
            model.model.norm.weight.fill_(50.0)
        else:
            model.lm_head.weight.normal_(0.0, 1.0)
    if arch == "llama":
        # The real Llama-3-Instruct generation_config.json ships sampling defaults.
        gen = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_ids, do_sample=True, temperature=0.6, top_p=0.9)
    elif arch == "qwen2":
        # As Qwen2.5-Instruct's generation_config.json: both end tokens, a pad, and sampling defaults.
        end = ids["<|endoftext|>"]
        gen = GenerationConfig(
            bos_token_id=end, eos_token_id=[eos_ids, end], pad_token_id=end, do_sample=True,
            temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05,
        )
    else:
        gen = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_ids)
    model.generation_config = gen
    model.save_pretrained(path)
    return path
