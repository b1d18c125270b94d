"""The judge's own label bias: is a judge that sees the documents' labels swayed by them?

`verify --show-label` has the judge judge each (sentence, cited document) pair of the base run
twice with the label shown: as the base prompt showed it after that document, and as the cf
prompt showed it (the other label), and twice with the label hidden
(engine.usecases.judges.judge_label_pairs). The sentence, question and document are the same each time,
so only the label differs. The judge's CAB is the share judged attributable with the base label
minus that with the cf label, with an exact McNemar test of the paired verdicts
(engine.statistics.compare_stats.mcnemar_exact), as the generator's paired statistics are. Beside
it, the control: the same measure between the two hidden verdicts of each pair, what the judge
reads when nothing but its own noise differs.

A pair whose verdict is unparsed in either is left out (an unreadable output is no judgement,
not "not attributable"); with none left the CAB is undefined, and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from engine.judges.verify import UNPARSED
from engine.paths import require_store
from engine.usecases.experiments import unknown_experiment
from engine.usecases.judges.verify_nli import SHOWN

NO_PAIRS = "no pair of the base run judged with both labels (run verify --show-label on the experiment)"


@dataclass(frozen=True)
class PairedShares:
    """The base - cf share judged attributable on one set of paired verdicts."""

    n_pairs: int
    base_share: float  # share judged attributable with the base label (NaN without pairs)
    cf_share: float
    p: float  # exact McNemar (1 without discordant pairs; NaN without pairs)
    n_unparsed: int = 0  # pairs left out: the judge's output in either could not be read

    @property
    def undefined(self) -> str | None:
        """Why there is no CAB: no pair, or none whose two verdicts were both read; None when there is one."""
        if self.n_pairs:
            return None
        if self.n_unparsed:
            return (f"the judge's output was unparsed in one of the two verdicts of all {self.n_unparsed} "
                    "paired citations: no verdict to compare")
        return NO_PAIRS

    @property
    def cab(self) -> float:
        """base share - cf share: > 0 when the judge finds a document more supportive with the
        label base gives it."""
        return self.base_share - self.cf_share


@dataclass(frozen=True)
class JudgeCab:
    """A label-shown judge's CAB on one experiment's base run, and its hidden-label control.
    n_pairs, cab, p, ... are the label-shown measure's."""

    judge: str
    base_run: str
    cf_run: str
    label_a: str | None  # the label base gives relevant documents
    label_b: str | None
    shown: PairedShares  # the same sentence with the base and with the cf label
    hidden: PairedShares  # the control: the same sentence with no label, in each pass

    @property
    def n_pairs(self) -> int:
        return self.shown.n_pairs

    @property
    def base_share(self) -> float:
        return self.shown.base_share

    @property
    def cf_share(self) -> float:
        return self.shown.cf_share

    @property
    def p(self) -> float:
        return self.shown.p

    @property
    def n_unparsed(self) -> int:
        return self.shown.n_unparsed

    @property
    def undefined(self) -> str | None:
        return self.shown.undefined

    @property
    def cab(self) -> float:
        return self.shown.cab


def paired_shares(paired: tuple[tuple, ...]) -> PairedShares:
    """PairedShares of rows (..., class with the base label, class with the cf label), unparsed
    pairs left out."""
    from engine.statistics.compare_stats import mcnemar_exact

    rows = [row for row in paired if UNPARSED not in (row[-2], row[-1])]
    unparsed = len(paired) - len(rows)
    n = len(rows)
    if n == 0:
        return PairedShares(0, math.nan, math.nan, math.nan, unparsed)
    a = [1.0 if row[-2] == "attributable" else 0.0 for row in rows]
    b = [1.0 if row[-1] == "attributable" else 0.0 for row in rows]
    return PairedShares(n, sum(a) / n, sum(b) / n, mcnemar_exact(a, b).p, unparsed)


def judge_cab(db: Path, experiment: str, judge: str) -> JudgeCab:
    """The CAB of `judge` (as `verify --show-label` names it, "...+label"; the name without it is
    read as that) on the experiment's base run, and its hidden-label control; one line when the
    experiment is unknown or lacks a base or cf run."""
    from store.queries import explain_runs
    from store.queries.verify_labels import paired_verdicts

    runs = explain_runs(require_store(db), experiment=experiment)
    if runs is None:
        raise UserError(unknown_experiment(db, experiment))
    by_mode = {r.rag_mode: r for r in runs}
    if "base" not in by_mode or "cf" not in by_mode:
        raise UserError(f"experiment '{experiment}' has no base and cf run to measure the judge's label bias on")
    base, cf = by_mode["base"], by_mode["cf"]
    name = judge if judge.endswith(SHOWN) else judge + SHOWN
    return JudgeCab(name, base.run_id, cf.run_id, base.label_a, base.label_b,
                    paired_shares(paired_verdicts(db, base.run_id, name, shown=True)),
                    paired_shares(paired_verdicts(db, base.run_id, name, shown=False)))
