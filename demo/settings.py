"""What an operator sets when starting the app: flags of `python -m demo` or the environment.

"A Space" here means any app that strangers reach: Hugging Face sets SPACE_ID in every Space,
and `--share` opens a public link. There a visitor may never name a server path (a dataset
file, a model folder): only the bundled sample, an uploaded file or a Hub id. On the desktop
(`allow_local_paths`) a local path works too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from demo.fit_child import DEFAULT_FIT_MEMORY_MB, DEFAULT_FIT_TIMEOUT_S
from demo.judges_child import DEFAULT_JUDGES_TIMEOUT_S
from engine.errors import UserError
from engine.paths import default_db_path
from engine.usecases.bias.leaderboard import read_item_ids
from engine.usecases.runs.model_names import offered_models

DEFAULT_MAX_UPLOAD_MB = 50  # a 10-document dataset of 50 MB holds ~10,000 items: plenty for a visitor
# Where strangers are served (a Space, --share), unless the operator sets otherwise: the models
# visitors may run and the operator's HF_TOKEN may load (the paper's three, the CPU model; smoke
# needs no token and is always offered), and the bounds on what one visitor may ask of the worker
# and the store (~1.7 MB of store per answer at 20 top log-probs and 4,000 new tokens).
SPACE_MODELS = offered_models()
SPACE_MAX_ITEMS = 1000
SPACE_MAX_NEW_TOKENS = 512
SPACE_MAX_TOP_LOGPROBS = 5
SPACE_MAX_JOBS_PER_VISITOR = 3  # queued or running, per visitor (Gradio session)
SPACE_MAX_QUEUED_JOBS = 20  # waiting, all visitors together
# Sessions are free (a new gradio_client is a new one), so the bound that holds is per client
# address (demo.visitors.client_key): 10 sessions of one client filled the 20-job queue. Above
# the per-session cap, for visitors sharing one address (a classroom behind one NAT).
SPACE_MAX_JOBS_PER_CLIENT = 5
# Quotas on what jobs store (engine.limits.estimate_answer_bytes), in MB: a 1,000-item run in
# three modes at the Space's limits is ~530 MB; a 12-configuration grid of it ~5.7 GB.
SPACE_MAX_JOB_MB = 1024
SPACE_MAX_STORE_MB = 10 * 1024
# What downloads (exports, query CSVs) may hold on the temp disk over an hour (demo.downloads).
SPACE_MAX_DOWNLOADS_MB = 2048
SPACE_MAX_DOWNLOADS_PER_VISITOR_MB = 200
# What Gradio's upload folder may hold before uploads are refused (demo.uploads): 80 uploads at
# the 50 MB per-file bound, beside Gradio's copies of the downloads above. One visitor (client
# address) may hold 4 uploads at that bound, so that one client alone cannot fill the folder and
# leave everyone else refused until its files are an hour old.
SPACE_MAX_UPLOADS_MB = 4096
SPACE_MAX_UPLOADS_PER_VISITOR_MB = 200
# Proxies in front of the app that each append the address they saw to X-Forwarded-For (a
# Hugging Face Space: its one proxy), where the header is trusted (demo.visitors).
DEFAULT_TRUSTED_PROXY_HOPS = 1
# A study grid queued from the Run tab is one job that runs every configuration: where strangers
# are served, its size is bounded like a run's items (a 2 x 3 x 2 grid fits).
SPACE_MAX_CONFIGURATIONS = 12
# The Bias tab's choice model (`/why_cited`) fits in a bounded child process (demo.fit_child;
# its memory and time: DEFAULT_FIT_MEMORY_MB, DEFAULT_FIT_TIMEOUT_S), one fit at a time unless
# the operator allows more, others waiting their turn: at most this many citation decisions
# (documents shown x answers) per fit, everywhere (the desktop too): at 500,000 answers x 10
# documents about 8 s of CPU, 1.9 GB of address space and 0.9 GB resident in the child, both
# fits read a chunk of runs at a time (docs/figures.md). The CLI has no bound.
DEFAULT_MAX_FIT_DECISIONS = 5_000_000
DEFAULT_MAX_FITS = 1
DEFAULT_RESULTS_FILE = "pattrieval.duckdb"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class AppSettings:
    """The app's settings; `build_app(settings)` reads nothing else."""

    db_path: Path
    read_only: bool = False  # browse only: no runs
    max_items: int | None = None  # cap on items per run started from the app (a Space's visitors)
    allowed_models: tuple[str, ...] | None = None  # None: any Hub id or local folder
    max_upload_mb: int = DEFAULT_MAX_UPLOAD_MB  # dataset uploads larger than this are refused
    # A dataset path typed in, and a local model folder, are accepted only when this is on (the
    # desktop); `settings_from_env` turns it off on a Space and with --share.
    allow_local_paths: bool = True
    results_repo: str | None = None  # a Hub dataset repo whose results store is merged at start
    results_file: str = DEFAULT_RESULTS_FILE  # that store's file name inside the repo
    # Every visitor is the operator: sees and cancels every job (the desktop; --operator). Off
    # where strangers are served: each sees and cancels only the jobs of their own session.
    operator_view: bool = True
    # The models the operator's HF_TOKEN may load for a visitor who typed no token; None: any
    # (the desktop, where the visitor is the operator). Other models load with the visitor's
    # typed token or none at all.
    operator_token_models: tuple[str, ...] | None = None
    max_new_tokens: int | None = None  # server-side bounds on a run's options (None: no bound)
    max_top_logprobs: int | None = None
    max_jobs_per_visitor: int | None = None  # queued or running jobs of one visitor
    max_queued_jobs: int | None = None  # jobs waiting, all visitors together
    max_jobs_per_client: int | None = None  # queued or running jobs of one client address, all its sessions
    # Whether X-Forwarded-For names the visitor (behind Hugging Face's proxy, SPACE_ID set);
    # elsewhere anyone may write that header, and the socket's peer is used.
    trust_forwarded_for: bool = False
    # Where trusted: the visitor is the address this many appending proxies from the header's end.
    trusted_proxy_hops: int = DEFAULT_TRUSTED_PROXY_HOPS
    max_job_mb: int | None = None  # store MB one job may write, estimated before it starts
    max_store_mb: int | None = None  # store MB jobs may grow the store to
    max_downloads_mb: int | None = None  # MB of downloads kept on disk (an hour), all visitors
    max_downloads_per_visitor_mb: int | None = None  # the same, one visitor (client address)
    max_uploads_mb: int | None = None  # MB Gradio's upload folder may hold, all visitors (None: no bound)
    max_uploads_per_visitor_mb: int | None = None  # the same, one visitor's uploads (client address)
    # Configurations in one study grid started from the Run tab (None: no bound).
    max_configurations: int | None = None
    # Citation decisions (documents shown x answers) in one `/why_cited` fit.
    max_fit_decisions: int = DEFAULT_MAX_FIT_DECISIONS
    fit_memory_mb: int = DEFAULT_FIT_MEMORY_MB  # address space of one fit's child process
    fit_timeout_s: int = DEFAULT_FIT_TIMEOUT_S  # wall clock of one fit's child process
    max_fits: int = DEFAULT_MAX_FITS  # fits running at once; others wait their turn
    # CPU seconds of the child process one Judges-tab agreement or label import runs in (demo.judges_child).
    judges_timeout_s: int = DEFAULT_JUDGES_TIMEOUT_S
    # The Run tab's "backend" choice offers Ray (a cluster address, actors): the desktop only. A
    # Ray address reaches other machines, which a visitor of a Space must never name.
    allow_ray: bool = True
    # The "server" backend (an OpenAI-compatible server's URL, the NAME of the environment
    # variable holding its key): the desktop only, for the same reason, and since the key is read
    # from this process's environment, which a visitor must never spend.
    allow_server: bool = True
    # A private split of items (PATTRIEVAL_PRIVATE_ITEMS, a file of item ids): they count in no
    # number, and the app shows the Leaderboard tab alone, since every other tab shows items.
    private_items: frozenset[str] | None = None

    @property
    def max_upload_bytes(self) -> int:
        """The upload limit in bytes, as Gradio's launch(max_file_size=...) takes it."""
        return self.max_upload_mb * 1024 * 1024


def settings_from_env(db: str | None = None, read_only: bool = False, *, share: bool = False,
                      local_paths: bool | None = None, operator: bool | None = None) -> AppSettings:
    """Settings from flags, falling back on PATTRIEVAL_* environment variables (UserError if malformed)."""
    cap = os.environ.get("PATTRIEVAL_MAX_ITEMS")
    allowed = os.environ.get("PATTRIEVAL_ALLOWED_MODELS", "").strip()
    upload = os.environ.get("PATTRIEVAL_MAX_UPLOAD_MB", "").strip()
    if upload and not (upload.isdigit() and int(upload) > 0):
        raise UserError(f"PATTRIEVAL_MAX_UPLOAD_MB must be a whole number of megabytes above 0, not '{upload}'")
    if local_paths is None:
        local_paths = _flag("PATTRIEVAL_LOCAL_PATHS")
    strangers = bool(os.environ.get("SPACE_ID")) or share
    if local_paths is None:
        local_paths = not strangers
    if operator is None:
        operator = _flag("PATTRIEVAL_OPERATOR")
    # "*": any Hub id (the operator's token still serves only the default list).
    listed = tuple(m.strip() for m in allowed.split(",") if m.strip()) if allowed and allowed != "*" else None
    if allowed == "*" or not strangers:
        models = listed
    else:
        models = listed or SPACE_MODELS
    private = os.environ.get("PATTRIEVAL_PRIVATE_ITEMS", "").strip()
    return AppSettings(
        private_items=_private_items(private) if private else None,
        db_path=Path(db) if db else default_db_path(),
        read_only=read_only or os.environ.get("PATTRIEVAL_READ_ONLY", "") in ("1", "true", "yes"),
        max_items=int(cap) if cap and cap.isdigit() and int(cap) > 0 else (SPACE_MAX_ITEMS if strangers else None),
        allowed_models=models,
        max_upload_mb=int(upload) if upload else DEFAULT_MAX_UPLOAD_MB,
        allow_local_paths=bool(local_paths),
        results_repo=os.environ.get("PATTRIEVAL_RESULTS_REPO", "").strip() or None,
        results_file=os.environ.get("PATTRIEVAL_RESULTS_FILE", "").strip() or DEFAULT_RESULTS_FILE,
        operator_view=operator if operator is not None else not strangers,
        operator_token_models=(listed or SPACE_MODELS) if strangers else None,
        max_new_tokens=_bound("PATTRIEVAL_MAX_NEW_TOKENS", SPACE_MAX_NEW_TOKENS if strangers else None),
        max_top_logprobs=_bound("PATTRIEVAL_MAX_TOP_LOGPROBS", SPACE_MAX_TOP_LOGPROBS if strangers else None,
                                zero_ok=True),
        max_jobs_per_visitor=_bound("PATTRIEVAL_MAX_JOBS_PER_VISITOR", SPACE_MAX_JOBS_PER_VISITOR if strangers else None),
        max_queued_jobs=_bound("PATTRIEVAL_MAX_QUEUED_JOBS", SPACE_MAX_QUEUED_JOBS if strangers else None),
        max_configurations=_bound("PATTRIEVAL_MAX_CONFIGURATIONS", SPACE_MAX_CONFIGURATIONS if strangers else None),
        max_fit_decisions=_bound("PATTRIEVAL_MAX_FIT_DECISIONS", DEFAULT_MAX_FIT_DECISIONS) or DEFAULT_MAX_FIT_DECISIONS,
        fit_memory_mb=_bound("PATTRIEVAL_FIT_MEMORY_MB", DEFAULT_FIT_MEMORY_MB) or DEFAULT_FIT_MEMORY_MB,
        fit_timeout_s=_bound("PATTRIEVAL_FIT_TIMEOUT_S", DEFAULT_FIT_TIMEOUT_S) or DEFAULT_FIT_TIMEOUT_S,
        max_fits=_bound("PATTRIEVAL_MAX_FITS", DEFAULT_MAX_FITS) or DEFAULT_MAX_FITS,
        judges_timeout_s=_bound("PATTRIEVAL_JUDGES_TIMEOUT_S", DEFAULT_JUDGES_TIMEOUT_S) or DEFAULT_JUDGES_TIMEOUT_S,
        max_jobs_per_client=_bound("PATTRIEVAL_MAX_JOBS_PER_CLIENT", SPACE_MAX_JOBS_PER_CLIENT if strangers else None),
        trust_forwarded_for=_trust_forwarded_for(),
        trusted_proxy_hops=_bound("PATTRIEVAL_TRUSTED_PROXY_HOPS", DEFAULT_TRUSTED_PROXY_HOPS) or DEFAULT_TRUSTED_PROXY_HOPS,
        max_job_mb=_bound("PATTRIEVAL_MAX_JOB_MB", SPACE_MAX_JOB_MB if strangers else None),
        max_store_mb=_bound("PATTRIEVAL_MAX_STORE_MB", SPACE_MAX_STORE_MB if strangers else None),
        max_downloads_mb=_bound("PATTRIEVAL_MAX_DOWNLOADS_MB", SPACE_MAX_DOWNLOADS_MB if strangers else None),
        max_downloads_per_visitor_mb=_bound("PATTRIEVAL_MAX_DOWNLOADS_PER_VISITOR_MB",
                                            SPACE_MAX_DOWNLOADS_PER_VISITOR_MB if strangers else None),
        max_uploads_mb=_bound("PATTRIEVAL_MAX_UPLOADS_MB", SPACE_MAX_UPLOADS_MB if strangers else None),
        max_uploads_per_visitor_mb=_bound("PATTRIEVAL_MAX_UPLOADS_PER_VISITOR_MB",
                                          SPACE_MAX_UPLOADS_PER_VISITOR_MB if strangers else None),
        allow_ray=not strangers,
        allow_server=not strangers,
    )


def _trust_forwarded_for() -> bool:
    """PATTRIEVAL_TRUST_FORWARDED_FOR, else on a Hugging Face Space only (its proxy sets the header)."""
    flag = _flag("PATTRIEVAL_TRUST_FORWARDED_FOR")
    return bool(os.environ.get("SPACE_ID")) if flag is None else flag


def _bound(name: str, default: int | None, *, zero_ok: bool = False) -> int | None:
    """A whole-number bound from the environment (UserError if malformed), else `default`."""

    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or (int(value) == 0 and not zero_ok):
        raise UserError(f"{name} must be a whole number{'' if zero_ok else ' above 0'}, not '{value}'")
    return int(value)


def _flag(name: str) -> bool | None:
    """An on/off environment variable; None when unset (UserError when it is neither)."""

    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    if value in _TRUE + _FALSE:
        return value in _TRUE
    raise UserError(f"{name} must be 1 or 0, not '{value}'")


def without_server_paths(message: str, db_path: str | os.PathLike[str], *, dataset_path: str | None = None,
                         shown: str = "the store") -> str:
    """One line fit for any visitor: the database's path shown as `shown`, a dataset by its file
    name, and every other server path (its folder, temp and upload folders, caches) left out
    (store.server_paths: on a Space the store and the temp folder lie apart)."""
    from store.server_paths import HIDDEN, mask_server_paths

    path = Path(db_path)
    named = {str(path.resolve()): shown, str(path): shown, str(path.absolute()): shown}
    if dataset_path:
        named[dataset_path] = Path(dataset_path).name
    message = mask_server_paths(message, named, folders=[path.parent, path.parent.resolve()])
    # A relative store path ("runs.duckdb") stands for the store wherever it was resolved: its
    # folder is gone by now, so "…/the store" reads as what it is.
    message = message.replace(f"{HIDDEN}/{shown}", shown)
    return message.splitlines()[0] if message.strip() else "the database cannot be read"


def _private_items(path: str) -> frozenset[str]:
    """The item ids of the operator's private split; UserError in one line naming the setting."""
    try:
        return read_item_ids(path)
    except UserError as err:
        raise UserError(f"PATTRIEVAL_PRIVATE_ITEMS: {err}") from None
