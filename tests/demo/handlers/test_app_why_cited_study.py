"""The Bias tab's study model (the study model's app face) without a browser: the handler's page
against the use case, its bounds and refusals in one line, the child's words, and
`/why_cited_study` through gradio_client.

The store is tests/engine/statistics/test_study_model.py's: a simulated study of two models (m1: label odds ratio 2,
m2: none) imported as the experiments of the study 'grid'."""

from __future__ import annotations

import math

import pytest

from demo import plots
from demo.handlers import why_cited as pooled
from demo.handlers import why_cited_study as h
from engine.errors import UserError
from engine.presentation.formatting import format_ratio
from engine.usecases.study.effects import StudyEffectsRequest, why_cited_study
from tests.engine.statistics.test_study_model import stored  # noqa: F401  (the fixture)


def test_the_page_shows_the_use_cases_numbers(stored):  # noqa: F811
    db, _ = stored
    pooled.clear_cache()
    page = h.study_model_page(db, "grid")
    want = why_cited_study(StudyEffectsRequest("grid"), db).fit
    assert [row[0] for row in page.effects] == ["model=m1", "model=m2"]
    for row, e in zip(page.effects, want.configurations, strict=True):
        assert row[1] == "a woman vs a man"
        # As the command prints it (engine/commands/why_cited.py): one formatter for both.
        assert row[2] == f"{format_ratio(e.odds_ratio)} [{format_ratio(e.or_low)}, {format_ratio(e.or_high)}]"
        assert row[4:] == [e.n_items, e.n_answers]
    # The API's numbers are the use case's, exactly.
    got = page.as_dict()["configurations"]
    assert [c["log_odds"] for c in got] == pytest.approx([e.log_odds for e in want.configurations], rel=1e-9)
    assert [c["se"] for c in got] == pytest.approx([e.se for e in want.configurations], rel=1e-9)
    # The interaction test, named, with its chi-square, df and p; the per-axis test beside it.
    t = want.interaction
    assert t is not None
    assert (f"**Wald test** (cluster-robust (sandwich) by item) that the label effect is the same in every "
            f"configuration (all label x configuration interactions are 0): chi-square = {t.chi2:.2f}, df = 1") in page.tests
    assert "does not depend on model" in page.tests
    # Holm's correction, named, over the one pair.
    assert page.pairwise_title == "pairwise differences of the label effect, Holm-corrected over 1 pair"
    (d,) = want.pairwise
    assert page.pairwise[0][:2] == ["model=m2", "model=m1"]
    assert page.pairwise[0][2] == (f"{format_ratio(math.exp(d.difference))} [{format_ratio(math.exp(d.ci_low))}, "
                                   f"{format_ratio(math.exp(d.ci_high))}]")
    assert page.pairwise[0][5] == ("yes" if d.reject else "no")
    assert page.as_dict()["fit"]["pairwise"][0]["p_adjusted"] == pytest.approx(d.p_adjusted)
    assert "not an axis:* top\\_k" in page.summary and "cluster-robust (sandwich) by item" in page.summary
    assert page.experiment_ids == tuple(page.as_dict()["experiments"]) and len(page.experiment_ids) == 2
    # The forest plot draws each configuration's odds ratio and interval.
    fig = plots.forest_figure(page.forest, h.TITLE, h.AXIS_TITLE)
    assert list(fig.data[0].y) == ["model=m1", "model=m2"]
    assert list(fig.data[0].x) == pytest.approx([e.odds_ratio for e in want.configurations])
    assert h.TITLE in fig.layout.title.text and fig.layout.xaxis.title.text == h.AXIS_TITLE


def test_the_app_bounds_the_answers_a_study_fits_with_a_line_to_the_cli(stored, monkeypatch):  # noqa: F811
    import store.queries

    db, _ = stored  # 2 models x 2 modes x 40 items: 160 answers of 5 documents
    pooled.clear_cache()
    monkeypatch.setattr(h, "MAX_ANSWERS", 159)
    with pytest.raises(UserError) as caught:
        h.study_model_page(db, "grid")
    assert str(caught.value) == ("study 'grid' holds 160 answers, more than the 159 fitted here; choose fewer modes, "
                                 "or run `python -m engine why-cited --study grid` on the store (no bound there)")
    monkeypatch.setattr(h, "MAX_ANSWERS", 160)
    assert len(h.study_model_page(db, "grid", max_decisions=800).configurations) == 2
    with pytest.raises(UserError, match="160 answers x their shown documents make 800 citation decisions, more than "
                                        "the 799 fitted here; .*why-cited --study grid") as caught:
        h.study_model_page(db, "grid", max_decisions=799)
    assert "\n" not in str(caught.value) and str(db.parent) not in str(caught.value)
    # Counted before a row is read (the use case the child runs, here in this process).
    monkeypatch.setattr(store.queries, "decision_frame", lambda *a, **k: pytest.fail("read before the bound"))
    with pytest.raises(UserError, match="160 answers, more than the 100 fitted here"):
        why_cited_study(StudyEffectsRequest("grid", max_answers=100), db)


@pytest.mark.parametrize("study, modes, message", [
    ("", [], "choose a study"),
    ("nope", [], "no study 'nope'"),
    ("grid", ["base"], "study 'grid': in configuration model=m1 the label moves with relevance or position"),
    ("grid", ["colour"], "unknown mode 'colour'"),
])
def test_what_cannot_be_fitted_is_refused_in_one_line(stored, study, modes, message):  # noqa: F811
    db, _ = stored
    with pytest.raises(UserError, match=message) as caught:
        h.study_model_page(db, study, modes)
    assert "\n" not in str(caught.value) and str(db.parent) not in str(caught.value)


def test_a_study_fit_past_its_time_names_the_study_model_and_its_command(stored):  # noqa: F811
    from demo.fit_child import FitBounds

    db, _ = stored
    pooled.clear_cache()
    with pytest.raises(UserError, match=r"^the study model took more than 0\.05 s of CPU to fit \(the time limit "
                                        r"here\); choose fewer modes, or run `python -m engine why-cited --study grid`"):
        h.study_model_page(db, "grid", ["base", "cf"], bounds=FitBounds(timeout_s=0.05))


@pytest.fixture(scope="module")
def client(stored):  # noqa: F811
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(stored[0]), JobQueue(load=refuse_load)) as url:
        yield Client(url, verbose=False)


@pytest.mark.slow
def test_why_cited_study_through_the_api(client, stored):  # noqa: F811
    from gradio_client.exceptions import AppError

    db, _ = stored
    got = client.predict("grid", [], "group", api_name="/why_cited_study")
    want = why_cited_study(StudyEffectsRequest("grid"), db).fit
    assert [c["configuration"] for c in got["configurations"]] == ["model=m1", "model=m2"]
    assert [c["odds_ratio"] for c in got["configurations"]] == pytest.approx([e.odds_ratio for e in want.configurations])
    assert got["fit"]["interaction"]["df"] == 1 and got["fit"]["correction"] == "Holm"
    assert "Wald test" in got["tests"]
    with pytest.raises(AppError) as caught:
        client.predict("nope", [], "group", api_name="/why_cited_study")
    assert "no study 'nope'" in str(caught.value) and "\n" not in str(caught.value)
