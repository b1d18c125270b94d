"""Use cases: typed requests and results, the Python API that the CLI, the app and notebooks call.

One folder per thing a user does: runs, bias, judges, compare, study and storage (housekeeping:
merge, export, import); served.py and experiments.py, what several of them share, are their
ground.
docs/architecture.md says which folder may import which; tests/test_layering.py checks it.
"""
