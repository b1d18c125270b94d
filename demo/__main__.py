"""`python -m demo`: launch the app (flags, environment settings, then Gradio)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m demo", description="Launch the PAttriEval app.")
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB, /data/pattrieval.duckdb or "
                   "results/pattrieval.duckdb)")
    p.add_argument("--host", default=None, help="address to listen on (default: $GRADIO_SERVER_NAME or 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: $GRADIO_SERVER_PORT or 7860)")
    p.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    p.add_argument("--read-only", action="store_true", help="browse only: no runs (or PATTRIEVAL_READ_ONLY=1)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from demo.app import build_app
    from demo.settings import settings_from_env
    from engine.errors import UserError

    try:
        settings = settings_from_env(args.db, args.read_only)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    app = build_app(settings)
    try:
        app.launch(server_name=args.host, server_port=args.port, share=args.share)
    finally:
        app.jobs.shutdown(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
