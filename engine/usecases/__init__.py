"""Use cases: typed requests and results behind the CLI, the app and the Python API (engine.api)."""
