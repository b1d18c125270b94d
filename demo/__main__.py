"""`python -m demo`: launch the app (flags, environment settings, the results repo, then Gradio)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m demo", description="Launch the PAttriEval app.",
        epilog="Operator settings (environment): PATTRIEVAL_DB, PATTRIEVAL_READ_ONLY, PATTRIEVAL_MAX_ITEMS, "
        "PATTRIEVAL_ALLOWED_MODELS, PATTRIEVAL_MAX_UPLOAD_MB, PATTRIEVAL_LOCAL_PATHS, PATTRIEVAL_RESULTS_REPO, "
        "PATTRIEVAL_RESULTS_FILE, PATTRIEVAL_MAX_NEW_TOKENS, PATTRIEVAL_MAX_TOP_LOGPROBS, "
        "PATTRIEVAL_MAX_JOBS_PER_VISITOR, PATTRIEVAL_MAX_QUEUED_JOBS, PATTRIEVAL_OPERATOR; see the README.",
    )
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB, /data/pattrieval.duckdb or "
                   "results/pattrieval.duckdb)")
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
    from demo.app import build_app
    from demo.results_repo import merge_at_start
    from demo.settings import settings_from_env
    from engine.errors import UserError
    from store.db import check_database

    try:
        settings = settings_from_env(args.db, args.read_only, share=args.share,
                                     local_paths=False if args.no_local_paths else None,
                                     operator=True if args.operator else None)
        # A folder, a foreign or damaged file, or a newer schema is refused before anything
        # starts (nothing is written; a path that does not exist yet is created by the first run).
        check_database(settings.db_path)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    merge_at_start(settings)  # one line; the app starts whatever happens
    app = build_app(settings)
    try:
        app.launch(server_name=args.host, server_port=args.port, share=args.share,
                   max_file_size=settings.max_upload_bytes)
    finally:
        app.jobs.shutdown(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
