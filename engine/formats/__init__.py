"""The field's shared formats that results leave the tool in: Every Eval Ever's records."""
