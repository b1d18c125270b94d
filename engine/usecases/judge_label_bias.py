"""The judge's own label bias (issue 32 §3): is a judge that sees the documents' labels swayed by them?

A judge run with `--show-label` judges the base run's and the cf run's citations, each with the
label the answering model saw. Where both runs hold a verdict on the same (item, sentence,
position) with the same document there, the document and the judge are the same and only the
label differs (base gives label A to relevant documents, cf gives it to the others). The judge's
CAB is the share judged attributable in base minus the share in cf on those pairs, with an exact
McNemar test of the paired verdicts (engine.statistics.compare_stats.mcnemar_exact), as the
generator's paired statistics are.

A pair whose base or cf verdict is unparsed is left out (an unreadable output is no judgement,
not "not attributable"); with none left the CAB is undefined, and says why.

The answers of the two runs may differ: a pair counts only where its key and document agree, and
the sentence at that key is each run's own (the claim may differ; the document and label are what
the pair holds fixed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from engine.judges.verify import UNPARSED


@dataclass(frozen=True)
class JudgeCab:
    """A label-shown judge's CAB on one experiment's base and cf runs."""

    judge: str
    base_run: str
    cf_run: str
    label_a: str | None  # the label base gives relevant documents
    label_b: str | None
    n_pairs: int
    base_share: float  # share judged attributable in base (NaN without pairs)
    cf_share: float
    p: float  # exact McNemar (1 without discordant pairs; NaN without pairs)
    n_unparsed: int = 0  # pairs left out: the judge's output in base or cf could not be read

    @property
    def undefined(self) -> str | None:
        """Why there is no CAB: no pair, or none whose two verdicts were both read (an unparsed
        verdict is no judgement, not "not attributable"); None when there is one."""
        if self.n_pairs:
            return None
        if self.n_unparsed:
            return (f"the judge's output was unparsed in base or cf in all {self.n_unparsed} paired citations: "
                    "no verdict to compare")
        return "no pair judged in both base and cf (run both with --show-label)"

    @property
    def cab(self) -> float:
        """base share - cf share: > 0 when the judge finds a document more supportive with the
        label base gives it."""
        return self.base_share - self.cf_share


def judge_cab(db: Path, experiment: str, judge: str) -> JudgeCab:
    """The CAB of `judge` (a "+label" judge's stored name) on the experiment's base and cf runs;
    one line when the experiment is unknown or lacks either run."""
    from engine.paths import require_store
    from engine.statistics.compare_stats import mcnemar_exact
    from engine.usecases.bias import unknown_experiment
    from store.queries import explain_runs
    from store.queries.verify_labels import paired_verdicts

    runs = explain_runs(require_store(db), experiment=experiment)
    if runs is None:
        raise UserError(unknown_experiment(db, experiment))
    by_mode = {r.rag_mode: r for r in runs}
    if "base" not in by_mode or "cf" not in by_mode:
        raise UserError(f"experiment '{experiment}' has no base and cf run to measure the judge's label bias on")
    base, cf = by_mode["base"], by_mode["cf"]
    paired = paired_verdicts(db, base.run_id, cf.run_id, judge)
    rows = [row for row in paired if UNPARSED not in (row[4], row[5])]
    unparsed = len(paired) - len(rows)
    a = [1.0 if row[4] == "attributable" else 0.0 for row in rows]
    b = [1.0 if row[5] == "attributable" else 0.0 for row in rows]
    n = len(rows)
    if n == 0:
        return JudgeCab(judge, base.run_id, cf.run_id, base.label_a, base.label_b, 0, math.nan, math.nan, math.nan,
                        unparsed)
    return JudgeCab(judge, base.run_id, cf.run_id, base.label_a, base.label_b, n, sum(a) / n, sum(b) / n,
                    mcnemar_exact(a, b).p, unparsed)
