"""The Bias tab: store.queries' tab reads, engine report's tables for several experiments, the
plots as pure functions, the handler on a small store, and `/bias_table` through gradio_client.

The store is built with RunStore (as tests/demo/handlers/test_query_detail.py does): two full experiments of
two models (gender, race), one without cf (hai), one with base only, and one whose custom
labels are hostile text and equal to each other. The numbers the plots show are checked
against values computed here straight from the store's tables and views.
"""

from __future__ import annotations

import io
import random
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from demo import plots
from demo.handlers import bias as handler
from engine.errors import UserError
from engine.prompting.prompts import METADATA_TYPES, MetadataType, PromptConfig
from engine.types import Citation, Document, Generation, Item, RunSpec
from engine.usecases.bias.page import CabValue
from store import RunStore, connect, queries

SHA = "sha-bias"
N_ITEMS = 12
HOSTILE = "<img src=x onerror=alert(1)>*x*"
SAME = MetadataType("same", "a person", "a person", "Some documents are written by people.", HOSTILE, HOSTILE)
# experiment: (model, metadata type, modes, how often each mode cites the relevant document)
EXPERIMENTS = {
    "exp-gender": ("model-x", METADATA_TYPES["gender"], {"vanilla": 0.7, "base": 0.8, "cf": 0.4}),
    "exp-race": ("model-y", METADATA_TYPES["race"], {"vanilla": 0.6, "base": 0.5, "cf": 0.7}),
    "exp-hai": ("model-x", METADATA_TYPES["hai"], {"vanilla": 0.6, "base": 0.9}),
    "exp-base": ("model-y", METADATA_TYPES["gender"], {"base": 0.5}),
    "exp-same": ("model-z", SAME, {"base": 0.6, "cf": 0.6}),
}
ITEMS = [
    Item(f"q{i:02d}", f"Question {i}?", (f"answer {i}",), tuple(
        Document(f"q{i:02d}-d{j}", f"text {j}", j == i % 3 or (i % 4 == 0 and j == 3)) for j in range(4)))
    for i in range(N_ITEMS)
]


def _generation(item: Item, hit: float, rng: random.Random) -> Generation:
    """An answer citing the relevant document with probability `hit`, plus noise; each citation
    carries a probability, and now and then a number that was not shown."""
    shown = tuple(d.id for d in item.documents)
    relevant = [n for n, d in enumerate(item.documents, start=1) if d.relevant]
    others = [n for n, d in enumerate(item.documents, start=1) if not d.relevant]
    cited = [n for n in relevant if rng.random() < hit] + rng.sample(others, rng.choice((0, 1, 1, 2)))
    if rng.random() < 0.2:
        cited.append(9)  # out of range: no document, left out of every probability
    citations = tuple(
        Citation(i, n, shown[n - 1] if n <= len(shown) else None,
                 item.documents[n - 1].relevant if n <= len(shown) else None, round(rng.uniform(0.05, 1.0), 4))
        for i, n in enumerate(cited)
    )
    marks = "".join(f"[{n}]" for n in cited)
    answer = f"{item.answers[0] if rng.random() < 0.7 else 'no idea'} {marks}"
    return Generation(item.id, "prompt", answer, shown, "stop", 10, (), citations)


def _spec(run_id: str, experiment: str, model: str, meta: MetadataType, mode: str) -> RunSpec:
    prompt = PromptConfig(mode=mode, metadata=meta).to_dict()
    return RunSpec(run_id, experiment, f"hash-{run_id}", model, None, "none", "float32", "cpu",
                   "/srv/secret/bias_data.jsonl", SHA, meta.name, mode, 0, "v1", None, {}, {"prompt": prompt}, N_ITEMS)


def build_store(path: Path) -> Path:
    store = RunStore(path, timeout_s=10)
    with store.database.session():  # one open of the file for every write
        store.put_items(SHA, ITEMS)
        rng = random.Random(7)
        for experiment, (model, meta, modes) in EXPERIMENTS.items():
            for mode, hit in modes.items():
                run_id = f"{experiment}-{mode}"
                store.start_run(_spec(run_id, experiment, model, meta, mode))
                store.write_batch(run_id, [_generation(item, hit, rng) for item in ITEMS])
                store.finish_run(run_id, "complete")
        with connect(path) as conn:
            conn.execute("UPDATE experiments SET name = 'gender, study' WHERE experiment_id = 'exp-gender'")
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("bias") / "bias.duckdb")


@pytest.fixture(scope="module")
def page(db) -> handler.BiasPage:
    # Text and multiselect together, with a repeat (by name) that is shown once.
    return handler.bias_page(db, "exp-gender, exp-hai", ["exp-race", "gender, study"], resamples=200)


def _raw(db: Path, sql: str, params: list) -> list[tuple]:
    with connect(db, read_only=True) as conn:
        return conn.execute(sql, params).fetchall()


# ---------------------------------------------------------------- store.queries


def test_tab_reads_equal_the_whole_store_reads(db):
    import pandas as pd

    ids = ["exp-gender", "exp-hai", "exp-base"]
    everything = queries.run_metric_table(db)
    expected = everything[everything["experiment_id"].isin(ids)].reset_index(drop=True)
    pd.testing.assert_frame_equal(queries.report_run_metrics(db, ids), expected)
    bias = queries.bias_table(db)
    expected = bias[bias["experiment_id"].isin(ids)].reset_index(drop=True)
    got = queries.report_bias_rows(db, ids)
    assert sorted(set(got["measure"] + got["experiment_id"])) == ["CABexp-gender", "CASexp-gender", "CASexp-hai"]
    pd.testing.assert_frame_equal(got, expected)
    assert queries.report_bias_rows(db, []).empty and queries.report_run_metrics(db, ["nope"]).empty


def test_table1_reads_equal_run_metrics_with_run_scores_current_stale_or_missing(db, tmp_path):
    import shutil

    from engine.usecases.bias.tables import table1

    ids = ["exp-gender", "exp-hai", "exp-base", "exp-race"]
    copy = tmp_path / "t1.duckdb"
    shutil.copy(db, copy)
    # One run's cached row is stale (it covers one answer fewer), one has none: both are
    # computed for their run, the others read from run_scores.
    with connect(copy) as conn:
        assert conn.execute("SELECT count(*) FROM run_scores").fetchone()[0] > 2
        conn.execute("UPDATE run_scores SET n_answers = n_answers - 1, precision = 0.987 WHERE run_id = 'exp-hai-base'")
        conn.execute("DELETE FROM run_scores WHERE run_id = 'exp-gender-cf'")
    expected = queries.report_run_metrics(copy, ids)
    got = queries.table1_runs(copy, ids)
    assert list(got["run_id"]) == list(expected["run_id"]) and len(got) >= 8
    rows, want = table1(got), table1(expected)
    assert [r.keys() for r in rows] == [w.keys() for w in want] and len(rows) == len(want)
    for row, w in zip(rows, want, strict=True):
        assert {k: v for k, v in row.items() if not isinstance(v, float)} == {
            k: v for k, v in w.items() if not isinstance(v, float)}
        assert [v for v in row.values() if isinstance(v, float)] == pytest.approx(
            [v for v in w.values() if isinstance(v, float)], rel=1e-12)
    for column in got.columns:
        if column in ("precision", "recall", "exact_match"):
            assert got[column].tolist() == pytest.approx(expected[column].tolist(), rel=1e-12, nan_ok=True)
        else:
            assert got[column].tolist() == expected[column].tolist(), column
    assert queries.table1_runs(copy, []).empty and queries.table1_runs(copy, ["nope"]).empty


def test_probability_summaries_are_the_quartiles_of_the_stored_citations(db):
    runs = ["exp-gender-base", "exp-gender-cf"]
    got = queries.citation_probability_summaries(db, runs + runs[:1])
    assert [(s.run_id, s.relevant) for s in got] == [(r, flag) for r in runs for flag in (True, False)]
    for s in got:
        values = np.array([p for (p,) in _raw(db, "SELECT probability FROM citations WHERE run_id = ? AND relevant = ?",
                                              [s.run_id, s.relevant])])
        assert s.n == len(values) > 0
        assert (s.minimum, s.maximum, s.mean) == pytest.approx((values.min(), values.max(), values.mean()))
        assert (s.q1, s.median, s.q3) == pytest.approx(tuple(np.quantile(values, [0.25, 0.5, 0.75])))
    assert queries.citation_probability_summaries(db, []) == ()


def test_experiment_choices_list_every_experiment_with_its_complete_modes(db):
    choices = {c.experiment_id: c for c in queries.experiment_choices(db)}
    assert list(choices)[0] == "exp-same"  # newest first
    assert choices["exp-gender"].name == "gender, study" and choices["exp-gender"].model == "model-x"
    assert choices["exp-hai"].complete_modes == ("vanilla", "base")
    assert choices["exp-race"].metadata_type == "race"


# ---------------------------------------------------------------- engine report's tables


def _cli_report(db: Path, experiment: str) -> str:
    from engine.__main__ import build_parser
    from engine.commands import report

    out = io.StringIO()
    # The CLI's own parser, so that every option the command knows has its default.
    args = build_parser().parse_args(["report", "--db", str(db), "--format", "csv", "--experiment", experiment])
    with redirect_stdout(out):
        assert report.main(args) == 0
    return out.getvalue()


def test_tables_for_one_experiment_are_what_engine_report_prints(db):
    from engine.commands.report import render
    from engine.usecases.bias.tables import experiment_tables

    for experiment in ("exp-gender", "exp-hai"):
        rows1, rows2 = experiment_tables(db, [experiment])
        assert render(rows1, rows2, "csv") + "\n" == _cli_report(db, experiment)


def test_the_page_shows_the_report_tables_of_the_chosen_experiments(db, page):
    from engine.presentation.formatting import formatted_tables
    from engine.usecases.bias.tables import table1, table2

    # The same functions over the whole store's views, narrowed to the chosen experiments.
    runs = queries.run_metric_table(db)
    bias = queries.bias_table(db)
    chosen = ["exp-gender", "exp-hai", "exp-race"]
    settings = queries.run_settings(db, chosen)
    t1, t2 = formatted_tables(table1(runs[runs["experiment_id"].isin(chosen)], settings),
                              table2(bias[bias["experiment_id"].isin(chosen)], settings))
    assert (page.table1, page.table2) == (t1, t2)
    assert [r[:3] for r in page.table2[1:]] == [["Gender", "Woman vs Man", "model-x"], ["Race", "White vs Black", "model-y"]]
    # model-x's two experiments each have a vanilla run: every row of theirs names its experiment
    # (by name where it has one), so that no vanilla row seems to serve the other's labelled rows.
    assert page.table1[0][:2] == ["Answer generator", "Setting"]
    assert [r[1] for r in page.table1[1:] if r[0] == "model-x"] == ["experiment gender, study"] * 3 + ["experiment exp-hai"] * 2


# ---------------------------------------------------------------- the handler


def test_the_page_holds_each_chosen_experiment_once(page):
    assert page.experiment_ids == ("exp-gender", "exp-hai", "exp-race")
    measures = [(r[0], r[3], r[4]) for r in page.results]
    assert measures == [(e, m, k) for e, ms in (("exp-gender", ("CAS", "CAB")), ("exp-hai", ("CAS",)),
                                                 ("exp-race", ("CAS", "CAB")))
                        for m in ms for k in ("precision", "recall", "f1")]
    assert {tuple(r[:3]) for r in page.results} == {("exp-gender", "model-x", "gender"), ("exp-hai", "model-x", "hai"),
                                                    ("exp-race", "model-y", "race")}
    assert all(r[9] == N_ITEMS for r in page.results)  # n
    assert "exp-hai: no CAB yet" in page.cab_note and "exp-gender" not in page.cab_note
    assert "exp-hai: no complete cf run yet" in page.probability_note
    assert "WARNING" not in page.summary and "label A = Woman" in page.summary


def test_the_page_numbers_are_engine_bias_numbers(db, page):
    from engine.usecases.bias.report import bias_report

    report = bias_report(db, "exp-race", resamples=200).report
    rows = [r[3:] for r in page.results if r[0] == "exp-race"]
    assert rows == [[r[c] for c in handler.RESULT_COLUMNS] for r in report["results"]]
    confidence = [r[3:] for r in page.confidence if r[0] == "exp-race"]
    assert confidence == [[c[k] for k in handler.CONFIDENCE_COLUMNS] for c in report["confidence"]]


def test_an_experiment_without_comparisons_is_a_note_unless_alone(db):
    page = handler.bias_page(db, "exp-base", ["exp-gender"], resamples=100)
    assert page.experiment_ids == ("exp-gender",)
    assert "Not shown: experiment 'exp-base' has complete runs for base only" in page.summary
    with pytest.raises(UserError, match="has complete runs for base only") as caught:
        handler.bias_page(db, "exp-base", resamples=100)
    assert "/srv" not in str(caught.value) and str(db.parent) not in str(caught.value)


def test_unknown_experiments_and_limits_are_refused_in_one_line(db, tmp_path):
    with pytest.raises(UserError, match="no experiment 'typo' in the store") as caught:
        handler.bias_page(db, "exp-gender, typo")
    assert str(db.parent) not in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(UserError, match="choose an experiment"):
        handler.bias_page(db, " ", [])
    with pytest.raises(UserError, match="at most 12 experiments"):
        handler.bias_page(db, ",".join(f"e{i}" for i in range(13)))
    with pytest.raises(UserError, match="nothing is stored yet"):
        handler.bias_page(tmp_path / "none.duckdb", "exp-gender")


def test_a_name_with_a_comma_works_typed_alone(db):
    assert handler.bias_page(db, "gender, study", resamples=100).experiment_ids == ("exp-gender",)


def test_equal_labels_warn_and_stored_text_is_escaped(db):
    page = handler.bias_page(db, "exp-same", resamples=100)
    assert "WARNING: cf labels equal base labels" in page.summary
    assert "<img" not in page.summary and "&lt;img src=x onerror=alert(1)&gt;\\*x\\*" in page.summary
    fig = plots.cab_figure(page.cab_bars)
    assert "<img" not in fig.to_json() and "&lt;img" in fig.data[0].customdata[0][1]
    boxes = plots.probability_figure(page.probability_boxes, page.panels)
    assert "<img" not in boxes.to_json()


def test_a_run_that_lands_later_shows_at_once(tmp_path):
    # The tab keeps its reads per store state: a new cf run changes the state, so it shows.
    db = build_store(tmp_path / "later.duckdb")
    before = handler.bias_page(db, "exp-hai", resamples=100)
    assert before.cab_note and [r[0] for r in before.table2[1:]] == []
    assert handler.bias_page(db, "exp-hai", resamples=100).table1 == before.table1
    store = RunStore(db, timeout_s=10)
    model, meta, _ = EXPERIMENTS["exp-hai"]
    store.start_run(_spec("exp-hai-cf", "exp-hai", model, meta, "cf"))
    store.write_batch("exp-hai-cf", [_generation(item, 0.3, random.Random(1)) for item in ITEMS])
    store.finish_run("exp-hai-cf", "complete")
    after = handler.bias_page(db, "exp-hai", resamples=100)
    assert after.cab_note == "" and [r[0] for r in after.table2[1:]] == ["Human vs. LLM"]
    assert len(after.table1) == len(before.table1) + 1
    assert {b.mode for b in after.probability_boxes} == {"vanilla", "base", "cf"}


def test_the_single_experiment_handler_keeps_its_shape(db):
    summary, results, confidence = handler.bias_table(db, "exp-gender")
    assert "exp-gender" in summary and "Tables 1 and 2" not in summary
    page = handler.bias_page(db, "exp-gender")
    assert results == [r[3:] for r in page.results] and confidence == [r[3:] for r in page.confidence]
    assert [(r[0], r[1]) for r in results] == [(m, k) for m in ("CAS", "CAB") for k in ("precision", "recall", "f1")]
    assert len(confidence) == 6 and confidence[0][:3] == ["vanilla", "relevant", None]


# ---------------------------------------------------------------- the plots


def _cab_from_store(db: Path, experiment: str, metric: str) -> float:
    """CAB x100 straight from query_metrics: mean over items of base minus cf."""
    ((value,),) = _raw(db, f"SELECT 100 * avg(b.{metric} - c.{metric}) FROM query_metrics b "
                           "JOIN query_metrics c USING (item_id) WHERE b.run_id = ? AND c.run_id = ?",
                       [f"{experiment}-base", f"{experiment}-cf"])
    return value


def test_the_cab_plot_shows_each_model_and_metric_with_its_interval(db, page):
    fig = plots.cab_figure(page.cab_bars)
    assert fig.layout.barmode == "group"
    assert [(t.name, t.xaxis) for t in fig.data] == [("model-x", "x"), ("model-y", "x"), ("model-x", "x2"), ("model-y", "x2")]
    assert [t.showlegend for t in fig.data] == [True, True, False, False]
    assert [a.text for a in fig.layout.annotations] == ["CAB Δ precision", "CAB Δ recall"]
    for trace, (experiment, metric) in zip(fig.data, [(e, m) for m in ("precision", "recall")
                                                      for e in ("exp-gender", "exp-race")], strict=True):
        bar = next(b for b in page.cab_bars if b.experiment_id == experiment and b.metric == metric)
        assert trace.x == ({"exp-gender": "Gender", "exp-race": "Race"}[experiment],)
        assert trace.y[0] == pytest.approx(_cab_from_store(db, experiment, metric))
        # The error bars reach the interval in the CAS/CAB table.
        row = next(r for r in page.results if r[0] == experiment and r[3:5] == ["CAB", metric])
        value, ci_low, ci_high, p = row[5:9]
        assert trace.y[0] == pytest.approx(value)
        assert trace.y[0] + trace.error_y.array[0] == pytest.approx(ci_high)
        assert trace.y[0] - trace.error_y.arrayminus[0] == pytest.approx(ci_low)
        assert trace.text[0] == f"{value:+.1f}" + ("*" if p < 0.05 else "")
        # Table 2 writes the same value and star (its p is engine.statistics.bias's, from the view's row).
        row2 = next(r for r in page.table2 if r[2] == bar.model)
        assert trace.text[0] == row2[3 if metric == "precision" else 4]
        assert trace.customdata[0][1] == bar.labels and trace.customdata[0][5] == N_ITEMS
    assert list(fig.layout.xaxis.categoryarray) == ["Gender", "Race"]


def test_one_model_with_two_experiments_of_a_type_gets_two_colours():
    bars = [CabValue(e, "m", "gender", "A vs B", "precision", v, v - 1, v + 2, 0.5, 3, "favours A")
            for e, v in (("e1", 1.0), ("e2", -2.0))]
    bars.append(CabValue("e3", "m", "custom", "X vs Y", "precision", 4.0, None, None, None, 1, None))
    fig = plots.cab_figure(bars, metrics=("precision",))
    assert [t.name for t in fig.data] == ["m (e1)", "m (e2)", "m"]
    assert fig.data[2].error_y.array == (None,) and list(fig.layout.xaxis.categoryarray) == ["Gender", "custom"]
    empty = plots.cab_figure([])
    assert not empty.data and empty.layout.annotations[-1].text == "no CAB to plot"


def test_the_probability_plot_shows_the_stored_quartiles_per_label(db, page):
    fig = plots.probability_figure(page.probability_boxes, page.panels)
    assert fig.layout.boxmode == "group"
    panels = [a.text for a in fig.layout.annotations]
    assert panels == ["exp-gender · model-x · Gender (A = Woman, B = Man)", "exp-hai · model-x · Human vs. LLM (A = Human, B = LLM)",
                      "exp-race · model-y · Race (A = White, B = Black)"]
    gender = [t for t in fig.data if t.yaxis == "y"]
    assert [t.name for t in gender] == ["label A", "label B", "no label (vanilla)"]
    # Relevant documents carry label A in base and label B in cf; non-relevant ones the other.
    expected_runs = {"label A": ["exp-gender-base", "exp-gender-cf"], "label B": ["exp-gender-cf", "exp-gender-base"],
                     "no label (vanilla)": ["exp-gender-vanilla", "exp-gender-vanilla"]}
    for trace in gender:
        assert trace.x == ("relevant", "non-relevant")
        for i, (run, relevant) in enumerate(zip(expected_runs[trace.name], (True, False), strict=True)):
            values = np.array([p for (p,) in _raw(
                db, "SELECT probability FROM citations WHERE run_id = ? AND relevant = ?", [run, relevant])])
            assert trace.median[i] == pytest.approx(np.median(values))
            assert (trace.q1[i], trace.q3[i]) == pytest.approx(tuple(np.quantile(values, [0.25, 0.75])))
            assert (trace.lowerfence[i], trace.upperfence[i]) == pytest.approx((values.min(), values.max()))
            assert trace.mean[i] == pytest.approx(values.mean())
    label_a = gender[0]
    assert label_a.hovertext[0].startswith("base: ") and label_a.hovertext[0].endswith("labelled Woman")
    hai = [t.name for t in fig.data if t.yaxis == "y2"]
    assert hai == ["label A", "label B", "no label (vanilla)"]  # base only: A on relevant, B on the others
    assert sum(t.showlegend for t in fig.data) == 3
    assert not plots.probability_figure([]).data


# ---------------------------------------------------------------- the app through gradio_client



def test_bias_table_endpoint_returns_tables_and_plots_for_two_experiments(db):
    import json

    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(db), JobQueue(load=refuse_load), shutdown_timeout=5) as url:
        client = Client(url, verbose=False)
        # Two experiments as an API user sends them: comma-separated text, the multiselect left out.
        summary, results, confidence, table1, table2, cab_note, cab_plot, p_note, p_plot = client.predict(
            "exp-gender, exp-race", api_name="/bias_table")
        assert "exp-gender" in summary and "exp-race" in summary
        assert {r[0] for r in results["data"]} == {"exp-gender", "exp-race"} and len(results["data"]) == 12
        assert results["headers"] == handler.PAGE_RESULT_COLUMNS and len(confidence["data"]) == 12
        assert table1["headers"] == ["Answer generator", "Relevant", "Non-relevant", "Precision", "Recall", "EM"]
        assert [r[0] for r in table2["data"]] == ["Gender", "Race"] and cab_note == ""
        figure = json.loads(cab_plot["plot"])  # plotly JSON, as gr.Plot sends it
        assert [t["name"] for t in figure["data"]] == ["model-x", "model-y"] * 2
        assert json.loads(p_plot["plot"])["layout"]["boxmode"] == "group"
        # No cf yet: a note in place of the CAB plot.
        summary, *_, cab_note, cab_plot, _, _ = client.predict("", ["exp-hai"], api_name="/bias_table")
        assert "exp-hai: no CAB yet" in cab_note and cab_plot is None
        assert "Table 2: no experiment here has complete base and cf runs" in summary
        with pytest.raises(Exception, match="no experiment 'typo' in the store"):
            client.predict("", ["typo"], api_name="/bias_table")


# ---------------------------------------------------------------- by study, and beyond the metrics

EXPLAINED = {  # run -> the explanation of each item: q00..q03 give a label as a reason in base, one in cf
    "exp-gender-base": ["I cited [1] as it was written by a woman.", "Document 2 names the answer.",
                        "The author's gender mattered: [3].", "[2] says so."],
    "exp-gender-cf": ["Only [1] holds the answer.", "[2] was written by a man, so I trusted it.", "No reason.", "[4]"],
}
VERDICTS = ("Attributable.", "extrapolatory", "CONTRADICTORY!", "I cannot tell")


def _add_beyond(db: Path) -> None:
    """Explanations of exp-gender's base and cf answers (two explainers for base), and
    verifications of its base citations, through the store's writers."""
    from engine.judges.explain import mentioned_documents, mentioned_labels
    from engine.judges.verify import parse_class
    from engine.types import Explanation, Verification
    from store.explanation_store import ExplanationStore
    from store.verification_store import VerificationStore

    explanations = [
        Explanation(run, f"q{i:02d}", model, "Prompt 5", text, 9, "stop", (), mentioned_documents(text, 4),
                    mentioned_labels(text, "a woman", "a man", "gender"))
        for run, texts in EXPLAINED.items() for model in (("model-x", "judge-j") if run.endswith("base") else ("model-x",))
        for i, text in enumerate(texts)
    ]
    ExplanationStore(db, timeout_s=10).write_batch(explanations)
    VerificationStore(db, timeout_s=10).write_batch([
        Verification("exp-gender-base", f"q{i:02d}", 0, 1, f"q{i:02d}-d0", "judge-j", "claim", raw, parse_class(raw),
                     None, None, None)
        for i, raw in enumerate(VERDICTS)
    ])


@pytest.fixture(scope="module")
def grouped(db, tmp_path_factory) -> Path:
    """The bias store with two studies (one naming an experiment with no run yet) and beyond-metric rows."""
    import shutil

    path = Path(shutil.copy(db, tmp_path_factory.mktemp("grouped") / "grouped.duckdb"))
    writer = RunStore(path, timeout_s=10)
    for position, experiment in enumerate(["exp-race", "exp-gender", "exp-not-yet"]):
        writer.record_study("paper", {"metadata": ["race", "gender"]}, experiment, position)
    writer.record_study("hai", {"metadata": ["hai"]}, "exp-hai", 0)
    _add_beyond(path)
    return path


def test_choosing_a_study_selects_its_experiments_in_grid_order(grouped, db, monkeypatch):
    assert handler.study_choices(grouped) == [("hai (1 experiment)", "hai"), ("paper (3 experiments)", "paper")]
    assert handler.study_choices(db) == [] and handler.study_choices(grouped.with_name("none.duckdb")) == []
    chosen = handler.study_selection(grouped, " paper ")
    assert chosen.experiment_ids == ["exp-race", "exp-gender"]
    assert chosen.note == "Study paper: 1 of its experiments have no run yet."
    assert handler.study_selection(grouped, "hai") == handler.StudySelection(["exp-hai"], "")
    assert handler.study_selection(grouped, "") == handler.StudySelection([], "")
    with pytest.raises(UserError, match=r"^no study 'nope' in the store \(`python -m engine list --studies`"):
        handler.study_selection(grouped, "nope")
    monkeypatch.setattr(handler, "MAX_EXPERIMENTS", 1)
    cut = handler.study_selection(grouped, "paper")
    assert cut.experiment_ids == ["exp-race"] and "the first 1 of 2 are chosen" in cut.note


def _share_rows(db: Path, run: str, column: str, what: str) -> list[tuple]:
    return _raw(db, f"SELECT {column}, {what} FROM {'explanations' if column == 'explainer_model' else 'verifications'} "
                    "WHERE run_id = ? ORDER BY ALL", [run])


def test_the_page_shows_label_and_attrscore_shares_per_run_as_computed_in_python(grouped):
    page = handler.bias_page(grouped, "exp-race", ["exp-gender"], resamples=200)
    # Only exp-gender has any: its base run by two explainers, its cf run by one; vanilla by none.
    rows = [dict(zip(handler.EXPLANATION_SHARE_COLUMNS, r, strict=True)) for r in page.explanation_shares]
    assert [(r["experiment"], r["rag_mode"], r["run_id"], r["explainer_model"]) for r in rows] == [
        ("exp-gender", "base", "exp-gender-base", "judge-j"), ("exp-gender", "base", "exp-gender-base", "model-x"),
        ("exp-gender", "cf", "exp-gender-cf", "model-x")]
    for r in rows:
        flags = [bool(f) for _, f in _share_rows(grouped, r["run_id"], "explainer_model", "mentions_label")
                 if _ == r["explainer_model"]]
        assert (r["n_explanations"], r["n_mention_label"]) == (len(flags), sum(flags))
        assert r["label_share"] == pytest.approx(sum(flags) / len(flags))
    assert [r["label_share"] for r in rows] == pytest.approx([0.5, 0.5, 0.25])
    (verified,) = [dict(zip(handler.VERIFICATION_SHARE_COLUMNS, r, strict=True)) for r in page.verification_shares]
    classes = [c for _, c in _share_rows(grouped, "exp-gender-base", "judge_model", "class")]
    assert (verified["run_id"], verified["judge_model"], verified["n_citations"]) == ("exp-gender-base", "judge-j", 4)
    for name in ("attributable", "extrapolatory", "contradictory", "unparsed"):
        assert verified[f"{name}_share"] == pytest.approx(classes.count(name) / len(classes)) == 0.25
    assert "label share" in page.beyond_note and "AttrScore shares" in page.beyond_note
    # The API's own call gives the same rows; experiments without any give nothing.
    shares = handler.bias_shares(grouped, "exp-gender, exp-race")
    assert (shares.explanation_shares, shares.verification_shares) == (page.explanation_shares, page.verification_shares)
    nothing = handler.bias_page(grouped, "exp-race", resamples=200)
    assert (nothing.explanation_shares, nothing.verification_shares, nothing.beyond_note) == ([], [], "")


def test_study_and_shares_through_the_api_leave_bias_table_as_it_was(grouped):
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(grouped), JobQueue(load=refuse_load), shutdown_timeout=5) as url:
        client = Client(url, verbose=False)
        chosen, note = client.predict("paper", api_name="/bias_study")
        assert chosen == ["exp-race", "exp-gender"] and "no run yet" in note
        assert len(client.predict("", chosen, api_name="/bias_table")) == 9  # what callers unpack
        shares = client.predict("", chosen, api_name="/bias_shares")
        assert shares["experiments"] == ["exp-race", "exp-gender"]
        assert [(r["run_id"], r["explainer_model"], r["n_explanations"]) for r in shares["explanation_shares"]] == [
            ("exp-gender-base", "judge-j", 4), ("exp-gender-base", "model-x", 4), ("exp-gender-cf", "model-x", 4)]
        assert [r["unparsed_share"] for r in shares["verification_shares"]] == [0.25]
        with pytest.raises(Exception, match="no study 'nope' in the store"):
            client.predict("nope", api_name="/bias_study")
