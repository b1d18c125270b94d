"""What the model is shown: the prompts and labels, the study grids, and how citations are read back."""
