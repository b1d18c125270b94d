"""Comparing two runs: what changed between them, and what a face offers around a comparison."""
