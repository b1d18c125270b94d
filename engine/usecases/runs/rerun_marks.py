"""Items whose citations change on a rerun too: the marks `compare` and the Query tab put on them.

An item's citations may change between two runs (base and cf, or two models) because of what
differs between them, or because the engine answers the same prompt otherwise when asked again
(another batch, another sampling draw). Where a run has reruns (`run --reruns`), an item whose
cited set also differs between the run and a rerun of it is marked "changes on a rerun too"
(store.queries.rerun_changes says exactly when); without reruns nothing can be told, and the
faces say how to find out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from store.queries.rerun_changes import RerunChanges

MARK = "changes on a rerun too"
NO_RERUN = "no rerun to tell engine noise from a real change: `run --reruns 1` measures it"


@dataclass(frozen=True)
class PairRerunMarks:
    """Of two compared runs: how many reruns each has, and how many paired items change on one."""

    reruns_a: int
    reruns_b: int
    n_paired: int
    n_changed: int  # paired items whose cited set differs between run A or B and a rerun of it

    @property
    def known(self) -> bool:
        return bool(self.reruns_a or self.reruns_b)

    def line(self) -> str:
        """One sentence for the comparison's summary."""
        if not self.known:
            return f"{MARK}: unknown, {NO_RERUN}"
        return (f"{MARK}: {self.n_changed} of {self.n_paired} paired items (reruns: A {self.reruns_a}, "
                f"B {self.reruns_b}); their flips between A and B may be engine noise alone")


def pair_marks(changes: RerunChanges, run_a: str, run_b: str, item_ids: tuple[str, ...] | list[str]
               ) -> tuple[PairRerunMarks, list[bool | None]]:
    """The summary and, per item of `item_ids`, whether it changes on a rerun of run A or of run B
    (None for every item when neither run has a rerun)."""
    a, b = len(changes.reruns.get(run_a, ())), len(changes.reruns.get(run_b, ()))
    if not (a or b):
        return PairRerunMarks(0, 0, len(item_ids), 0), [None] * len(item_ids)
    changed = [changes.changes(run_a, i) or changes.changes(run_b, i) for i in item_ids]
    return PairRerunMarks(a, b, len(item_ids), sum(changed)), list[bool | None](changed)


@dataclass(frozen=True)
class ModeRerunMark:
    """Of one item's answer in one mode: how many reruns of its run answered the item too, and
    whether one of them cites other documents."""

    mode: str
    reruns: int
    changed: bool

    def text(self) -> str:
        """The mark beside the mode's answer; "" where no rerun answered the item."""
        if not self.reruns:
            return ""
        if self.changed:
            return MARK
        return f"same citations on {self.reruns} rerun{'' if self.reruns == 1 else 's'}"


def mode_marks(changes: RerunChanges, runs: tuple[tuple[str, str], ...] | list[tuple[str, str]],
               item_id: str) -> tuple[ModeRerunMark, ...]:
    """Per (mode, run id) of `runs`, the item's mark (rerun_changes read with this item)."""
    return tuple(ModeRerunMark(mode, changes.held.get(run, 0), changes.changes(run, item_id)) for mode, run in runs)
