"""The SQL tab: read-only SQL over the store through the sandbox (`/sql`), with the tables and
views, the README's example queries one click each, and the result as a table and a CSV file."""

from __future__ import annotations

from typing import Any

from demo.handlers import sql as sql_handlers
from demo.handlers.compare import sql_example
from demo.settings import AppSettings
from demo.tabs.style import TABLE
from demo.toasts import error, with_request
from engine.errors import UserError


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr
    import pandas as pd

    from demo.downloads import limits_of
    from demo.visitors import fair_key

    gate = sql_handlers.SqlGate()

    def query(sql, request):
        # Keyed by the client's address where strangers are served (sessions are free: 8 of one
        # client kept the console busy for everyone), else by the Gradio session.
        visitor = fair_key(request, settings)
        return gate.run(visitor, lambda: sql_handlers.run_sql(settings.db_path, sql, owner=visitor,
                                                              limits=limits_of(settings)))

    @with_request
    def run(sql, request=None):
        """/sql: an API caller gets a refusal as an error carrying its one line."""
        try:
            outcome = query(sql, request)
        except UserError as err:
            raise error(str(err), "sql") from None
        return outcome.frame, outcome.status, str(outcome.csv_path)

    @with_request
    def show(sql, request=None):
        """The page: a refusal is the status line, in place of the previous result."""
        try:
            outcome = query(sql, request)
        except UserError as err:
            # A named empty column: None, or a frame without columns, shows a header row of 1, 2, 3.
            return pd.DataFrame(columns=["no result"]), f"not run: {err}", None
        return outcome.frame, outcome.status, str(outcome.csv_path)

    def schema():
        rows = sql_handlers.schema_rows(settings.db_path)
        return rows or [[sql_handlers.EMPTY_STORE, "", ""]]

    with gr.Tab("SQL") as sql_tab:
        gr.Markdown("Read-only SQL (DuckDB) over the store: one query at a time, at most 1,000 rows and 10 s. "
                    "Writes, files, settings and extensions are refused.")
        with gr.Row():
            with gr.Column(scale=3):
                sql_box = gr.Code(language="sql", label="SQL", lines=6,
                                  value="SELECT run_id, rag_mode, status, n_items FROM runs LIMIT 10")
                run_button = gr.Button("Run query", variant="primary")
                api_button = gr.Button(visible=False)  # carries /sql, which raises where the page shows
                # One line of text, wrapped where it is longer than the box (a refusal names what it got).
                status = gr.Textbox(label="status", interactive=False, lines=1, max_lines=3)
                # A header that says what goes here, not Gradio's "1 | 2 | 3" before the first query.
                result = gr.Dataframe(**TABLE, label="result", interactive=False,
                                      headers=["the query's columns show here"])
                csv_file = gr.File(label="result as CSV", interactive=False)
            with gr.Column(scale=2):
                gr.Markdown("**Example queries** (from the README): a click fills the box and runs it.")
                example_buttons = [(gr.Button(title, size="sm"), sql) for title, sql in sql_handlers.examples()]
                # The compare_runs table macro on two of this store's runs (picked at the click).
                compare_example = gr.Button("Compare two runs item by item (compare_runs)", size="sm")
                # Fixed widths: left to itself the table sizes the columns list to its longest line
                # and runs wider than this column, which hides most of each list.
                # Tall enough for every table and view at once: a shorter one scrolls inside the
                # scrolling page and renders only the rows in its view. 38 at migration 025 make
                # 8,200 px at 1440 px wide; 4,000 px hid the runs table from the 38th on.
                schema_table = gr.Dataframe(**TABLE, headers=sql_handlers.SCHEMA_COLUMNS, label="tables and views",
                                            interactive=False, column_widths=["32%", "15%", "53%"],
                                            max_height=20_000)
        outputs = [result, status, csv_file]
        # One concurrency group with room for every query the gate admits: the gate, not Gradio's
        # single default slot, decides who waits (Gradio's queue had no bound per visitor).
        room: dict[str, Any] = dict(concurrency_id="sql", concurrency_limit=gate.slots + gate.max_waiting + 4)
        api_button.click(run, [sql_box], outputs, api_name="sql", api_visibility="public", **room)
        run_button.click(show, [sql_box], outputs, api_visibility="private", **room)
        for button, text in example_buttons:
            button.click(lambda text=text: text, None, sql_box, api_visibility="private").then(
                show, [sql_box], outputs, api_visibility="private", **room)
        def compare_sql():
            return sql_example(settings.db_path)

        compare_example.click(compare_sql, None, sql_box, api_visibility="private").then(
            show, [sql_box], outputs, api_visibility="private", **room)
        for trigger in (app.load, sql_tab.select):
            trigger(schema, None, schema_table, api_visibility="private")
