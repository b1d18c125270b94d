"""The Judges tab without a browser: the handlers (the agreement matrix, the panel
line, the judges against human labels, the PPI rate, the disagreements of a pair, a clicked row,
importing labels from an upload and its refusals, the hint) on tests/support/judged_store.py's store with
a person's labels, and `/agreement` through gradio_client on the app as `python -m demo` builds it.
Every number the page shows is the use case's (engine.usecases.judges.agreement), checked against it.
"""

from __future__ import annotations

import random

import pytest

from demo.handlers import judges as h
from demo.settings import AppSettings
from engine.errors import UserError
from engine.usecases.judges.agreement import AgreementRequest, agreement
from tests.support.helpers import copy_store
from tests.support.judged_store import LLM, NLI, build, cited, dump

HUMAN_ITEMS = 6


def _labels(info: dict, items: int = HUMAN_ITEMS, seed: int = 3) -> tuple[list[str], dict]:
    rng = random.Random(seed)
    human, lines = {}, ["item_id,experiment,mode,position,label"]
    for i, item in enumerate(info["items"][:items]):
        for p in cited(i):
            said = info["llm"][(item, p)] == "attributable"
            label = "attributable" if (said if rng.random() < 0.8 else not said) else "not_attributable"
            human[(item, p)] = label
            lines.append(f"{item},pilot,vanilla,{p},{label}")
    return lines, human


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The judged store, and 'ann''s labels on the first HUMAN_ITEMS answers imported through the tab."""
    tmp = tmp_path_factory.mktemp("app-judges")
    path = tmp / "judged.duckdb"
    info = build(path)
    lines, human = _labels(info)
    labels = tmp / "ann.csv"
    labels.write_text("\n".join(lines) + "\n")
    line = h.import_labels_file(AppSettings(path), str(labels), "ann")
    assert line == f"ann.csv: {len(human)} of {len(human)} labels stored as judge 'ann' (runs {info['run']})"
    return path, {**info, "ann": human}


@pytest.fixture
def store(built, tmp_path):
    path, info = built
    return copy_store(path, tmp_path / "s.duckdb"), info


@pytest.fixture(scope="module")
def view(built):
    return h.agreement_view(built[0], "pilot", [])


def _binary(verdicts: dict) -> dict:
    return {k: v == "attributable" for k, v in verdicts.items() if v != "unparsed"}


# ---------------------------------------------------------------- the page: every number the use case's


def test_the_matrix_shows_each_pairs_kappa_its_interval_raw_agreement_and_n(built, view):
    result = agreement(AgreementRequest(built[0], "pilot"))
    names = ["ann", LLM, NLI]
    assert list(view.matrix.columns) == ["judge", *names] and list(view.matrix["judge"]) == names
    cells = view.matrix.set_index("judge")
    for j in names:
        assert cells.loc[j, j] == "—"
    for p in result.pairs:
        a = p.agreement
        cell = cells.loc[p.judge_a, p.judge_b]
        assert cell == cells.loc[p.judge_b, p.judge_a]  # the same both ways
        assert cell.endswith(f"· agree {100 * a.raw_agreement:.1f}% · n {a.n}"), cell
        if a.kappa_ci is not None:
            assert cell.startswith(f"κ {a.kappa:.2f} [{a.kappa_ci[0]:.2f}, {a.kappa_ci[1]:.2f}]"), cell
    llm_nli = cells.loc[LLM, NLI]
    both = _binary(built[1]["llm"]).keys() & _binary(built[1]["nli"]).keys()
    assert llm_nli.endswith(f"n {len(both)}") and "[" in llm_nli
    assert view.result == result.as_dict()


def test_an_undefined_kappa_says_why():
    from engine.statistics.agreement import pair_agreement

    one_class = pair_agreement(["attributable"] * 4, ["attributable"] * 4, categories=("attributable", "not_attributable"))
    assert h.kappa_cell(one_class).startswith("κ undefined: both judges gave one class only · agree 100.0% · n 4")
    none = pair_agreement([], [], categories=("attributable", "not_attributable"))
    assert h.kappa_cell(none) == "undefined: no item judged by both · n 0"


def test_the_panel_line_names_each_statistic_and_its_library(built, view):
    panel = agreement(AgreementRequest(built[0], "pilot")).panel
    assert f"Fleiss' κ {panel.fleiss_kappa:.2f} on the {panel.n_complete} citations every judge judged (statsmodels)" \
        in view.summary
    assert f"Krippendorff's α {panel.krippendorff_alpha:.2f}, nominal (krippendorff)" in view.summary
    assert "Panel of 3 judges" in view.summary and "experiment exp" in view.summary


def test_the_model_judges_against_the_human_and_the_corrected_rate(built, view):
    _, info = built
    ann, llm = info["ann"], _binary(info["llm"])
    rows = view.humans.set_index("judge")
    both = [k for k in ann if k in llm]
    right = sum((ann[k] == "attributable") == llm[k] for k in both)
    assert rows.loc[LLM, "against human"] == "ann" and rows.loc[LLM, "n"] == len(both)
    assert rows.loc[LLM, "accuracy"].endswith(f"({right}/{len(both)})") and " [" in rows.loc[LLM, "accuracy"]
    ppi = view.ppi.set_index("judge")
    assert set(ppi.index) == {LLM, NLI} and ppi.loc[LLM, "labelled by both"] == len(both)
    assert ppi.loc[LLM, "judged only"] == len(llm) - len(both)
    assert ppi.loc[LLM, "corrected rate (PPI)"].count("%") == 3  # the estimate and its interval
    judges = view.judges.set_index("judge")
    assert (judges.loc[LLM, "kind"], judges.loc[LLM, "unparsed (left out)"], judges.loc["ann", "kind"]) == ("llm", 2, "human")


def test_the_pair_that_disagrees_most_comes_first(built, view):
    result = agreement(AgreementRequest(built[0], "pilot"))
    differ = {(p.judge_a, p.judge_b): p.agreement.confusion[0][1] + p.agreement.confusion[1][0] for p in result.pairs}
    pairs = [h.pair_of(value) for _, value in view.pairs]
    assert sorted(pairs) == sorted(differ) and [label for label, _ in view.pairs][0] == " vs ".join(pairs[0])
    assert differ[pairs[0]] == max(differ.values()) > 0


def test_the_disagreements_of_a_pair_with_every_verdict_and_the_document(built):
    db, info = built
    frame, note = h.disagreement_rows(db, "pilot", None, h.pair_value(LLM, NLI))
    llm, nli = _binary(info["llm"]), _binary(info["nli"])
    differ = sorted((item, p) for item, p in llm.keys() & nli.keys() if llm[(item, p)] != nli[(item, p)])
    assert differ and note.startswith(f"{len(differ)} cited documents where {LLM} and {NLI} disagree")
    assert list(frame.columns) == [*h.DISAGREEMENT_KEY, f"A: {LLM}", f"B: {NLI}", "other judges", "document"]
    assert sorted(zip(frame["item_id"], frame["[n]"], strict=True)) == differ
    assert set(frame["run"]) == {info["run"]}
    word = {True: "attributable", False: "not attributable"}
    for row in frame.itertuples(index=False):
        key = (row.item_id, row[2])
        assert (row[3], row[4]) == (word[llm[key]], word[nli[key]])
        assert row[5] == (f"ann: {info['ann'][key].replace('_', ' ')}" if key in info["ann"] else "ann: –")
    # The document as shown: the sample's title and first words.
    from engine import api

    data = {it.id: it for it in api.load_dataset("sample").items}
    first = frame.iloc[0]
    shown = data[first["item_id"]].documents[int(first["[n]"]) - 1]
    assert first["document"].startswith(f"{shown.title}: {' '.join(shown.text.split())[:40]}")
    assert h.clicked_disagreement(list(first)) == (info["run"], first["item_id"])
    # The use case's bound: the first `limit` in (run, item, position) order, and how many in all.
    from engine.usecases.judges.agreement import disagreements

    some, total = disagreements(AgreementRequest(db, "pilot"), LLM, NLI, limit=1)
    assert total == len(differ) and [(d.item_id, d.position) for d in some] == differ[:1]
    assert dict(some[0].verdicts)[LLM] == ("attributable" if llm[differ[0]] else "not_attributable")
    assert h.clicked_disagreement([]) is None and h.clicked_disagreement(["", ""]) is None


@pytest.mark.parametrize("experiment, runs, pair, message", [
    ("", [], None, "choose an experiment or runs"),
    ("pilot", ["x"], None, "choose an experiment or runs"),
    ("nope", [], None, "unknown experiment 'nope'"),
    ("", "nope", None, "unknown run 'nope'"),
    ("pilot", [], "[\"judge/llm\", \"ghost\"]", "judge 'ghost' gave no verdict on these runs"),
    ("pilot", [], "not json", "choose two judges"),
])
def test_refusals_are_one_line_in_the_pages_words(built, experiment, runs, pair, message):
    with pytest.raises(UserError, match=message) as caught:
        if pair is None:
            h.agreement_view(built[0], experiment, runs)
        else:
            h.disagreement_rows(built[0], experiment, runs, pair)
    line = str(caught.value)
    assert "\n" not in line and "python -m" not in line and "--" not in line and str(built[0].parent) not in line


def test_runs_with_no_verdict_say_where_to_start(tmp_path):
    from engine import api

    db = tmp_path / "plain.duckdb"
    data = api.load_dataset("sample")
    api.import_answers(api.ImportRequest(data, ({"item_id": data.items[0].id, "answer": "x [1]."},), db,
                                         experiment="plain"))
    with pytest.raises(UserError, match="no verdicts on experiment plain: judge them first .* import people's labels"):
        h.agreement_view(db, "plain", [])
    from demo.hints import PICK, hint_text

    assert hint_text(db, "judges") == PICK["judges"] and "import" in PICK["judges"]
    assert h.run_choices(tmp_path / "none.duckdb") == []
    assert [v for _, v in h.run_choices(db)] == [r.run_id for r in api.experiments(db, runs=True)]


# ---------------------------------------------------------------- importing labels


def test_an_import_refusal_names_the_file_never_its_folder_and_writes_nothing(store, tmp_path):
    db, info = store
    before = dump(db)
    upload = tmp_path / "uploads" / "deep" / "bob.csv"
    upload.parent.mkdir(parents=True)
    upload.write_text(f"item_id,experiment,mode,position,label\n{info['items'][0]},pilot,vanilla,9,attributable\n")
    with pytest.raises(UserError) as caught:
        h.import_labels_file(AppSettings(db), str(upload), "bob")
    line = str(caught.value)
    assert line.startswith(f"bob.csv:line 2: the answer to item '{info['items'][0]}' in run {info['run']} does not cite [9]") and str(upload.parent) not in line, line
    assert dump(db) == before
    for settings, path, judge, message in (
        (AppSettings(db, read_only=True), str(upload), "bob", "this app is read-only"),
        (AppSettings(db), None, "bob", "upload a labels file"),
        (AppSettings(db), str(upload), "  ", "name the judge"),
        (AppSettings(db), str(tmp_path / "gone.csv"), "bob", "gone.csv is gone from the server"),
        (AppSettings(db), str(upload), LLM, f"the judge's name '{LLM}' is an llm judge"),
    ):
        with pytest.raises(UserError, match=message):
            h.import_labels_file(settings, path, judge)
    big = tmp_path / "big.csv"
    big.write_text("item_id,run,position,label\n" + "x" * (1024 * 1024 + 10))
    with pytest.raises(UserError, match=r"big.csv is 1.0 MB; uploads here are limited to 1 MB"):
        h.import_labels_file(AppSettings(db, max_upload_mb=1), str(big), "bob")
    assert dump(db) == before


def test_an_imported_judge_joins_the_matrix(store, tmp_path):
    db, info = store
    lines, _ = _labels(info, items=3, seed=11)
    upload = tmp_path / "bob.jsonl"
    import csv
    import json

    upload.write_text("".join(json.dumps(row) + "\n" for row in csv.DictReader(lines)))
    assert h.import_labels_file(AppSettings(db), str(upload), "bob").startswith("bob.jsonl: 9 of 9 labels stored")
    assert "bob" in list(h.agreement_view(db, "pilot", []).matrix["judge"])


# ---------------------------------------------------------------- through gradio_client


@pytest.fixture(scope="module")
def client(built):
    from gradio_client import Client

    from demo.jobs import JobQueue
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(built[0]), JobQueue(load=refuse_load)) as url:
        yield Client(url, verbose=False)


def test_agreement_through_the_api_is_the_use_cases_json(client, built):
    got = client.predict("pilot", [], api_name="/agreement")
    want = agreement(AgreementRequest(built[0], "pilot")).as_dict()
    assert [j["judge"] for j in got["judges"]] == [j["judge"] for j in want["judges"]]
    for g, w in zip(got["pairs"], want["pairs"], strict=True):
        assert (g["judge_a"], g["judge_b"], g["agreement"]["n"]) == (w["judge_a"], w["judge_b"], w["agreement"]["n"])
        assert g["agreement"]["kappa"] == pytest.approx(w["agreement"]["kappa"])
    assert got["panel"]["krippendorff_alpha"] == pytest.approx(want["panel"]["krippendorff_alpha"])
    assert len(got["ppi"]) == 2 and got["run_ids"] == [built[1]["run"]]
    # Runs instead of the experiment, as text the way an API caller may send them.
    assert client.predict("", built[1]["run"], api_name="/agreement")["run_ids"] == [built[1]["run"]]


def test_a_refusal_through_the_api_is_one_line(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        client.predict("nope", [], api_name="/agreement")
    assert "unknown experiment 'nope'" in str(caught.value) and "\n" not in str(caught.value)
