"""Every name, label and consideration is bounded and free of control characters
in the CLI, the app and the Python API alike, before anything is written; stores that already
hold escape codes are escaped by `list` and `report`; pages get bounded labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main
from engine.bounds import (
    MAX_CONSIDERATION_CHARS,
    MAX_LABEL_CHARS,
    MAX_NAME_CHARS,
    PAGE_LABEL_CHARS,
    check_name,
    for_terminal,
)
from engine.errors import UserError
from engine.prompting.prompts import MetadataType, PromptConfig, metadata_type

ROOT = Path(__file__).resolve().parents[2]
ESC = "\x1b[2J\x1b[31m"  # clear screen, red


@pytest.mark.parametrize("limit", [MAX_NAME_CHARS, MAX_LABEL_CHARS, MAX_CONSIDERATION_CHARS])
def test_check_name_at_and_over_its_limit(limit):
    assert check_name("x" * limit, "it", limit) == "x" * limit
    with pytest.raises(UserError, match=rf"^it is {limit + 1:,} characters long \(at most {limit:,}\)$"):
        check_name("x" * (limit + 1), "it", limit)


@pytest.mark.parametrize("bad", ["\x1b", "\n", "\r", "\x7f", "\x9b", "\u202e", "\u2028", "\x00"])
def test_check_name_refuses_control_characters(bad):
    with pytest.raises(UserError, match=rf"^it holds the control character U\+{ord(bad):04X} at character 2;"):
        check_name("a" + bad + "b", "it")
    assert check_name("Ünïcode 名前 ok", "it")  # printable text of other scripts passes
    assert check_name("Ünïcode · 名前 ok", "it", one_script=False)  # and prose takes any punctuation


def test_the_api_refuses_before_anything_is_built():
    with pytest.raises(UserError, match="the metadata type's name is 101 characters long"):
        MetadataType("x" * 101, "a", "b", "c", "a", "b")
    with pytest.raises(UserError, match="label A holds the control character U\\+001B"):
        MetadataType("age", "old" + ESC, "young", "c", "old", "young")
    with pytest.raises(UserError, match="the consideration is 1,001 characters long"):
        metadata_type("age", "old", "young", "x" * 1001)
    from engine.running.run_request import RunRequest

    config = PromptConfig(mode="base", metadata=metadata_type("gender"))
    # The one check every face makes (the CLI and the app below), the field by its plain name here.
    with pytest.raises(UserError, match="^experiment must be 1 to 100 printable characters"):
        RunRequest(model="smoke", modes=("base",), prompt=config, experiment="e" + ESC)
    with pytest.raises(UserError, match="the model name is 501 characters long"):
        RunRequest(model="m" * 501, modes=("base",), prompt=config)


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "q?", "answers": ["a"],
                                "documents": [{"text": "a", "relevant": True}, {"text": "b", "relevant": False}]}) + "\n")
    return path


@pytest.mark.parametrize("extra, message", [
    (["--metadata", "m" * (MAX_NAME_CHARS + 1), "--label-a", "a", "--label-b", "b", "--consideration", "c"],
     f"the metadata type's name is {MAX_NAME_CHARS + 1} characters long (at most {MAX_NAME_CHARS})"),
    (["--metadata", "age", "--label-a", "a" * (MAX_LABEL_CHARS + 1), "--label-b", "b", "--consideration", "c"],
     f"label A is {MAX_LABEL_CHARS + 1} characters long (at most {MAX_LABEL_CHARS})"),
    (["--metadata", "age", "--label-a", "a", "--label-b", "b" + ESC, "--consideration", "c"],
     "label B holds the control character U+001B at character 2"),
    (["--metadata", "age", "--label-a", "a", "--label-b", "b", "--consideration", "c" * 2000],
     "the consideration is 2,000 characters long (at most 1,000)"),
    (["--metadata", "a" + ESC, "--label-a", "a", "--label-b", "b", "--consideration", "c"],
     "the metadata type's name holds the control character U+001B"),
    (["--experiment", "x" * (MAX_NAME_CHARS + 1)], "--experiment must be 1 to 100 printable characters"),
    (["--experiment", "x" + ESC], "--experiment must be 1 to 100 printable characters"),
    (["--study", "s" * (MAX_NAME_CHARS + 1), "--metadata", "gender,race"], "--study must be 1 to 100 printable"),
])
def test_the_cli_refuses_before_writing(tmp_path, capsys, extra, message):
    db = tmp_path / "r.duckdb"
    code = main(["run", "--model", "smoke", "--dataset", str(_data(tmp_path)), "--db", str(db), "--modes", "base", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert err.count("\n") == 1
    assert not db.exists()


def test_import_refuses_names_before_writing(tmp_path, capsys):
    data = _data(tmp_path)
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"item_id": "q1", "answer": "a [1]"}) + "\n")
    db = tmp_path / "i.duckdb"
    base = ["import", "--dataset", str(data), "--answers", str(answers), "--db", str(db)]
    assert main([*base, "--name", "m" + ESC]) == 2
    assert main([*base, "--name", "m", "--mode", "base", "--metadata", "age", "--label-a", "x" * 201, "--label-b", "y"]) == 2
    assert main([*base, "--name", "m", "--experiment", "e" * 101]) == 2
    err = capsys.readouterr().err
    assert "--name holds the control character U+001B" in err and "label A is 201 characters" in err
    assert "--experiment is 101 characters long" in err
    assert not db.exists()


def test_the_app_refuses_the_same_names(tmp_path):
    from demo.handlers.run import RunForm, build_run_request
    from demo.settings import AppSettings

    settings = AppSettings(db_path=tmp_path / "app.duckdb", allow_local_paths=False)
    huge = RunForm(metadata="x" * 20_000_000, label_a="a", label_b="b", consideration="c")
    with pytest.raises(UserError, match="^the metadata type's name is 20,000,000 characters long \\(at most 100\\)$"):
        build_run_request(settings, huge)
    with pytest.raises(UserError, match="label A holds the control character"):
        build_run_request(settings, RunForm(metadata="age", label_a="a" + ESC, label_b="b", consideration="c"))
    with pytest.raises(UserError, match="the experiment name must be 1 to 100"):
        build_run_request(settings, RunForm(experiment="e" * 101))
    assert not settings.db_path.exists()


@pytest.fixture
def poisoned_store(tmp_path):
    """A store from before the bounds: an imported experiment whose type and labels hold escapes."""
    data = _data(tmp_path)
    db = tmp_path / "old.duckdb"
    for mode, answer in (("vanilla", "a [1]"), ("base", "a [1]"), ("cf", "a [2]")):
        answers = tmp_path / f"{mode}.jsonl"
        answers.write_text(json.dumps({"item_id": "q1", "answer": answer}) + "\n")
        extra = [] if mode == "vanilla" else ["--metadata", "age", "--label-a", "old", "--label-b", "young"]
        assert main(["import", "--dataset", str(data), "--answers", str(answers), "--db", str(db), "--mode", mode,
                     "--name", "m", "--experiment", "x1", *extra]) == 0
    conn = duckdb.connect(str(db))
    conn.execute("UPDATE runs SET metadata_type = ? WHERE metadata_type = 'age'", ["age" + ESC])
    conn.execute("UPDATE runs SET config_json = replace(config_json, '\"old\"', ?)", ['"old\\u001b[2J\\u009b"'])
    conn.execute("UPDATE runs SET model = ?", ["m" + ESC + "\nforged row"])
    conn.close()
    return db


def test_list_and_report_escape_stored_escape_codes(poisoned_store, capsys):
    capsys.readouterr()
    for args in (["list"], ["list", "--runs"], ["list", "--json"], ["report"], ["report", "--format", "csv"],
                 ["report", "--format", "json"], ["bias", "--experiment", "x1"], ["bias", "--experiment", "x1", "--json"]):
        assert main([*args, "--db", str(poisoned_store)]) == 0, args
        out = capsys.readouterr()
        text = out.out + out.err
        assert "\x1b" not in text and "\x9b" not in text, args
        if args[0] != "bias":  # bias names no model
            assert "forged row" in text and "\nforged row" not in text, args
        if "json" in args or "--json" in args:
            json.loads(out.out)  # still valid JSON
    assert main(["list", "--db", str(poisoned_store)]) == 0
    assert "age\\x1b[2J\\x1b[31m" in capsys.readouterr().out


def test_pages_get_bounded_labels(poisoned_store):
    from demo.handlers.query import experiment_choices
    from demo.handlers.runs import runs_view

    for label, _ in experiment_choices(poisoned_store):
        assert len(label) <= PAGE_LABEL_CHARS and "\x1b" not in label
    for row in runs_view(poisoned_store, 1).rows:
        assert all("\x1b" not in str(cell) and len(str(cell)) <= PAGE_LABEL_CHARS for cell in row)


def test_for_terminal_keeps_printable_text():
    assert for_terminal("Ünïcode · 名前") == "Ünïcode · 名前"
    assert for_terminal("a\x1bb\nc") == "a\\x1bb\\nc"
    assert for_terminal("a\nb\tc", keep_newlines=True) == "a\nb\tc"


# --- look-alike names -----------------------------------------------------------------------

CYRILLIC_O = "holds U+043E (cyrillic small letter o) at character 1, a Cyrillic letter, which can pass for a Latin one"
LOOKALIKES = [
    ("\u043eperator-pilot", CYRILLIC_O),
    ("operat\u03bfr-pilot", "holds U+03BF (greek small letter omicron) at character 7, a Greek letter"),
    ("\uff4fperator-pilot", "holds U+FF4F (fullwidth latin small letter o) at character 1"),
    ("\U0001d428perator-pilot", "holds U+1D428 (mathematical bold small o) at character 1"),
    # A red team's sweep found these accepted: letters of scripts that pass for Latin ones, in a
    # Latin name or alone; digits beyond 0-9; a hyphen beyond ASCII; Latin letters that pass for
    # ASCII ones.
    ("\u0585perator-pilot", "holds U+0585 (armenian small letter oh) at character 1, an Armenian letter"),
    ("\u0585\u0580\u0585", "holds U+0585 (armenian small letter oh) at character 1, an Armenian letter"),
    ("\u13aadmin", "holds U+13AA (cherokee letter go) at character 1, a Cherokee letter"),
    ("\u13f4\u13ac\u13aa", "holds U+13F4 (cherokee letter yv) at character 1, a Cherokee letter"),
    ("\ua4eedmin", "holds U+A4EE (lisu letter a) at character 1, a Lisu letter"),
    ("\ua4ee\ua4d3\ua4df\ua4f2\ua4e0", "holds U+A4EE (lisu letter a) at character 1, a Lisu letter"),
    ("\u0440\u043e\u0440", "holds U+0440 (cyrillic small letter er) at character 1, a Cyrillic letter"),
    ("\u043e\u043f\u0435\u0440\u0430\u0442\u043e\u0440-2", CYRILLIC_O),
    ("\u03bf\u03c1", "holds U+03BF (greek small letter omicron) at character 1, a Greek letter"),
    ("\u03b1\u03b2\u03b3 7", "holds U+03B1 (greek small letter alpha) at character 1, a Greek letter"),
    ("run-\u0661", "holds U+0661 (arabic-indic digit one) at character 5, a digit or number other than 0-9"),
    ("pilot-\u0660\u0662", "holds U+0660 (arabic-indic digit zero) at character 7, a digit or number other than 0-9"),
    ("run\u2010pilot", "holds U+2010 (hyphen) at character 4, punctuation, a symbol or a space beyond ASCII"),
    ("p\u0251per", "holds U+0251 (latin small letter alpha) at character 2, a Latin letter that can pass for an ASCII one"),
    ("p\u0131lot", "holds U+0131 (latin small letter dotless i) at character 2, a Latin letter that can pass for an ASCII one"),
    ("don\u02bct", "holds U+02BC (modifier letter apostrophe) at character 4, a modifier letter"),
    ("pi\u0307lot", "holds U+0307 (combining dot above) at character 3, a combining mark on a Latin letter"),
    ("cafe\u0301", "holds U+0301 (combining acute accent) at character 5, a combining mark on a Latin letter"),
    ("run\u00a0pilot", "holds U+00A0 (no-break space) at character 4, a variant of an ordinary character"),
    ("pilot\u0645", "mixes Latin letters with Arabic ones (U+0645 arabic letter meem at character 6)"),
]
INVISIBLE = ["\u00ad", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u180e", "\u061c"]  # all category Cf
IGNORABLE = ["\u3164", "\u115f", "\uffa0", "\u034f", "\ufe0f", "\U000e0100", "\u180b"]  # letters and marks


@pytest.mark.parametrize("name, message", LOOKALIKES)
def test_look_alike_names_are_refused(name, message):
    with pytest.raises(UserError, match=f"^the experiment name {re.escape(message)}"):
        check_name(name, "the experiment name")


@pytest.mark.parametrize("bad", IGNORABLE)
def test_invisible_letters_and_marks_are_refused(bad):
    with pytest.raises(UserError, match=rf"^it holds the invisible character U\+{ord(bad):04X} at character 3;"):
        check_name("pi" + bad + "lot", "it")


@pytest.mark.parametrize("bad", INVISIBLE)
def test_invisible_format_characters_are_refused(bad):
    with pytest.raises(UserError, match=rf"^it holds the control character U\+{ord(bad):04X} at character 3;"):
        check_name("pi" + bad + "lot", "it")


def test_plain_names_and_mixed_prose_still_pass():
    for name in ("operator-pilot", "caf\u00e9 na\u00efve", "Stra\u00dfe Bj\u00f8rn", "\u540d\u524d-pilot",
                 "\u65e5\u672c\u8a9e\u30c6\u30b9\u30c8 v2", "\ud55c\uad6d\uc5b4 test", "\u0645\u0631\u062d\u0628\u0627",
                 "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0e01\u0e34\u0e48\u0e07", "run 2 (k=5)",
                 "meta-llama/Meta-Llama-3-8B-Instruct"):
        assert check_name(name, "it") == name
    # Labels and considerations are prose: they may quote a word of another script.
    MetadataType("origin", "written by \u0414\u043c\u0438\u0442\u0440\u0438\u0439", "written by John", "c", "a", "b")


def test_look_alike_names_are_refused_everywhere(tmp_path, capsys):
    from demo.handlers.run import RunForm, build_run_request
    from demo.settings import AppSettings
    from engine.prompting.study import check_study_name
    from engine.running.run_request import RunRequest

    name = LOOKALIKES[0][0]
    lookalike = re.escape("holds U+043E (cyrillic small letter o) at character 1")
    config = PromptConfig(mode="base", metadata=metadata_type("gender"))
    with pytest.raises(UserError, match=lookalike):
        RunRequest(model="smoke", modes=("base",), prompt=config, experiment=name)
    with pytest.raises(UserError, match=r"^the model name holds U\+0131 \(latin small letter dotless i\) at character 6"):
        RunRequest(model="Qwen/\u0131Qwen2.5-0.5B-Instruct", modes=("base",), prompt=config)
    with pytest.raises(UserError, match=lookalike):
        MetadataType(name, "a", "b", "c", "a", "b")
    with pytest.raises(UserError, match="^study " + lookalike):
        check_study_name(name)
    settings = AppSettings(db_path=tmp_path / "app.duckdb", allow_local_paths=False)
    with pytest.raises(UserError, match=lookalike):
        build_run_request(settings, RunForm(experiment=name))
    db = tmp_path / "r.duckdb"
    assert main(["run", "--model", "smoke", "--dataset", str(_data(tmp_path)), "--db", str(db), "--modes", "base",
                 "--experiment", name]) == 2
    err = capsys.readouterr().err
    assert re.search(lookalike, err) and err.count("\n") == 1 and not db.exists()


def test_a_model_folder_of_the_operators_may_hold_any_script_a_hub_id_may_not(tmp_path):
    from engine.running.run_request import RunRequest

    config = PromptConfig(mode="base", metadata=metadata_type("gender"))
    folder = tmp_path / "\u043c\u043e\u0434\u0435\u043b\u0438" / "tiny"  # "модели": a path, not a chosen name
    folder.mkdir(parents=True)
    assert RunRequest(model=str(folder), modes=("base",), prompt=config).model == str(folder)
    # Where visitors name Hub ids only, or the folder is not there, the name keeps to the rule.
    for request in (dict(model=str(folder), hub_only=True), dict(model=str(tmp_path / "\u043c\u043e\u0434\u0435\u043b")),
                    dict(model="\u0430pple/model")):
        with pytest.raises(UserError, match="cyrillic small letter"):
            RunRequest(modes=("base",), prompt=config, **request)
    # Control characters are refused in a folder's name all the same.
    bad = tmp_path / "a\x1bb"
    bad.mkdir()
    with pytest.raises(UserError, match="control character U\\+001B"):
        RunRequest(model=str(bad), modes=("base",), prompt=config)
