"""Runs: a request, its plan, the experiment and provenance, the runner and its write loop, and the backends that generate planned batches (local, Ray, a served model)."""
