"""Store housekeeping: merging stores, exporting, and importing answers, Inspect logs and labels."""
