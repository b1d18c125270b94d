"""The one line an empty tab shows where its results will go: where to start.

Why: the Query, Bias, Explain and Compare tabs showed nothing, or tables of headers only, before
anything was chosen, with no word of what to do. Each tab puts its hint in the output its
results replace (a summary or a page), so that the hint goes the moment something is shown, and
a tab opened again puts it back only where that output still holds nothing or a hint.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.usecases.runs.listing import holds_runs

NO_RUNS = "No runs yet: start one in the Run tab."
# Where runs exist, but this tab shows nothing yet.
PICK = {
    "query": "Choose an experiment above (its first item opens), or click a run in the Runs tab.",
    "bias": "Choose one or more experiments above (or a study), then Show bias.",
    "explain": "Choose an experiment above: its items' explanations show here.",
    "compare": "Pick two runs or experiments above as A and B, then Compare (or tick two in the Runs tab).",
    "judges": "Choose an experiment or runs above, then Show agreement; judge them first (verify) or import "
              "people's labels below.",
}
_CLASS = "pe-hint"


def hint_text(db_path: str | os.PathLike[str], tab: str) -> str:
    """The tab's hint: NO_RUNS while the store holds no run, else where to start in this tab."""
    return NO_RUNS if _no_runs(db_path) else PICK[tab]


def hint_html(db_path: str | os.PathLike[str], tab: str) -> str:
    """hint_text as a paragraph for a gr.HTML output (marked, so that is_hint knows it)."""
    return f'<p class="{_CLASS}">{html.escape(hint_text(db_path, tab), quote=False)}</p>'


def is_hint(shown: str | None) -> bool:
    """Whether an output holds nothing or only a hint: a tab opened again may then replace it."""
    text = (shown or "").strip()
    return not text or text in (NO_RUNS, *PICK.values()) or text.startswith(f'<p class="{_CLASS}">')


def _no_runs(db_path: str | os.PathLike[str]) -> bool:
    if not Path(db_path).is_file():
        return True
    try:
        return not holds_runs(Path(db_path))
    except UserError:  # busy or damaged for a moment: not "no runs" (the tab's own check says what)
        return False


def hint_guard_js() -> str:
    """A browser function (hint, shown) -> what the output should hold: the hint where the output
    holds nothing or a hint when the hint arrives, else what it shows. Why in the browser: a tab's
    select event reads the output when the tab is clicked, and on a loaded server it may answer
    after a Compare or Show clicked meanwhile; only the page knows what it shows at that moment
    (seen in the browser tests, then in CI: a refusal replaced by the hint that came late)."""
    texts = json.dumps([NO_RUNS, *PICK.values()])
    prefix = json.dumps(f'<p class="{_CLASS}">')
    return (f"(hint, shown) => {{ const s = (shown ?? '').trim(); "
            f"const isHint = !s || {texts}.includes(s) || s.startsWith({prefix}); "
            f"return (isHint && hint) ? hint : shown; }}")


def show_hint_when_free(event: Any, carrier: Any, output: Any) -> Any:
    """After `event` has put a tab's hint into `carrier` (a hidden box), write it into `output`
    only if `output` still holds nothing or a hint (hint_guard_js, decided in the browser)."""
    return event.then(None, [carrier, output], output, js=hint_guard_js(), api_visibility="private")
