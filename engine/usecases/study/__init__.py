"""A study: a grid of experiments run together, and one model of label bias across it."""
