"""One module per CLI command; see engine/__main__.py."""
