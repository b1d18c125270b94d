"""Before a model loads: can this name load here at all, and which known name was meant?

Why a pre-check: `from_pretrained` of an id that is neither a folder nor cached, on a machine
where the Hugging Face Hub cannot be reached, retries each file for about a minute and prints a
dozen lines of retry warnings before its error (and the app's job sits in "loading" as long).
One short metadata request, without retries, tells the same thing at once:
- a local folder, or an id whose config is in the Hub cache: loads, nothing asked;
- HF_HUB_OFFLINE set, or no answer from the Hub within HUB_TIMEOUT_S: refused in one line;
- the Hub answers (the model, a 404, a gated or private repo): `load_model` goes on and maps
  what it meets (engine.generation.models), this module's suggestion included.

`engine.generation.models.load_model` and the Ray driver's tokenizer load call it first, so the command
line, the app's jobs, explain and verify all fail the same way.

The suggestion ("did you mean smoke?") is the closest of the names this tool knows: smoke,
auto, the paper's models, the CPU model and the model ids in the local Hub cache.
"""

from __future__ import annotations

import threading
from pathlib import Path

from engine.errors import UserError
from engine.generation.model_choice import CPU_MODEL, PAPER_MODELS, SMOKE

HUB_TIMEOUT_S = 3.0  # a refused or unresolvable Hub fails at once; this bounds a silent network
_NETWORK_MODULES = ("httpx", "httpx2", "httpcore", "httpcore2", "requests", "urllib3")


def cached_model_ids() -> list[str]:
    """The model ids in the local Hugging Face cache (best effort: none when it cannot be read)."""
    try:
        from huggingface_hub import constants, scan_cache_dir

        # The cache named explicitly: scan_cache_dir's default is bound when it is first imported,
        # while try_to_load_from_cache reads the setting when called; both must see one cache.
        repos = scan_cache_dir(constants.HF_HUB_CACHE).repos
        return sorted(r.repo_id for r in repos if r.repo_type == "model")
    except Exception:  # noqa: BLE001 - no cache, an unreadable one: nothing to suggest from
        return []


def known_names() -> list[str]:
    """The names a user most likely meant: the tool's own, then what this machine has cached."""
    return list(dict.fromkeys([SMOKE, "auto", *PAPER_MODELS, CPU_MODEL, *cached_model_ids()]))


def suggestion(name: str, candidates: list[str] | None = None) -> str:
    """'; did you mean X?' for the closest of `candidates` (default: the names a user most likely
    meant, the machine's cached models included), or ''."""
    from engine.suggest import did_you_mean

    return did_you_mean(name, known_names() if candidates is None else candidates)


def _valid_repo_id(name: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _is_cached(name: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str)
    except Exception:  # noqa: BLE001 - an unreadable cache counts as no cache
        return False


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_unreachable(name: str, timeout: float = HUB_TIMEOUT_S, endpoint: str | None = None) -> str | None:
    """Why the Hub (`endpoint`, default $HF_ENDPOINT or huggingface.co) cannot be asked about
    `name` ('timed out', 'Name or service not known'), or None when it answered anything at all.
    One request, no retries; bounded by `timeout` even where name resolution hangs (the request
    runs in a thread left behind)."""
    outcome: list[BaseException | None] = []

    def ask() -> None:
        from huggingface_hub import HfApi

        try:
            # token=False: only reachability is judged here, so no one's token need travel
            # (a Space visitor's model must never be asked about with the operator's token).
            HfApi(endpoint=endpoint).model_info(name, timeout=timeout, token=False)
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - judged below, in the caller's thread
            outcome.append(err)

    thread = threading.Thread(target=ask, name="hub-check", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if not outcome:
        return "timed out"
    err = outcome[0]
    if err is None:
        return None
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(err, HfHubHTTPError):
        return None  # an HTTP answer (404, 401, 5xx): the Hub is there; loading says what it means
    if isinstance(err, OSError) or type(err).__module__.split(".")[0] in _NETWORK_MODULES:
        return _reason(err)
    return None  # not a network failure: let loading meet it and report it as it does


def _reason(err: BaseException) -> str:
    """The innermost message, without the errno prefix: 'Name or service not known'."""
    inner = err.__cause__ or err.__context__
    while inner is not None:
        err, inner = inner, inner.__cause__ or inner.__context__
    if isinstance(err, TimeoutError) or "timed out" in str(err).lower():
        return "timed out"
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if text.startswith("[Errno") and "] " in text:
        text = text.split("] ", 1)[1]
    return text.rstrip(".")


def check_model_name(name: str, *, revision: str | None = None, timeout: float = HUB_TIMEOUT_S) -> None:
    """Refuse, in one line and at once, a model name that cannot load here: not a folder, not
    cached, and the Hub off or unreachable (or not even a Hub id). Asks nothing of a folder or a
    cached id."""
    if Path(name).expanduser().exists():
        return
    if not _valid_repo_id(name):
        raise UserError(f"unknown model '{name}': not a local folder and not a Hugging Face model id{suggestion(name)}")
    if _is_cached(name, revision):
        return
    if _hub_offline():
        raise UserError(
            f"unknown model '{name}': not a local folder or a cached Hugging Face model, and the Hub is "
            f"switched off (HF_HUB_OFFLINE){suggestion(name)}"
        )
    why = hub_unreachable(name, timeout)
    if why is not None:
        raise UserError(
            f"unknown model '{name}': not a local folder or a cached Hugging Face model, and the Hub cannot "
            f"be reached ({why}){suggestion(name)}"
        )
