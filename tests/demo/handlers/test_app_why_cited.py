"""The Bias tab's "Why was it cited?" panel without a browser: the handler's page against the use
case, escaping, refusals, the forest plot, and `/why_cited` through gradio_client.

The store is tests/engine/usecases/bias/test_why_cited.py's: simulated base and cf choices imported as answers."""

from __future__ import annotations

import numpy as np
import pytest

from demo import plots
from demo.handlers import why_cited as h
from engine.errors import UserError
from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices
from engine.usecases.bias.why_cited import WhyCitedRequest, why_cited
from tests.engine.usecases.bias.test_why_cited import imported  # noqa: F401  (the fixture)
from tests.support.helpers import cli, rows, write_jsonl


def test_the_page_shows_the_use_cases_numbers(imported):  # noqa: F811
    db, experiment, _ = imported
    page = h.why_cited_page(db, experiment, [], "group", "")
    want = why_cited(WhyCitedRequest(experiments=(experiment,)), db)
    assert [row[0] for row in page.effects] == [e.term for e in want.fit.effects]
    assert [row[1] for row in page.effects] == pytest.approx([e.odds_ratio for e in want.fit.effects])
    assert [r.odds_ratio for r in page.forest] == pytest.approx([e.odds_ratio for e in want.fit.effects])
    assert [row[2] for row in page.suppression] == [r.silent for r in want.suppression.rates]
    assert "multiplies the odds of citing a document" in page.summary and "300 answers" in page.summary
    assert "McNemar" in page.suppression_note and "chi-square" in page.suppression_note
    # How many answers cite several documents, and the cluster-robust interval beside the model's.
    assert "every informative answer cites one document" in page.summary
    assert "cluster-robust (sandwich) by item" in page.summary
    assert [x for row in page.effects for x in row[5:]] == pytest.approx(
        [x for e in want.fit.effects for x in (e.robust_ci_low, e.robust_ci_high, e.robust_p)])
    # The multiselect and the text box name the same experiment once; modes narrow the answers.
    assert h.why_cited_page(db, experiment, [experiment]).experiment_ids == (experiment,)
    only_cf = h.why_cited_page(db, "", [experiment], "number", "", ["cf"])
    assert len(only_cf.suppression) == 1 and "not estimated" in only_cf.summary


@pytest.mark.parametrize("text, interactions, message", [
    ("", "", "choose an experiment"),
    ("EXP", "label:relevant position:label repeated:label label:colour relevant:position", "at most 4 interactions"),
    ("EXP", "label:colour", "colour"),
    ("nope", "", "no experiment 'nope'"),
])
def test_refusals_are_one_line(imported, text, interactions, message):  # noqa: F811
    db, experiment, _ = imported
    with pytest.raises(UserError, match=message) as caught:
        h.why_cited_page(db, text.replace("EXP", experiment), [], "group", interactions)
    assert "\n" not in str(caught.value) and str(db.parent) not in str(caught.value)
    with pytest.raises(UserError, match="nothing is stored yet"):
        h.why_cited_page(db.parent / "none.duckdb", "x")


def test_stored_text_is_escaped_in_the_summary(tmp_path):
    settings = SimulationSettings(n_items=40, label_a="<b>*bold*</b>", label_b="a [link](x)")
    sim = simulate_choices(settings, ChoiceTruth(), np.random.default_rng(5))
    frame = sim.frame.sort_values(["condition", "item", "position"])
    items = [{"id": item, "question": "q", "answers": ["g"],
              "documents": [{"id": f"{item}-{p}", "text": "t", "relevant": bool(r)}
                            for p, r in zip(docs["position"], docs["relevant"], strict=True)]}
             for item, docs in frame[frame["condition"] == "base"].groupby("item", sort=False)]
    dataset = write_jsonl(tmp_path / "d.jsonl", items)
    db = tmp_path / "s.duckdb"
    for mode in ("base", "cf"):
        answers = [{"item_id": item, "answer": "x" + "".join(f" [{p}]" for p in docs.loc[docs["cited"], "position"])}
                   for item, docs in frame[frame["condition"] == mode].groupby("item", sort=False)]
        extra = ["--experiment", rows(db, "SELECT experiment_id FROM runs")[0][0]] if mode == "cf" else []
        assert cli("import", "--dataset", str(dataset), "--answers", str(write_jsonl(tmp_path / f"{mode}.jsonl", answers)),
                   "--mode", mode, "--metadata", "custom", "--label-a", settings.label_a, "--label-b", settings.label_b,
                   "--db", str(db), *extra) == 0
    page = h.why_cited_page(db, rows(db, "SELECT experiment_id FROM runs")[0][0])
    assert "<b>" not in page.summary and "&lt;b&gt;\\*bold\\*&lt;/b&gt;" in page.summary
    assert "\\[link\\](x)" in page.summary


def test_the_forest_plot_draws_each_effect_on_a_log_axis_and_escapes_its_names():
    from engine.statistics.choice_model import Effect

    rows_ = [Effect("relevant", 3.8, 3.0, 4.9, 1e-9, 1.335, 0.13), Effect("label[<i>x</i>]", 0.9, 0.7, 1.2, 0.4, -0.105, 0.14)]
    fig = plots.forest_figure(rows_)
    (trace,) = fig.data
    assert list(trace.x) == [3.8, 0.9] and fig.layout.xaxis.type == "log"
    assert list(trace.error_x.array) == pytest.approx([1.1, 0.3]) and list(trace.error_x.arrayminus) == pytest.approx([0.8, 0.2])
    assert "<i>" not in trace.y[1] and "&lt;i&gt;" in trace.y[1]
    assert plots.forest_figure([]).layout.annotations[0].text == "no effect to plot"


@pytest.fixture(scope="module")
def client(imported):  # noqa: F811
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(imported[0]), JobQueue(load=refuse_load)) as url:
        yield Client(url, verbose=False)


def test_why_cited_through_the_api(client, imported):  # noqa: F811
    from gradio_client.exceptions import AppError

    db, experiment, _ = imported
    got = client.predict(experiment, [], "group", "", [], api_name="/why_cited")
    want = why_cited(WhyCitedRequest(experiments=(experiment,)), db)
    assert [e["effect"] for e in got["effects"]] == [e.term for e in want.fit.effects]
    assert [e["odds_ratio"] for e in got["effects"]] == pytest.approx([e.odds_ratio for e in want.fit.effects])
    assert len(got["suppression"]) == 2 and got["experiments"] == [experiment]
    assert [e["robust_ci_high"] for e in got["effects"]] == pytest.approx([e.robust_ci_high for e in want.fit.effects])
    with pytest.raises(AppError) as caught:
        client.predict("nope", [], "group", "", [], api_name="/why_cited")
    assert "no experiment 'nope'" in str(caught.value) and "\n" not in str(caught.value)


def test_the_app_bounds_the_answers_it_fits(imported, monkeypatch):  # noqa: F811
    db, experiment, _ = imported
    monkeypatch.setattr(h, "MAX_ANSWERS", 299)  # the store holds 300
    with pytest.raises(UserError, match="300 answers are more than the 299 fitted here") as caught:
        h.why_cited_page(db, experiment)
    assert "\n" not in str(caught.value)
    assert len(h.why_cited_page(db, experiment, [], "group", "", ["base"]).suppression) == 1  # 150 answers


def test_the_app_bounds_the_decisions_it_fits_before_reading_them(imported, monkeypatch):  # noqa: F811
    """Documents x answers is what a fit's time and memory grow with: refused in one
    line from a count, before a decision row is read."""
    import store.queries

    db, experiment, _ = imported  # 300 answers of 5 documents: 1,500 decisions
    h.clear_cache()
    monkeypatch.setattr(store.queries, "decision_frame", lambda *a, **k: pytest.fail("read before the bound"))
    with pytest.raises(UserError, match="300 answers x their shown documents make 1,500 citation decisions, more "
                                        "than the 1,499 fitted here") as caught:
        h.why_cited_page(db, experiment, max_decisions=1499)
    assert "\n" not in str(caught.value) and str(db.parent) not in str(caught.value)
    # The handler fits in a child process (demo.fit_child), out of this patch's reach: the use
    # case it runs there refuses before reading, here.
    with pytest.raises(UserError, match="make 1,500 citation decisions"):
        why_cited(WhyCitedRequest(experiments=(experiment,), max_decisions=1499), db)
    monkeypatch.undo()
    assert len(h.why_cited_page(db, experiment, [], "group", "", ["cf"], max_decisions=750).suppression) == 1


def test_fits_are_kept_per_store_state(imported, monkeypatch):  # noqa: F811
    import demo.fit_child

    db, experiment, _ = imported
    h.clear_cache()
    fits = []
    real = demo.fit_child.fit_in_child
    monkeypatch.setattr(demo.fit_child, "fit_in_child", lambda *a, **k: fits.append(1) or real(*a, **k))
    first = h.why_cited_page(db, experiment, [], "number", "")
    again = h.why_cited_page(db, "", [experiment], "number", "")  # the same request, asked another way
    assert len(fits) == 1 and again.effects == first.effects
    # A kept page is served without queuing: here at a gate that admits nothing (no slot, no room).
    closed = h.FitGate(0, max_waiting=0)
    assert h.why_cited_page(db, experiment, [], "number", "", gate=closed).effects == first.effects
    h.why_cited_page(db, experiment, [], "number", "", ["base"])
    assert len(fits) == 2


def test_the_operator_sets_the_decisions_bound(monkeypatch):
    from demo.settings import DEFAULT_MAX_FIT_DECISIONS, settings_from_env

    monkeypatch.delenv("PATTRIEVAL_MAX_FIT_DECISIONS", raising=False)
    # Measured with a 2x margin on the child's memory and CPU caps (docs/figures.md):
    # 500,000 answers of 10 shown documents.
    assert settings_from_env("x.duckdb").max_fit_decisions == DEFAULT_MAX_FIT_DECISIONS == 5_000_000
    assert h.MAX_ANSWERS == 500_000
    monkeypatch.setenv("PATTRIEVAL_MAX_FIT_DECISIONS", "5000")
    assert settings_from_env("x.duckdb").max_fit_decisions == 5000
    monkeypatch.setenv("PATTRIEVAL_MAX_FIT_DECISIONS", "lots")
    with pytest.raises(UserError, match="PATTRIEVAL_MAX_FIT_DECISIONS must be a whole number above 0"):
        settings_from_env("x.duckdb")
