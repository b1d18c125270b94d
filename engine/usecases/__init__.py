"""Use cases: typed requests and results, the Python API that the CLI, the app and notebooks call."""
