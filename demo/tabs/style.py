"""The app's look in one place: what every table is given, and the page's CSS (key
numbers, job messages and column names were cut off or sat right of a 1440 px window)."""

from __future__ import annotations

from typing import Any

# Every gr.Dataframe: cells and headers wrap instead of being cut, in the page's own font.
TABLE: dict[str, Any] = {"wrap": True, "elem_classes": ["pe-table"]}

# Put on the page by app.build_app in a gr.HTML (Blocks takes no css in Gradio 6, and launch's
# would be lost where the app is served by other means, e.g. tests and Spaces' mounts).
APP_CSS = """<style>
.pe-table table { table-layout: auto; }
.pe-table th, .pe-table td, .pe-table th *, .pe-table td * {
  white-space: normal !important; font-family: var(--font) !important; font-size: var(--text-sm) !important;
}
/* Headers break between words only; cells may break a long id or path anywhere, so that the
   table fits the window rather than pushing its last columns out of it. */
.pe-table th, .pe-table th * { word-break: normal !important; overflow-wrap: normal !important; }
.pe-table td, .pe-table td * { word-break: normal !important; overflow-wrap: anywhere !important; }
.pe-table th .cell-wrap, .pe-table td .cell-wrap { overflow: visible !important; text-overflow: clip !important; }
#pe-job-banner:empty { display: none; }
#pe-job-banner progress { display: block; width: 100%; margin-top: .4em; }
#pe-css { display: none; }
/* An empty tab's one line on where to start (demo.hints), and a page's refusal in place of its results. */
.pe-hint { color: var(--body-text-color-subdued); margin: .4em 0; }
.pe-refusal { background: #fdecea; padding: .6em .9em; border-radius: 6px; overflow-wrap: anywhere; }
</style>"""
