"""Presentation the faces share: how numbers and tables are worded (formatting) and how a result
reads as text or HTML (display). Imports the core only; the use cases do not import it, bar the
exceptions tests/test_layering.py names."""
