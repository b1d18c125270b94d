"""The served-model options of `run`, `explain` and `verify` (--backend server: docs/serving.md)."""

from __future__ import annotations

import argparse

from engine.errors import UserError
from engine.usecases.served import ServerOptions, check_api_key_env

SERVER_OPTIONS = ("base_url", "tokenizer", "concurrency", "api_key_env", "request_timeout")


def add_server_args(p: argparse.ArgumentParser) -> None:
    """--base-url and friends of --backend server (run, explain, verify). No option takes the
    key itself: it is read from an environment variable, never from the command line."""
    g = p.add_argument_group("served models (--backend server; docs/serving.md)")
    g.add_argument(
        "--base-url", default=None, metavar="URL",
        help="with --backend server: the OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1; --model "
        "is then the name it serves the model under (default: none)",
    )
    g.add_argument(
        "--tokenizer", default=None, metavar="PATH|HUB_ID",
        help="with --backend server: apply the model's chat template here with this tokenizer and "
        "send the exact text a local run would, on the completions endpoint (default: the chat "
        "endpoint, the server applies the template)",
    )
    g.add_argument("--concurrency", type=int, default=None, metavar="N",
                   help="with --backend server: requests in flight (default: as many as the server computes at "
                   "once where it says so, llama.cpp's slots; else found by starting at 1 and adding one while "
                   "the answers' latency holds, up to 8)")
    g.add_argument(
        "--api-key-env", default=None, metavar="VAR",
        help="with --backend server: the environment variable holding the API key; the key is "
        "never stored, printed or logged (default: OPENAI_API_KEY when set, else no key)",
    )
    g.add_argument("--request-timeout", type=float, default=None, metavar="S",
                   help="with --backend server: seconds one request may take (default: 300)")


def server_options(args: argparse.Namespace, model: str | None = None):
    """The ServerOptions of --backend server, or None; refuses server options without it and a
    key where a variable's name belongs."""
    backend = getattr(args, "backend", "local")
    if backend != "server":
        given = [f"--{n.replace('_', '-')}" for n in SERVER_OPTIONS if getattr(args, n, None) is not None]
        if given:
            raise UserError(f"{given[0]} needs --backend server")
        return None

    env = args.api_key_env
    check_api_key_env(env)
    if not args.base_url:
        raise UserError("--backend server needs --base-url (for example http://127.0.0.1:8000/v1)")
    return ServerOptions(
        base_url=args.base_url, model=model if model is not None else args.model, tokenizer=args.tokenizer,
        concurrency=args.concurrency, api_key_env=env,
        timeout=300.0 if args.request_timeout is None else args.request_timeout,
    )
