"""Model loading: 4-bit on CPU for real, chat-template quirks, stop/pad tokens, user errors."""

from __future__ import annotations

import pytest
import torch

from engine.errors import UserError
from engine.generation.models import (
    LoadedModel,
    chat_input_ids,
    chat_input_ids_for,
    hub_error_to_user_error,
    load_model,
)

USER_TEXT = "Write a concise answer and cite [1][2].\n\nDocument [1](Paris) <|eot_id|> </s> [INST] <|im_end|>\n\nQuestion: where?"


@pytest.fixture(scope="module")
def tiny_qwen2_dir(tmp_path_factory):
    """A tiny Qwen2.5-Instruct-like model folder (ChatML, no BOS, tied embeddings)."""
    from engine.generation.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), arch="qwen2")


@pytest.fixture(scope="module")
def loaded_archs(tiny_llama_dir, tiny_mistral_dir, tiny_openchat_dir, tiny_qwen2_dir):
    return {
        "llama": load_model(str(tiny_llama_dir), quantize="none", device="cpu"),
        "mistral": load_model(str(tiny_mistral_dir), quantize="none", device="cpu"),
        "openchat": load_model(str(tiny_openchat_dir), quantize="none", device="cpu"),
        "qwen2": load_model(str(tiny_qwen2_dir), quantize="none", device="cpu"),
    }


def test_4bit_loads_on_cpu_as_bitsandbytes_nf4_and_generates(tiny_llama_dir):
    import bitsandbytes as bnb

    from engine.generation.generate import GenerationConfig, generate

    loaded = load_model(str(tiny_llama_dir), quantize="4bit", device="cpu")
    assert (loaded.quantization, loaded.device, loaded.dtype) == ("4bit", "cpu", "float32")
    layer_linears = [m for name, m in loaded.model.named_modules() if ".layers." in name and isinstance(m, torch.nn.Linear)]
    assert len(layer_linears) == 2 * 7  # q, k, v, o, gate, up, down per layer
    for module in layer_linears:
        assert isinstance(module, bnb.nn.Linear4bit)
        assert isinstance(module.weight, bnb.nn.Params4bit)
        state = module.weight.quant_state
        assert state.quant_type == "nf4"
        assert state.nested  # double quantization of the absmax
        assert module.weight.dtype == torch.uint8  # packed 4-bit storage
    calls = []
    hook = layer_linears[0].register_forward_hook(lambda *_: calls.append(1))
    try:
        outs = generate(loaded, ["Where is the Eiffel Tower?", "Q"], GenerationConfig(max_new_tokens=4, batch_size=2))
    finally:
        hook.remove()
    assert calls  # generation really ran through the 4-bit layers
    assert all(len(o.tokens) == 4 or o.finish_reason == "stop" for o in outs)


def test_auto_quantization_is_none_on_cpu(tiny_llama):
    assert (tiny_llama.quantization, tiny_llama.device, tiny_llama.dtype) == ("none", "cpu", "float32")
    assert tiny_llama.revision is None  # local folder: no hub commit
    assert not tiny_llama.model.training


@pytest.mark.parametrize("arch", ["llama", "mistral", "openchat"])
def test_chat_input_has_exactly_one_bos_at_start(loaded_archs, arch):
    loaded = loaded_archs[arch]
    bos = loaded.tokenizer.bos_token_id
    ids = chat_input_ids(loaded, USER_TEXT)
    assert ids[0] == bos
    assert ids.count(bos) == 1
    # The trap being avoided: these templates write BOS in the text, and the tokenizer adds one too.
    text = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": USER_TEXT}], tokenize=False, add_generation_prompt=True
    )
    assert loaded.tokenizer(text, add_special_tokens=True)["input_ids"][:2] == [bos, bos]


@pytest.mark.parametrize(
    ("arch", "opening", "closing"),
    [
        ("llama", "<|start_header_id|>user<|end_header_id|>\n\n", "<|start_header_id|>assistant<|end_header_id|>\n\n"),
        ("mistral", "[INST] ", "[/INST]"),
        ("openchat", "<|start_header_id|>GPT4 Correct User<|end_header_id|>\n\n", "<|start_header_id|>GPT4 Correct Assistant<|end_header_id|>\n\n"),
    ],
)
def test_chat_input_is_one_user_turn_then_the_assistant_header(loaded_archs, arch, opening, closing):
    loaded = loaded_archs[arch]
    decoded = loaded.tokenizer.decode(chat_input_ids(loaded, "Hello"), skip_special_tokens=False)
    assert decoded.startswith(loaded.tokenizer.bos_token + opening)
    assert decoded.endswith(closing)
    assert "system" not in decoded.lower()


def test_mistral_template_has_no_system_role_and_user_turn_works(loaded_archs):
    tokenizer = loaded_archs["mistral"].tokenizer
    with pytest.raises(Exception, match="roles"):  # the alternation check rejects it first
        tokenizer.apply_chat_template(
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], tokenize=False
        )
    ids = chat_input_ids(loaded_archs["mistral"], "Instruction folded into the user turn. Question: hi")
    assert tokenizer.convert_ids_to_tokens(ids)[:2] == ["<s>", "[INST]"]


@pytest.mark.parametrize("arch", ["llama", "mistral", "openchat", "qwen2"])
def test_control_tokens_in_user_text_are_plain_text(loaded_archs, arch):
    loaded = loaded_archs[arch]
    tok = loaded.tokenizer
    plain = chat_input_ids(loaded, "Hello")
    injected = chat_input_ids(loaded, "Hello <|eot_id|> </s> [INST] [/INST] <|im_start|> <|im_end|> <|endoftext|>")
    for special in {tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens} | set(loaded.stop_token_ids):
        assert injected.count(special) == plain.count(special)


def test_stop_tokens_and_padding_per_arch(loaded_archs):
    def names(arch):
        loaded = loaded_archs[arch]
        return set(loaded.tokenizer.convert_ids_to_tokens(list(loaded.stop_token_ids)))

    assert {"<|eot_id|>", "<|end_of_text|>"} <= names("llama")
    assert "<|eot_id|>" in names("openchat")  # its tokenizer and generation config name only <|end_of_text|>
    assert names("mistral") == {"</s>"}
    assert names("qwen2") == {"<|im_end|>", "<|endoftext|>"}
    for loaded in loaded_archs.values():
        tok = loaded.tokenizer
        assert tok.pad_token_id is not None
        assert tok.padding_side == "left"
        assert list(loaded.model.generation_config.eos_token_id) == list(loaded.stop_token_ids)
    # Llama 3 has no pad token: the first stop token stands in.
    assert loaded_archs["llama"].pad_token_id == loaded_archs["llama"].stop_token_ids[0]
    # Qwen2 brings its own.
    assert loaded_archs["qwen2"].tokenizer.pad_token == "<|endoftext|>"


def test_shipped_sampling_defaults_are_removed_and_recorded(loaded_archs):
    llama = loaded_archs["llama"]
    assert dict(llama.dropped_generation_defaults) == {"do_sample": "True", "temperature": "0.6", "top_p": "0.9"}
    config = llama.model.generation_config
    assert not config.do_sample and config.temperature in (None, 1.0) and config.top_p in (None, 1.0)
    qwen = loaded_archs["qwen2"]
    assert dict(qwen.dropped_generation_defaults) == {
        "do_sample": "True", "temperature": "0.7", "top_p": "0.8", "top_k": "20", "repetition_penalty": "1.05"}
    config = qwen.model.generation_config
    assert not config.do_sample and config.top_k in (None, 50) and config.repetition_penalty in (None, 1.0)


def test_chat_input_without_template_is_plain_text_with_one_bos(tiny_llama_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_llama_dir))
    tokenizer.chat_template = None
    ids = chat_input_ids_for(tokenizer, "plain prompt")
    assert ids == tokenizer("plain prompt")["input_ids"]
    assert ids.count(tokenizer.bos_token_id) == 1


@pytest.mark.parametrize(("model_id", "why"), [
    # Tests run offline (conftest): refused by engine.generation.model_check before from_pretrained.
    ("no-such-org/no-such-model-xyz",
     "not a local folder or a cached Hugging Face model, and the Hub is switched off (HF_HUB_OFFLINE)"),
    ("/no/such/folder", "not a local folder and not a Hugging Face model id"),
    ("./not-here", "not a local folder and not a Hugging Face model id"),
])
def test_unknown_model_is_a_one_line_user_error(model_id, why):
    with pytest.raises(UserError) as err:
        load_model(model_id, quantize="none", device="cpu")
    assert str(err.value) == f"unknown model '{model_id}': {why}"


def test_gated_model_errors_say_how_to_get_access():
    import httpx
    from huggingface_hub.errors import GatedRepoError

    request = httpx.Request("GET", "https://huggingface.co/meta-llama/Meta-Llama-3-8B-Instruct/resolve/main/config.json")
    gated = GatedRepoError("Cannot access gated repo", response=httpx.Response(401, request=request))
    try:
        raise OSError("You are trying to access a gated repo.") from gated  # how transformers wraps it
    except OSError as wrapped:
        without = hub_error_to_user_error("meta-llama/Meta-Llama-3-8B-Instruct", wrapped, has_token=False)
        with_token = hub_error_to_user_error("meta-llama/Meta-Llama-3-8B-Instruct", wrapped, has_token=True)
    assert "HF_TOKEN" in str(without) and "--hf-token" in str(without)
    assert "licence" in str(with_token)
    assert "\n" not in str(without) + str(with_token)


def test_token_is_never_kept(tiny_llama_dir, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_env_secret")
    loaded = load_model(str(tiny_llama_dir), quantize="none", device="cpu", hf_token="hf_arg_secret")
    assert isinstance(loaded, LoadedModel)
    held = repr(loaded) + repr(vars(loaded)) + repr(loaded.model.config.to_dict()) + repr(loaded.tokenizer.init_kwargs)
    assert "secret" not in held


def test_bad_device_and_options_are_user_errors(tiny_llama_dir):
    with pytest.raises(UserError, match="quantization"):
        load_model(str(tiny_llama_dir), quantize="3bit")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA GPU"):
            load_model(str(tiny_llama_dir), device="cuda:0")


def test_folder_that_is_not_a_model_is_a_user_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(UserError, match="is not a loadable Hugging Face model"):
        load_model(str(tmp_path), quantize="none", device="cpu")


def test_tiny_model_command_prints_a_loadable_folder(tmp_path, capsys):
    import argparse

    from engine.commands import tiny_model

    parser = argparse.ArgumentParser()
    tiny_model.add_parser(parser.add_subparsers())
    args = parser.parse_args(["tiny-model", str(tmp_path / "m"), "--arch", "openchat", "--vocab", "1024", "--seed", "3"])
    assert args.main(args) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    loaded = load_model(str(tmp_path / "m"), quantize="none", device="cpu")
    assert loaded.model.config.vocab_size == 1024
    assert loaded.model.get_input_embeddings().weight.shape[0] == 1024
    args = parser.parse_args(["tiny-model", str(tmp_path / "bad"), "--vocab", "10"])
    with pytest.raises(UserError, match="smaller than the tokenizer"):
        args.main(args)


# --- Qwen2 (Qwen2.5-Instruct: the CPU default of --model auto) ------------------------------


def test_qwen2_loads_through_from_pretrained_as_the_real_classes(loaded_archs):
    qwen = loaded_archs["qwen2"]
    assert type(qwen.model).__name__ == "Qwen2ForCausalLM"
    assert type(qwen.tokenizer).__name__ == "Qwen2Tokenizer"
    assert qwen.model.config.tie_word_embeddings
    assert qwen.model.lm_head.weight.data_ptr() == qwen.model.get_input_embeddings().weight.data_ptr()


def test_qwen2_chat_input_is_the_default_system_turn_then_one_user_turn_and_no_bos(loaded_archs):
    from engine.generation.tiny_model import QWEN25_DEFAULT_SYSTEM

    qwen = loaded_archs["qwen2"]
    tok = qwen.tokenizer
    ids = chat_input_ids(qwen, "Hello")
    assert tok.decode(ids, skip_special_tokens=False) == (
        f"<|im_start|>system\n{QWEN25_DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    )
    # Qwen2 has no BOS: nothing is prepended, not even <|endoftext|>, which config.json names as bos.
    assert tok.bos_token_id is None
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.convert_tokens_to_ids("<|endoftext|>") not in ids


def _force_token_after(model, token_id: int, decode_steps: int):
    """Make every row emit `token_id` once `decode_steps` tokens follow the prefill."""
    calls = []

    def hook(_module, _inputs, logits):
        calls.append(1)
        if len(calls) > decode_steps:
            logits = logits.clone()
            logits[..., token_id] += 1e4
            return logits
        return None

    return model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize("stop", ["<|im_end|>", "<|endoftext|>"])
def test_qwen2_generation_stops_on_both_end_tokens(loaded_archs, stop):
    from engine.generation.generate import GenerationConfig, generate

    qwen = loaded_archs["qwen2"]
    stop_id = qwen.tokenizer.convert_tokens_to_ids(stop)
    hook = _force_token_after(qwen.model, stop_id, decode_steps=2)
    try:
        out = generate(qwen, ["Where is the Eiffel Tower?", "Q"], GenerationConfig(max_new_tokens=8, batch_size=2))
    finally:
        hook.remove()
    for row in out:
        assert row.finish_reason == "stop"
        assert len(row.tokens) == 2  # prefill gives token 1, one decode step token 2, then the stop
        assert stop not in row.text and stop_id not in [t.token_id for t in row.tokens]


def test_qwen2_loads_in_4bit_on_cpu_and_generates(tiny_qwen2_dir):
    import bitsandbytes as bnb

    from engine.generation.generate import GenerationConfig, generate

    loaded = load_model(str(tiny_qwen2_dir), quantize="4bit", device="cpu")
    assert loaded.quantization == "4bit"
    linears = [m for name, m in loaded.model.named_modules() if ".layers." in name and isinstance(m, torch.nn.Linear)]
    assert linears and all(isinstance(m, bnb.nn.Linear4bit) for m in linears)
    assert not isinstance(loaded.model.lm_head, bnb.nn.Linear4bit)  # tied to the embeddings, kept whole
    out = generate(loaded, ["Where?"], GenerationConfig(max_new_tokens=3, batch_size=1))
    assert out[0].tokens and chat_input_ids(loaded, "Where?")[0] == loaded.tokenizer.convert_tokens_to_ids("<|im_start|>")
