"""docs/extending.md runs as written: every ```python block, in order, in one namespace, from an
empty folder; then what the blocks left behind is checked (the judge's rows in the store, the
metric's CAB, the converted dataset, the tab's endpoint), so the page cannot drift from the code
it walks through."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "extending.md"

pytestmark = pytest.mark.slow  # the judge generates with the smoke model


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The namespace the page's blocks leave, run from an empty folder; the judge it registers
    is registered in a copy of the registry, which is put back afterwards."""
    import os

    from engine.judges import registry

    folder = tmp_path_factory.mktemp("extending")
    judges, cwd = dict(registry._JUDGES), os.getcwd()
    namespace: dict = {"__name__": "extending"}
    os.chdir(folder)
    try:
        for n, block in enumerate(_blocks(), start=1):
            exec(compile(block, f"docs/extending.md block {n}", "exec"), namespace)
    finally:
        os.chdir(cwd)
        registry._JUDGES.clear()
        registry._JUDGES.update(judges)
    return namespace


def test_every_section_has_an_example_and_the_page_says_nothing_unfinished():
    text = PAGE.read_text(encoding="utf-8")
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections == ["A store to try things on", "A judge", "A per-answer metric", "A dataset layout",
                        "An app tab", "A run option"]
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        assert "```python" in section, section.splitlines()[0]
    assert not re.search(r"\b(TODO|TBD|RUN_OPTION_SECTION)\b", text)


def test_the_store_holds_the_three_imported_runs(page):
    assert page["sql"]("SELECT rag_mode, count(*) FROM runs JOIN generations USING (run_id) GROUP BY ALL "
                       "ORDER BY 1") == [("base", 4), ("cf", 4), ("vanilla", 4)]


def test_the_registered_judge_judged_every_cited_pair_into_verifications(page, monkeypatch):
    from engine.generation.model_choice import SMOKE_LABEL

    result, sql = page["result"], page["sql"]
    assert result.label == f"support:{SMOKE_LABEL}"
    # Each answer cites [n] in its first sentence and [n][3] in its second: 3 pairs, 4 answers, 3 runs.
    assert result.n_done == result.n_todo == 36
    assert sql("SELECT kind, model_id IS NOT NULL, mapping FROM judges WHERE judge = ?", result.label) == [
        ("llm", True, "support")]
    stored = sql("SELECT prompt, raw_output, class FROM verifications WHERE judge_model = ?", result.label)
    assert len(stored) == 36
    for prompt, raw, label in stored:
        assert prompt.endswith("Does the document support the sentence? Answer yes or no.")
        assert label == page["parse_support"](raw)
    # Every judge's verdicts meet in one view (agreement and the Judges tab read it): one per cited
    # document of an answer ([n] and [3]), as for any other model judge.
    assert sql("SELECT count(*), any_value(kind) FROM judgements WHERE judge = ?", result.label) == [(24, "llm")]
    # The same request again judges nothing: every pair is stored under the judge's name. (The
    # page's registration was undone with its namespace: registered again here, in a copy.)
    from engine import api
    from engine.judges import registry

    monkeypatch.setattr(registry, "_JUDGES", dict(registry._JUDGES))
    registry.register(page["support"])
    again = api.verify(api.VerifyRequest(page["store"], experiment=page["experiment"],
                                         judges=("support:smoke",), device="cpu"))
    assert (again.n_todo, again.n_done) == (0, 0)


def test_the_new_metric_s_cab_is_base_minus_cf(page):
    cab = page["cab"]
    # base cites document 1 for items 1 and 3, cf cites document 2 there; neither cites it for 2 and 4.
    assert (cab.n, cab.mean) == (4, 50.0)
    assert cab.ci_low <= cab.mean <= cab.ci_high


def test_the_converted_layout_loads_with_its_relevance(page):
    assert [(i.id, i.question, [d.relevant for d in i.documents]) for i in page["converted"].items] == [
        ("q1", "who wrote hamlet", [True, False]), ("q2", "what is the capital of peru", [False, True])]


def test_the_tab_s_handler_lists_the_experiment_and_its_button_is_an_endpoint(page):
    table = page["experiments_table"](page["store"])
    assert table.to_dict("records") == [{"experiment": page["experiment"], "model": "example",
                                         "modes": "vanilla, base, cf", "status": "complete"}]
    names = {d.get("api_name") for d in page["app"].get_config_file()["dependencies"]}
    assert "experiments_list" in names


def test_the_run_option_is_one_row_that_the_request_and_both_faces_read(page):
    from engine.__main__ import build_parser

    assert page["request"].prompt.top_k == 3 and page["request"].modes == ("base", "cf")
    assert page["cli_words"] == "--top-k must be at least 1, not 0"
    assert page["app_words"] == "the cut-off k must be at least 1, not 0"
    # The command line's option is the row's: `run --top-k 3` reads into the option's name.
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    assert any(a.option_strings == [page["top_k"].option] and a.dest == "top_k" for a in run._actions)
