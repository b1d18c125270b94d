"""`python -m demo`: launch the app (flags, environment settings, the results repo, then Gradio)."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

from demo import settings as s
from demo.app import build_app
from demo.results_repo import merge_at_start
from demo.settings import settings_from_env
from engine.errors import UserError, message_line
from engine.paths import DEFAULT_DB_HELP

# The console script pyproject.toml installs; any other start is named as the module.
CONSOLE_SCRIPT = "pattrieval-app"
MODULE_PROG = "python -m demo"


def program_name(argv0: str | None = None) -> str:
    """`pattrieval-app` after `pip install`, else `python -m demo` (as engine.__main__.program_name)."""
    name = os.path.basename(sys.argv[0] if argv0 is None and sys.argv else argv0 or "")
    name = name[:-4] if name.lower().endswith(".exe") else name
    return CONSOLE_SCRIPT if name == CONSOLE_SCRIPT else MODULE_PROG


def operator_settings() -> str:
    """The environment an operator sets, with each default, for --help: an installed package
    carries no README or docs/ (docs/operations.md says the same at more length)."""
    space = ("Space", "desktop")  # where strangers are served (SPACE_ID set, or --share) / otherwise
    rows = [
        ("PATTRIEVAL_DB", "the store (default: as --db says); --db"),
        ("PATTRIEVAL_READ_ONLY=1", "browse only, no runs; --read-only"),
        ("PATTRIEVAL_LOCAL_PATHS=0|1", "whether a dataset path or model folder on this machine may be named "
         f"({space[0]}: 0, {space[1]}: 1); --no-local-paths"),
        ("PATTRIEVAL_OPERATOR=0|1", f"every visitor sees and cancels every job ({space[0]}: 0, {space[1]}: 1); "
         "--operator"),
        ("PATTRIEVAL_ALLOWED_MODELS", "comma-separated model ids offered, and the only ones HF_TOKEN may load; "
         f"'*' = any Hub id; smoke always ({space[0]}: {', '.join(s.SPACE_MODELS)}; {space[1]}: any)"),
        ("PATTRIEVAL_MAX_ITEMS", f"items per run started from the app ({space[0]}: {s.SPACE_MAX_ITEMS}; "
         f"{space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_NEW_TOKENS", f"new tokens per answer ({space[0]}: {s.SPACE_MAX_NEW_TOKENS}; "
         f"{space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_TOP_LOGPROBS", f"top log-probs per token ({space[0]}: {s.SPACE_MAX_TOP_LOGPROBS}; "
         f"{space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_JOBS_PER_VISITOR", f"jobs one visitor may have queued or running "
         f"({space[0]}: {s.SPACE_MAX_JOBS_PER_VISITOR}; {space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_QUEUED_JOBS", f"jobs waiting, all visitors together ({space[0]}: {s.SPACE_MAX_QUEUED_JOBS}; "
         f"{space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_JOBS_PER_CLIENT", f"jobs one client address may have queued or running, all its sessions "
         f"({space[0]}: {s.SPACE_MAX_JOBS_PER_CLIENT}; {space[1]}: no cap)"),
        ("PATTRIEVAL_TRUST_FORWARDED_FOR=0|1", "X-Forwarded-For names the visitor, by the address the "
         "trusted proxy appended (on a Hugging Face Space: 1; elsewhere: 0, the socket's peer)"),
        ("PATTRIEVAL_TRUSTED_PROXY_HOPS", "appending proxies in front of the app where X-Forwarded-For is "
         f"trusted: the visitor is the address this many from the header's end ({s.DEFAULT_TRUSTED_PROXY_HOPS})"),
        ("PATTRIEVAL_VISITOR_SECRET", "the key of the tag a visitor's uploaded labels are stored under "
         "(visitor <tag>: <name>); unset: a random key per app process, so tags change at each restart"),
        ("PATTRIEVAL_MAX_JOB_MB", f"store MB one job may write, estimated before it starts ({space[0]}: "
         f"{s.SPACE_MAX_JOB_MB}; {space[1]}: no quota)"),
        ("PATTRIEVAL_MAX_STORE_MB", f"store MB jobs may grow the store to ({space[0]}: {s.SPACE_MAX_STORE_MB}; "
         f"{space[1]}: no quota)"),
        ("PATTRIEVAL_MAX_DOWNLOADS_MB", f"MB of downloads kept an hour, all visitors ({space[0]}: "
         f"{s.SPACE_MAX_DOWNLOADS_MB}; {space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_DOWNLOADS_PER_VISITOR_MB", f"the same, one client address ({space[0]}: "
         f"{s.SPACE_MAX_DOWNLOADS_PER_VISITOR_MB}; {space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_CONFIGURATIONS", f"configurations in one study grid from the Run tab "
         f"({space[0]}: {s.SPACE_MAX_CONFIGURATIONS}; {space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_FIT_DECISIONS", "documents x answers one citation choice model (Why-cited) may fit "
         f"({s.DEFAULT_MAX_FIT_DECISIONS:,}, everywhere)"),
        ("PATTRIEVAL_FIT_MEMORY_MB", "address space in MB of the child process one Why-cited fit (or Judges-tab "
         "agreement or label import) runs in; more is "
         f"refused in one line ({s.DEFAULT_FIT_MEMORY_MB:,}, everywhere)"),
        ("PATTRIEVAL_FIT_TIMEOUT_S", "CPU seconds one Why-cited fit may take before it is stopped and refused in one line "
         f"({s.DEFAULT_FIT_TIMEOUT_S}, everywhere)"),
        ("PATTRIEVAL_JUDGES_TIMEOUT_S", "CPU seconds one Judges-tab agreement or label import may take in its child "
         f"process before it is stopped and refused in one line ({s.DEFAULT_JUDGES_TIMEOUT_S}, everywhere)"),
        ("PATTRIEVAL_MAX_FITS", "Why-cited fits running at once; a few more wait their turn, one per visitor "
         f"({s.DEFAULT_MAX_FITS}, everywhere)"),
        ("PATTRIEVAL_MAX_UPLOAD_MB", f"the largest dataset upload in MB ({s.DEFAULT_MAX_UPLOAD_MB})"),
        ("PATTRIEVAL_MAX_UPLOADS_MB", f"MB all uploads may hold on disk (kept an hour) before more are refused "
         f"({space[0]}: {s.SPACE_MAX_UPLOADS_MB}; {space[1]}: no cap)"),
        ("PATTRIEVAL_MAX_UPLOADS_PER_VISITOR_MB", f"the same, one client address's uploads ({space[0]}: "
         f"{s.SPACE_MAX_UPLOADS_PER_VISITOR_MB}; {space[1]}: no cap)"),
        ("PATTRIEVAL_PRIVATE_ITEMS", "a file of item ids, one a line: a private split that counts in no number; "
         "the app then shows the Leaderboard tab alone"),
        ("PATTRIEVAL_RESULTS_REPO", "OWNER/NAME of a Hugging Face dataset repo whose results store is merged "
         "in at start (none)"),
        ("PATTRIEVAL_RESULTS_FILE", f"that store's file in the repo ({s.DEFAULT_RESULTS_FILE})"),
        ("PATTRIEVAL_CACHE", "where the offline smoke model is written (/data/pattrieval-cache where /data "
         "is writable, else ~/.cache/pattrieval, else a temporary folder)"),
        ("PATTRIEVAL_MAX_ANSWER_MB", "MB one answer of a served model may take before its log-probs' room; more is "
         "refused in one line (8, everywhere)"),
        ("PATTRIEVAL_MAX_REQUEST_S", "seconds one request to a served model may take, whatever --request-timeout "
         "or the Run tab asks (no bound beyond theirs)"),
        ("HF_TOKEN", "the operator's Hub token: loads only the PATTRIEVAL_ALLOWED_MODELS where strangers are "
         "served, and merges a private PATTRIEVAL_RESULTS_REPO"),
        ("GRADIO_SERVER_NAME, GRADIO_SERVER_PORT", "--host, --port"),
    ]

    # Every PATTRIEVAL_ name keeps its meaning on its own line (tests/test_packaging.py reads them so).
    width = max(len(name) for name, _ in rows if name.startswith("PATTRIEVAL_"))
    indent = " " * (width + 4)
    lines = textwrap.wrap("operator settings (environment variables; the defaults where strangers are served, "
                          "that is on a Hugging Face Space (SPACE_ID set) or with --share, and on the desktop):", 100)
    for name, meaning in rows:
        head = f"  {name}" if len(name) > width else f"  {name:{width}}  "
        text = f"{head}\n{indent}{meaning}" if len(name) > width else head + meaning
        lines.append(textwrap.fill(text, 100, subsequent_indent=indent, replace_whitespace=False,
                                   break_on_hyphens=False))
    return "\n".join(lines)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The app's flags; `prog` defaults to the name it was started by (program_name)."""
    p = argparse.ArgumentParser(
        prog=prog or program_name(), description="Launch the PAttriEval app.",
        epilog=operator_settings(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--db", default=None, help=f"DuckDB file (default: {DEFAULT_DB_HELP})")
    p.add_argument("--host", default=None, help="address to listen on (default: $GRADIO_SERVER_NAME or 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: $GRADIO_SERVER_PORT or 7860)")
    p.add_argument("--share", action="store_true", help="also open a public gradio.live link (turns local paths off)")
    p.add_argument("--read-only", action="store_true", help="browse only: no runs (or PATTRIEVAL_READ_ONLY=1)")
    p.add_argument("--no-local-paths", action="store_true",
                   help="accept only the bundled sample and uploads as datasets, and only Hub ids as models "
                   "(default: on a Space or with --share; or PATTRIEVAL_LOCAL_PATHS=0)")
    p.add_argument("--operator", action="store_true",
                   help="every visitor is the operator: sees and cancels every job (default: on the desktop, off "
                   "on a Space or with --share; or PATTRIEVAL_OPERATOR=1)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from store.db import check_database

    try:
        settings = settings_from_env(args.db, args.read_only, share=args.share,
                                     local_paths=False if args.no_local_paths else None,
                                     operator=True if args.operator else None)
        # A folder, a foreign or damaged file, or a newer schema is refused before anything
        # starts (nothing is written; a path that does not exist yet is created by the first run).
        check_database(settings.db_path)
    except UserError as err:
        print(f"error: {message_line(err)}", file=sys.stderr)
        return 2
    merge_at_start(settings)  # one line; the app starts whatever happens
    app = build_app(settings)
    from demo.uploads import upload_middleware

    try:
        app.launch(server_name=args.host, server_port=args.port, share=args.share,
                   max_file_size=settings.max_upload_bytes, app_kwargs={"middleware": upload_middleware(settings)})
    finally:
        app.jobs.shutdown(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
