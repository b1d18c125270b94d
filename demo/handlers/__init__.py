"""Plain functions behind the app's endpoints: plain values and DataFrames in and out."""
