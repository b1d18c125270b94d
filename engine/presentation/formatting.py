"""How both faces write the numbers and names of a report: p values, the paper's metadata type
names and order, and Tables 1 and 2 as rows of display strings. One home, so the CLI's
`report` and the app's Bias tab (and its plots) print the same cells."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.prompting.prompts import TYPE_TITLES
from engine.statistics.bias import SIGNIFICANCE  # Table 2's stars; a value of this API: faces word them

# The paper's Table 2 names and order of the built-in types (engine.prompting.prompts.METADATA_TYPES);
# custom types follow under their own names.
TYPE_NAMES = TYPE_TITLES  # the paper's table names, in its order (engine.prompting.prompts)
TYPE_ORDER = tuple(TYPE_TITLES)
# How Table 2's titles name the test whose p gets a star (engine.statistics.bias.difference_test, at the
# level of `bias`'s verdict, engine.statistics.bias.SIGNIFICANCE).
STAR_TEST = "the paired test of `bias`: sign-flip permutation test, paired t-test above 1,000 differing items"


def format_p(p: float | None) -> str:
    """A p value as people read it."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def format_ratio(x: float | None) -> str:
    """An odds ratio in 3 significant digits, trailing zeros kept so that a column of them lines up
    ("1.40" beside "1.37", not "1.4"); at 1,000 or more in e-notation ("1.23e+04"); "-" when missing."""
    if x is None or x != x:
        return "-"
    if x >= 999.5:  # what 3 digits round to 1,000
        return f"{x:.2e}"
    return f"{x:#.3g}".rstrip(".")  # '#' keeps the zeros, and a point after 100-999, dropped here


def fmt(x: float | None, spec: str) -> str:
    """A number in `spec`, "-" when missing."""
    return "-" if x is None else format(x, spec)


def type_name(name: str | None) -> str:
    """A metadata type as Table 2 names it; "-" for none."""
    return TYPE_NAMES.get(name or "", name or "-")


def cab_cell(value: float | None, p: float | None) -> str:
    """A CAB as Table 2 writes it: +12.3, with * where p < SIGNIFICANCE; "undefined" where the
    bias view has no value (say, no answer cites a shown document: never 0, read as no bias)."""
    if value is None:
        return "undefined"
    star = "*" if p is not None and p < SIGNIFICANCE else ""
    return f"{value:+.1f}{star}"


def precision_cell(row: dict[str, Any]) -> str:
    """A Table 1 precision: 41.7; "undefined: <why>" where no answer of the run cites a shown
    document (engine.usecases.bias.tables.UNCITED), never the 0.0 its answers average to."""
    if row.get("precision_undefined"):
        return f"undefined: {row['precision_undefined']}"
    return fmt(row["precision"], ".1f")


def has_floors(rows2: list[dict[str, Any]]) -> bool:
    """Whether an experiment of Table 2 has reruns (engine.usecases.bias.tables.with_floors): then the
    table shows each CAB's rerun floor."""
    return any(r.get("precision_floor") is not None or r.get("recall_floor") is not None or r.get("floor_note")
               for r in rows2)


def floor_cell(row: dict[str, Any], metric: str) -> str:
    """A CAB's rerun floor: +0.3; "undefined" where the reruns give none (why: table2_notes);
    "no rerun" for an experiment without reruns."""
    value = row.get(f"{metric}_floor")
    if value is not None:
        return f"{value:+.1f}"
    return "undefined" if row.get("floor_note") else "no rerun"


def labels_cell(row: dict[str, Any]) -> str:
    if row.get("label_a") and row.get("label_b"):
        return f"{row['label_a']} vs {row['label_b']}"
    return "label A vs label B"


def many_datasets(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]]) -> bool:
    """Whether the rows span datasets (the tables then get a dataset column)."""
    return len({r["dataset_sha"] or r["dataset"] for r in rows1 + rows2}) > 1


def single_dataset(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]]) -> str | None:
    """The one dataset all rows share (the tables then have no dataset column), else None."""
    datasets = {r["dataset"] for r in rows1 + rows2}
    return datasets.pop() if len(datasets) == 1 and not many_datasets(rows1, rows2) else None


def has_settings(rows: list[dict[str, Any]]) -> bool:
    """Whether rows carry a setting (engine.usecases.bias.row_labels): the table then gets a Setting column."""
    return any(r.get("setting") for r in rows)


def row_title(row: dict[str, Any]) -> str:
    """A Table 2 row as a note names it: type / model, and its setting where it has one."""
    setting = f" ({row['setting']})" if row.get("setting") else ""
    return f"{type_name(row['metadata_type'])} / {row['model']}{setting}"


def table2_notes(rows2: list[dict[str, Any]]) -> list[str]:
    """What Table 2's cells cannot say: pairs short of items, and why a CAB is undefined."""
    notes = []
    for r in rows2:
        if r.get("note"):
            notes.append(f"{row_title(r)}: {r['note']}")
        undefined = [m for m in ("precision", "recall") if r.get(m) is None]
        if undefined:
            reasons = {r.get(f"{m}_undefined") or "the bias view gives no value" for m in undefined}
            notes.append(f"{row_title(r)}: CAB on {' and '.join(undefined)} undefined: {'; '.join(sorted(reasons))}")
        if r.get("floor_note"):
            notes.append(f"{row_title(r)}: rerun floor undefined: {r['floor_note']}")
    if has_floors(rows2):
        notes.append("Rerun floor: CAB between base and its reruns (`run --reruns`), what noise alone reads; "
                     "its interval and CAS against its floor: `bias --experiment ID`")
    return notes


SETTING_NOTE = ("Setting: what tells apart rows that the other columns would show alike: the options in which "
                "their experiments differ, else the experiment's name or id.")


def formatted_tables(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]]) -> tuple[list[list[str]], list[list[str]]]:
    """Both tables as header + rows of display strings."""
    many = many_datasets(rows1, rows2)
    set1, set2 = has_settings(rows1), has_settings(rows2)
    head1 = (["Answer generator"] + (["Dataset"] if many else []) + (["Setting"] if set1 else [])
             + ["Relevant", "Non-relevant", "Precision", "Recall", "EM"])
    body1 = []
    for r in rows1:
        body1.append([r["model"]] + ([r["dataset"]] if many else []) + ([r["setting"] or "-"] if set1 else []) + [
            r["relevant"], r["non_relevant"], precision_cell(r), fmt(r["recall"], ".1f"), fmt(r["em"], ".3f")])
    head2 = (["Metadata type", "Labels (A vs B)", "Answer generator"] + (["Dataset"] if many else [])
             + (["Setting"] if set2 else []) + ["CAB Δ Precision", "CAB Δ Recall"]
             + (["Rerun floor Precision", "Rerun floor Recall"] if (floors := has_floors(rows2)) else []))
    body2 = []
    for r in rows2:
        body2.append([type_name(r["metadata_type"]), labels_cell(r), r["model"]] + ([r["dataset"]] if many else [])
                     + ([r["setting"] or "-"] if set2 else [])
                     + [cab_cell(r["precision"], r["precision_p"]), cab_cell(r["recall"], r["recall_p"])]
                     + ([floor_cell(r, "precision"), floor_cell(r, "recall")] if floors else []))
    return [head1] + body1, [head2] + body2


@dataclass(frozen=True)
class PrintedTables:
    """Tables 1 and 2 of some rows as `report` prints them, and what it prints beside them."""

    table1: tuple[tuple[str, ...], ...]  # header row first
    table2: tuple[tuple[str, ...], ...]
    dataset: str | None  # the one dataset of the rows (the tables then have no dataset column), None if several
    table2_notes: tuple[str, ...]  # the notes printed under Table 2
    has_settings: bool  # some row carries a setting (SETTING_NOTE explains them)


def printed_tables(rows1: Sequence[dict[str, Any]], rows2: Sequence[dict[str, Any]]) -> PrintedTables:
    """The rows of Tables 1 and 2 (engine.usecases.bias.tables.experiment_tables) as the faces print them."""
    rows1, rows2 = list(rows1), list(rows2)
    table1, table2 = formatted_tables(rows1, rows2)
    return PrintedTables(tuple(tuple(r) for r in table1), tuple(tuple(r) for r in table2), single_dataset(rows1, rows2),
                         tuple(table2_notes(rows2)), has_settings(rows1) or has_settings(rows2))
