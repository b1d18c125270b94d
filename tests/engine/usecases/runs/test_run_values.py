"""One builder for a run request (engine.usecases.runs.run_options), and its errors in each face's words
: the CLI names a field by its option, the app by its form's label, never by an option
or a command a visitor of a web page cannot type."""

from __future__ import annotations

from dataclasses import replace

import pytest

from demo.handlers.grid import run_form
from demo.handlers.run import RunForm, build_run_request
from demo.settings import AppSettings
from engine.errors import FieldError, UserError

CYRILLIC_O = "\u043e"

# Every field of the Run tab a visitor can get wrong, single values and grid lists alike.
BAD_FORMS: dict[str, list[dict]] = {
    "temperature": [{"sample": True, "temperature": 0.0}, {"temperature": 0.5}, {"temperature": float("nan")}],
    "top_p": [{"top_p": 1.5}, {"top_p": 0.9}],
    "sample_top_k": [{"sample_top_k": -1}, {"sample_top_k": 5}],
    "seed": [{"seed": -3}, {"seed": 2**31}],
    "top_logprobs": [{"top_logprobs": 99}],
    "batch_size": [{"batch_size": 0}],
    "max_new_tokens": [{"max_new_tokens": 0}],
    "limit": [{"limit": 0}],
    "top_k": [{"top_k": 0}, {"top_k": "3,0"}, {"top_k": "3,,5"}, {"top_k": "2,x"}],
    "order": [{"order": "sideways"}, {"order": "ranked,sideways"}, {"order": "ranked,ranked"}],
    "few_shot": [{"few_shot": 3}, {"few_shot": "0,9"}, {"few_shot": "0,x"}],
    "xai": [{"xai": "why"}, {"xai": "none,why"}],
    "relevant_at": [{"relevant_at": "top"}, {"relevant_at": "ranked,top"}],
    "repetition": [{"repetition": "x"}, {"repetition": "none,x"}],
    "label_scope": [{"label_scope": "x"}, {"label_scope": "all,x"}],
    "quantize": [{"quantize": "3bit"}],
    "modes": [{"modes": ("vanilla", "both")}, {"modes": ("base", "base")}, {"modes": (" ",)}],
    "metadata": [{"metadata": "age"}, {"metadata": "gendr"}, {"metadata": "gender,gender"},
                 {"metadata": "gender,age,city", "label_a": "a", "label_b": "b", "consideration": "c"},
                 {"metadata": "gender,age"}],
    "labels": [{"metadata": "age", "label_a": "young"}, {"metadata": "age", "consideration": "c"},
               {"metadata": "age", "label_a": "x", "label_b": "x", "consideration": "c"}],
    "experiment": [{"experiment": "x" * 101}, {"experiment": f"pil{CYRILLIC_O}t-run"}],
    "study": [{"study": "s" * 101, "top_k": "1,2"}, {"study": f"pil{CYRILLIC_O}t", "top_k": "1,2"}],
    "model": [{"model": "smoke,smoke"}],
    "actors": [{"backend": "ray", "actors": 0}, {"backend": "ray", "actors": 0, "top_k": "1,2"}],
    "gpus_per_actor": [{"backend": "ray", "gpus_per_actor": -1.0}],
}
CASES = [(field, changes) for field, forms in BAD_FORMS.items() for changes in forms]


@pytest.mark.parametrize("field, changes", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_the_run_forms_errors_speak_the_apps_words(tmp_path, field, changes):
    """Whatever a visitor gets wrong, single run or grid, the one line names the form's box, never
    a CLI option (`--top-k`) or a command (`python -m engine`). Once, 22 such hints did."""
    settings = AppSettings(tmp_path / "db.duckdb")
    with pytest.raises(UserError) as caught:
        run_form(None, settings, RunForm(**changes))  # refused before anything is queued: no job queue needed
    message = str(caught.value)
    assert "--" not in message and "python -m" not in message and "\n" not in message, message
    assert not isinstance(caught.value, FieldError)  # worded here, not left to the caller
    assert not (tmp_path / "db.duckdb").exists()


def test_a_field_error_reaching_a_toast_is_worded_with_the_forms_labels():
    from demo.toasts import refused
    from engine.prompting.study import parse_list

    with pytest.raises(FieldError) as caught:
        parse_list("top_k", "3,0")
    assert caught.value.field == "top_k"
    assert refused(caught.value, "test") == "the cut-off k must be at least 1, not 0"


def test_the_cli_names_the_same_errors_by_their_options():
    from engine.commands._field_words import cli_message
    from engine.usecases.runs.run_options import build_run_request as build

    for values, expected in (
        ({"model": "m", "top_k": 0}, "--top-k must be at least 1, not 0"),
        ({"model": "m", "temperature": 0.5}, "--temperature 0.5 needs --sample: decoding is greedy without it and "
                                             "would ignore --temperature"),
        ({"model": "m", "metadata": "age", "label_a": "young"}, "metadata type 'age': --label-b and --consideration "
                                                                "are missing (a type of your own needs all of "
                                                                "--label-a, --label-b and --consideration)"),
        ({"model": "m", "modes": ("vanilla", "fancy")}, "--modes: unknown mode(s) fancy; choose from vanilla,base,cf"),
    ):
        with pytest.raises(FieldError) as caught:
            build(values)
        assert cli_message(caught.value) == expected


def test_the_cli_and_the_app_build_equal_requests_from_equal_values(tmp_path):
    """One builder: the same values typed as options and chosen in the form give one RunRequest."""
    from engine.__main__ import build_parser
    from engine.commands.run import build_request
    from engine.usecases.runs.run_options import build_run_request as build

    model = "Qwen/Qwen2.5-0.5B-Instruct"  # resolves to itself in both faces: nothing is loaded
    typed = ["run", "--dataset", "d.jsonl", "--model", model, "--modes", "base,vanilla", "--metadata", "age",
             "--label-a", "a young person", "--label-b", "an old person", "--consideration", "Ages differ.",
             "--top-k", "3", "--order", "random", "--few-shot", "1", "--xai", "direct", "--relevant-at", "first",
             "--repetition", "distractor", "--label-scope", "relevant", "--sample", "--temperature", "0.7",
             "--top-p", "0.9", "--sample-top-k", "5", "--seed", "11", "--batch-size", "3", "--max-new-tokens", "21",
             "--top-logprobs", "2", "--limit", "7", "--experiment", "same-values", "--skip-invalid"]
    args = build_parser().parse_args(typed)
    from engine.commands.run import configuration_args
    from engine.usecases.study.study import grid_of

    grid = grid_of(vars(args))  # as `run` does: its list options parsed, then one configuration's values
    cli = build_request(configuration_args(args, grid.configurations()[0], grid), model, model)
    form = RunForm(model=model, modes=("base", "vanilla"), metadata="age", label_a="a young person",
                   label_b="an old person", consideration="Ages differ.", top_k=3, order="random", few_shot=1,
                   xai="direct", relevant_at="first", repetition="distractor", label_scope="relevant", sample=True,
                   temperature=0.7, top_p=0.9, sample_top_k=5, seed=11, batch_size=3, max_new_tokens=21,
                   top_logprobs=2, limit=7, experiment="same-values", skip_invalid=True)
    app = build_run_request(AppSettings(tmp_path / "db.duckdb"), form)
    assert app == cli
    assert app.modes == ("vanilla", "base") and app.prompt.metadata.name == "age"
    direct = build({"model": model, "modes": ("base", "vanilla"), "metadata": "age", "label_a": "a young person",
                    "label_b": "an old person", "consideration": "Ages differ.", "top_k": 3, "order": "random",
                    "few_shot": 1, "xai": "direct", "relevant_at": "first", "repetition": "distractor",
                    "label_scope": "relevant", "sample": True, "temperature": 0.7, "top_p": 0.9, "sample_top_k": 5,
                    "seed": 11, "batch_size": 3, "max_new_tokens": 21, "top_logprobs": 2, "limit": 7,
                    "experiment": "same-values", "skip_invalid": True}, model_label=model)
    assert direct == cli
    # The app's own policy stays the app's: the operator's item cap.
    capped = build_run_request(AppSettings(tmp_path / "db.duckdb", max_items=4), form)
    assert capped == replace(cli, limit=4)


def _speaks_the_apps_words(message: str) -> None:
    assert "--" not in message and "python -m" not in message and "\n" not in message, message


SERVED = RunForm(model="smollm2", backend="server", base_url="http://127.0.0.1:9/v1", modes=("vanilla",),
                 api_key_env="PATTRIEVAL_APP_TEST_KEY", concurrency=2, request_timeout=60.0)
# engine.usecases.served's checks, each with its line on the command line (unchanged) and in the app.
SERVED_ERRORS: list[tuple[dict[str, object], str, str]] = [
    ({"api_key_env": "sk-abc123"}, "--api-key-env takes the NAME", "the API key's environment variable takes the NAME"),
    ({"base_url": " "}, "--backend server needs --base-url (for example http://127.0.0.1:8000/v1)",
     "the backend server needs the server base URL (for example http://127.0.0.1:8000/v1)"),
    ({"model": "smoke"}, "--backend server needs --model: the model name", "the backend server needs the model: the"),
    ({"concurrency": 0}, "--concurrency must be at least 1", "requests in flight must be at least 1"),
    ({"request_timeout": 0.0}, "--request-timeout must be a number of seconds above 0, not 0.0",
     "the request timeout must be a number of seconds above 0, not 0.0"),
]


@pytest.mark.parametrize("changes, cli, app", SERVED_ERRORS, ids=[next(iter(e[0])) for e in SERVED_ERRORS])
def test_the_served_forms_errors_speak_the_apps_words_and_the_cli_its_options(tmp_path, changes, cli, app):
    from engine.commands._field_words import cli_message
    from engine.usecases.served import ServerOptions, check_server

    settings = AppSettings(tmp_path / "db.duckdb")
    for form in (replace(SERVED, **changes), replace(SERVED, study="g", **changes)):
        with pytest.raises(UserError) as caught:
            run_form(None, settings, form)
        _speaks_the_apps_words(str(caught.value))
        assert str(caught.value).startswith(app)
    options = {"base_url": "http://h/v1", "model": "m", "concurrency": None, "api_key_env": None, "timeout": 300.0}
    # As `run --backend server` builds them (engine.commands._served_options), on the CLI's line.
    options.update({"timeout" if k == "request_timeout" else k: v.strip() if isinstance(v, str) else v
                    for k, v in changes.items()})
    with pytest.raises(FieldError) as typed:
        check_server(ServerOptions(**options), None)
    assert cli_message(typed.value).startswith(cli)


def test_invalid_items_name_the_skip_box_in_the_app_and_the_option_on_the_command_line(tmp_path):
    """The dataset loader's way out (run the others, skipping the invalid) in the upload check, the
    grid's plan and a failed job's line: the form's tick box, never --skip-invalid."""
    import json

    from demo.handlers.grid import plan_run
    from demo.handlers.run import validate_upload
    from engine.commands._field_words import cli_message
    from engine.datasets.data import load_dataset

    rows = [{"id": f"q{i}", "question": "q" if i != 3 else 42, "answers": ["a"],
             "documents": [{"text": "a", "relevant": True}]} for i in (1, 2, 3)]
    path = tmp_path / "three.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = AppSettings(tmp_path / "db.duckdb", allow_local_paths=True)
    checked = validate_upload(settings, str(path))
    _speaks_the_apps_words(checked)
    assert checked.endswith("(1 of 3 items; run the other 2 with skip invalid items ticked)")
    with pytest.raises(UserError) as planned:  # the grid's plan reads the dataset in the capped child
        plan_run(settings, RunForm(top_k="1,2", dataset=str(path)))
    _speaks_the_apps_words(str(planned.value))
    assert "run the other 2 with skip invalid items ticked" in str(planned.value)
    with pytest.raises(FieldError) as loaded:
        load_dataset(path)
    assert cli_message(loaded.value).endswith("(1 of 3 items; run the other 2 with --skip-invalid)")


def test_the_explain_checks_speak_each_faces_words(tmp_path):
    from demo.field_words import app_message
    from engine.commands._field_words import cli_message
    from engine.usecases.judges.explain import ExplainRequest, check_request

    for changes, cli, app in (({"batch_size": 0}, "--batch-size must be at least 1", "the batch size must be at least 1"),
                              ({"limit": 0}, "--limit must be at least 1", "the item limit must be at least 1"),
                              ({"model": " "}, "--model must not be empty", "the model must not be empty")):
        with pytest.raises(FieldError) as caught:
            check_request(ExplainRequest(tmp_path / "db.duckdb", experiment="x", **changes))
        assert (cli_message(caught.value), app_message(caught.value)) == (cli, app)
