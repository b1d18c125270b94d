"""A Python API function that reads a store, given a path where there is none (a typo in a
notebook), refuses in one line naming the path and writes nothing: opening the path would
create an empty store there (store.db migrates on open) and then report nothing found."""

from __future__ import annotations

import pytest

from engine import api
from engine.errors import UserError

# name -> a call of the API on the store at `db` (and, for export, a file to write in `out`).
# Each reads the store before anything else it does: the plans of explain, verify and used, and
# the functions that plan first and write only beside an experiment already stored.
READERS = {
    "experiments": lambda db, out: api.experiments(db),
    "experiments_runs": lambda db, out: api.experiments(db, runs=True),
    "experiments_of_study": lambda db, out: api.experiments(db, study="s"),
    "studies": lambda db, out: api.studies(db),
    "export": lambda db, out: api.export(api.ExportRequest(db=db, experiments=("e",), out=out / "x.csv")),
    "report_tables": lambda db, out: api.report_tables(api.ReportRequest(db=db)),
    "report_xai_blocks": lambda db, out: api.report_xai_blocks(api.ReportRequest(db=db)),
    "experiment_tables": lambda db, out: api.experiment_tables(db, ["e"]),
    "bias_report": lambda db, out: api.bias_report(db, "e"),
    "evaluate": lambda db, out: api.evaluate(db, experiment="e"),
    "agreement": lambda db, out: api.agreement(api.AgreementRequest(db=db, experiment="e")),
    "citation_decisions": lambda db, out: api.citation_decisions(api.WhyCitedRequest(experiments=("e",)), db),
    "why_cited": lambda db, out: api.why_cited(api.WhyCitedRequest(experiments=("e",)), db),
    "why_cited_study": lambda db, out: api.why_cited_study(api.StudyEffectsRequest(study="s"), db),
    "compare": lambda db, out: api.compare(api.CompareRequest(a="e", b="f"), db),
    "judge_cab": lambda db, out: api.judge_cab(db, "e", "j"),
    "plan_explain": lambda db, out: api.plan_explain(api.ExplainRequest(db=db, experiment="e")),
    "explain": lambda db, out: api.explain(api.ExplainRequest(db=db, experiment="e")),
    "plan_verify": lambda db, out: api.plan_verify(api.VerifyRequest(db=db, experiment="e")),
    "verify": lambda db, out: api.verify(api.VerifyRequest(db=db, experiment="e")),
    "verify_judges": lambda db, out: api.verify_judges(api.VerifyRequest(db=db, experiment="e")),
    "plan_label_bias": lambda db, out: api.plan_label_bias(api.VerifyRequest(db=db, experiment="e", show_label=True)),
    "plan_used": lambda db, out: api.plan_used(api.UsedRequest(db=db, experiment="e")),
    "used": lambda db, out: api.used(api.UsedRequest(db=db, experiment="e")),
    "propensity": lambda db, out: api.propensity(api.PropensityRequest(db=db, experiment="e")),
}


@pytest.mark.parametrize("as_text", [False, True], ids=["path", "str"])
@pytest.mark.parametrize("name", sorted(READERS))
def test_a_reader_refuses_a_missing_store_and_writes_nothing(name, as_text, tmp_path):
    missing = tmp_path / "typo" / "results.duckdb"  # the folder is missing too: it is not made
    with pytest.raises(UserError) as err:
        READERS[name](str(missing) if as_text else missing, tmp_path)
    message = str(err.value)
    assert str(missing) in message and "\n" not in message, message
    assert list(tmp_path.iterdir()) == []  # no store, no folder, no write-ahead log, no export


def test_the_bias_page_refuses_a_missing_store_in_its_own_words(tmp_path):
    # The app shows this one to visitors, so it names no server path; it writes nothing either.
    missing = tmp_path / "results.duckdb"
    with pytest.raises(UserError, match="^nothing is stored yet: start a run first$"):
        api.bias_page(missing, ["e"])
    assert list(tmp_path.iterdir()) == []


def test_a_store_that_exists_is_still_read(tmp_path):
    from store.db import connect

    db = tmp_path / "s.duckdb"
    with connect(db):  # an empty store, as a first run leaves it before its first answer
        pass
    assert api.experiments(db) == () and api.studies(str(db)) == ()
