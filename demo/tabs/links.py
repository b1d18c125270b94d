"""What one tab hands the app so that another can open it: values returned by the tabs' `build`,
which `demo.app.build_app` wires together. A tab never looks another up; each link is passed
by name, so a tab that is not built (a published leaderboard shows one tab) simply has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Opener:
    """A way into a tab from another: `open(...)` gives the updates of `outputs` (the first is
    the app's gr.Tabs, selecting the tab), and `then(event)` chains what runs after."""

    open: Callable[..., tuple]
    outputs: list[Any]
    then: Callable[[Any], Any]


@dataclass(frozen=True)
class RunsLinks:
    """The Runs tab's experiments table (a clicked row opens Query) and its two-ticked picker."""

    table: Any
    compare_pick: Any
    compare_button: Any


@dataclass(frozen=True)
class CompareLinks:
    """The Compare tab's items table with its comparison state, and its filler: two sides, compared."""

    items: Any
    pairs: Any
    fill: Opener


@dataclass(frozen=True)
class QueryLinks:
    """The Query tab opened on an experiment, or on one item of two runs side by side."""

    experiment: Opener
    pair: Opener


@dataclass(frozen=True)
class JudgesLinks:
    """The Judges tab's disagreements table: a clicked row opens its item in Query."""

    disagreements: Any
