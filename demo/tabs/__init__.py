"""One module per tab. Each has `build(app, settings, jobs)`, called inside the Blocks, which lays
the tab out and wires its events; the handlers in demo/handlers/ do the work as plain functions."""
