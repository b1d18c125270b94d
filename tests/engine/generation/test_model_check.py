"""A model name that cannot load here fails at once, in one line, with the nearest known name:
offline (HF_HUB_OFFLINE) or with the Hub unreachable, before from_pretrained could retry for a
minute and print its retry warnings. Nothing here reaches the real Hub: an unreachable Hub is a
local port that closes every connection, and counting those connections shows no retry."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from huggingface_hub import constants

from engine.errors import UserError
from engine.generation import model_check
from engine.generation.model_check import check_model_name, suggestion
from engine.generation.models import hub_error_to_user_error, load_model
from tests.engine.running.test_run_experiments import make_dataset

ROOT = Path(__file__).resolve().parents[3]
KNOWN = ["smoke", "auto", "mistralai/Mistral-7B-Instruct-v0.3", "openchat/openchat-3.6-8b-20240522",
         "meta-llama/Meta-Llama-3-8B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "org/my-finetune"]


@pytest.mark.parametrize(("typed", "meant"), [
    ("smok", "smoke"),
    ("atuo", "auto"),
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.3"),
    ("Mistral-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3"),  # without its organisation
    ("qwen2.5-0.5b-instruct", "Qwen/Qwen2.5-0.5B-Instruct"),  # without case
    ("meta-llama/Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct"),
    ("org/my-finetuen", "org/my-finetune"),  # a cached id
    ("nobody/nothing-alike", None),
    ("smoke", None),  # the name itself is never its own suggestion
])
def test_the_suggestion_is_the_nearest_known_name_or_none(typed, meant):
    assert suggestion(typed, KNOWN) == (f"; did you mean {meant}?" if meant else "")


def test_known_names_are_the_tools_own_then_the_cached_model_ids(monkeypatch, tmp_path):
    _cache_model(tmp_path, "org/my-finetune")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    names = model_check.known_names()
    assert names[:2] == ["smoke", "auto"] and "Qwen/Qwen2.5-0.5B-Instruct" in names and names[-1] == "org/my-finetune"


def _cache_model(cache: Path, repo_id: str) -> None:
    """A Hub cache entry as huggingface_hub writes one: refs/main naming a snapshot with a config."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")


@pytest.fixture
def no_loading(monkeypatch):
    """from_pretrained must not be reached: the error has to come from the pre-check."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def refuse(*args, **kwargs):
        pytest.fail("from_pretrained was called: the pre-check let the name through")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)


class ClosingHub:
    """A port that reads each request's first line and closes the connection without an answer:
    a Hub that cannot be reached, with every try visible (`paths`)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed by the test
                return
            with conn:
                conn.settimeout(10)
                try:
                    line = conn.makefile("rb").readline().decode(errors="replace")
                except OSError:
                    continue
                self.paths.append(line.split(" ")[1] if line.count(" ") >= 2 else line)

    def tries(self, model: str) -> int:
        """Requests for `model`'s metadata (huggingface_hub also fetches a registry of its own)."""
        return sum(path.split("?")[0] == f"/api/models/{model}" for path in self.paths)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def closing_hub():
    hub = ClosingHub()
    yield hub
    hub.close()


def test_offline_a_typo_fails_in_the_pre_check_with_the_nearest_name(no_loading, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as tests run: conftest sets it
    monkeypatch.setattr(model_check, "hub_unreachable", lambda *a, **k: pytest.fail("the Hub was asked while offline"))
    with pytest.raises(UserError) as err:
        load_model("smok", quantize="none", device="cpu")
    assert str(err.value) == ("unknown model 'smok': not a local folder or a cached Hugging Face model, and the Hub "
                              "is switched off (HF_HUB_OFFLINE); did you mean smoke?")


def test_with_the_hub_unreachable_one_request_and_no_retry_then_one_line(no_loading, monkeypatch, closing_hub):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", closing_hub.url)
    with pytest.raises(UserError) as err:
        load_model("smok", quantize="none", device="cpu")
    message = str(err.value)
    assert message.startswith("unknown model 'smok': not a local folder or a cached Hugging Face model, and the Hub "
                              "cannot be reached (") and message.endswith("); did you mean smoke?"), message
    assert "\n" not in message
    assert closing_hub.tries("smok") == 1, closing_hub.paths  # from_pretrained retries 5 times per file


def test_a_folder_a_cached_id_and_an_answering_hub_pass_without_a_verdict(monkeypatch, tmp_path, tiny_llama_dir):
    monkeypatch.setattr(model_check, "hub_unreachable", lambda *a, **k: pytest.fail("the Hub was asked"))
    check_model_name(str(tiny_llama_dir))  # a folder: nothing asked
    _cache_model(tmp_path, "org/cached-model")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    check_model_name("org/cached-model")  # cached: loads offline, nothing asked
    # Online, any HTTP answer (here a 404) leaves the verdict to loading, which maps it itself.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(model_check, "hub_unreachable", lambda *a, **k: None)
    check_model_name("org/not-cached")


@pytest.mark.parametrize("name", ["/no/such/folder", "./not-here", "a/b/c"])
def test_a_name_that_is_neither_a_folder_nor_a_hub_id_is_refused_without_asking(name, no_loading, monkeypatch):
    monkeypatch.setattr(model_check, "hub_unreachable", lambda *a, **k: pytest.fail("the Hub was asked"))
    with pytest.raises(UserError, match=rf"^unknown model '{name}': not a local folder and not a Hugging Face model id"):
        load_model(name, quantize="none", device="cpu")


def test_the_loading_paths_own_unknown_model_line_suggests_too():
    import httpx
    from huggingface_hub.errors import RepositoryNotFoundError

    request = httpx.Request("GET", "https://huggingface.co/api/models/Qwen/Qwen2.5-0.5B-Instruc")
    missing = RepositoryNotFoundError("404 Client Error", response=httpx.Response(404, request=request))
    assert str(hub_error_to_user_error("Qwen/Qwen2.5-0.5B-Instruc", missing, has_token=False)) == (
        "unknown model 'Qwen/Qwen2.5-0.5B-Instruc': not a local folder and not reachable on the Hugging Face Hub; "
        "did you mean Qwen/Qwen2.5-0.5B-Instruct?"
    )


def test_the_command_prints_one_line_exits_2_and_writes_nothing_with_the_hub_unreachable(tmp_path, closing_hub):
    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "r.duckdb"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=closing_hub.url, HF_HOME=str(tmp_path / "hf"), PATTRIEVAL_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--model", "smok", "--dataset", str(data),
                           "--db", str(db)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown model 'smok': ") and lines[0].endswith(
        "; did you mean smoke?"), proc.stderr  # no retry warnings before it
    assert "cannot be reached" in lines[0]
    assert closing_hub.tries("smok") == 1, closing_hub.paths
    assert not any("resolve" in path for path in closing_hub.paths)  # from_pretrained never ran
    assert not db.exists()


def test_the_hub_is_asked_about_a_name_with_no_ones_token(monkeypatch):
    """Only reachability is judged, so the operator's HF_TOKEN never travels with a visitor's name."""
    from huggingface_hub import HfApi

    from engine.generation.model_check import hub_unreachable

    monkeypatch.setenv("HF_TOKEN", "hf_operator_secret")
    sent: list = []

    def model_info(self, name, *, timeout=None, token=None, **kwargs):
        sent.append(token)
        return object()

    monkeypatch.setattr(HfApi, "model_info", model_info)
    assert hub_unreachable("someone/private-model") is None
    assert sent == [False]


def test_the_smoke_model_is_written_once_whole_when_several_ask_at_once(tmp_path, monkeypatch):
    """Renamed into place: whoever asks while another writes gets a complete folder, never a
    config without its weights (the app and a CLI run, or two test workers, at once)."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoConfig

    from engine.generation.model_choice import SMOKE_DIR_NAME, smoke_model_dir

    monkeypatch.setenv("PATTRIEVAL_CACHE", str(tmp_path))
    (tmp_path / SMOKE_DIR_NAME).mkdir()  # a partial folder an older version left: no config
    (tmp_path / SMOKE_DIR_NAME / "model.safetensors").write_bytes(b"partial")
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: smoke_model_dir(), range(2)))
    assert paths == [tmp_path / SMOKE_DIR_NAME] * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [SMOKE_DIR_NAME]  # no staging folder left
    assert AutoConfig.from_pretrained(str(paths[0])).model_type == "llama"
    assert (paths[0] / "model.safetensors").stat().st_size > 1000
