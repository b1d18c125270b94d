"""Running experiments: one experiment (local, Ray or served), its options, the self-check, the
models a face offers, a dataset's check, an experiment's items, what the store holds, and the
metrics of stored answers as DataFrames."""
